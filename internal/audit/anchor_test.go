package audit_test

import (
	"context"
	"crypto/ed25519"
	"database/sql"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/berth-sh/berth/internal/audit"
	"github.com/berth-sh/berth/internal/store"
	"github.com/berth-sh/berth/internal/store/sqlite"
)

// TestAnchorDetectsRewind: deleting the last records of a chain and
// rewinding its head row to match passes Verify (documented: the database
// alone cannot tell), and fails VerifyAnchor against an anchor signed
// before the deletion. An anchor edited, or signed by another key, is
// refused; without records removed the anchor check passes, and records
// appended after the anchor are fine.
func TestAnchorDetectsRewind(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	dbPath := filepath.Join(dir, "berth.db")
	st, err := sqlite.Open(ctx, dbPath)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	l := audit.New(st, []byte("unit-test-audit-key-0123456789abcdef"), nil)
	act := func(tenant, action string) {
		op, err := l.Begin(ctx, audit.Entry{Tenant: tenant, Actor: "key:k", Action: action, Target: "x"})
		if err != nil {
			t.Fatal(err)
		}
		op.Complete("ok")
	}
	for i := range 5 {
		act("acme", "POST /v1/sandboxes/"+string(rune('a'+i)))
		act("", "POST /v1/tenants")
	}
	key, err := audit.OpenAnchorKey(dir)
	if err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(filepath.Join(dir, audit.AnchorKeyFile)); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("anchor key mode: %v %v", fi.Mode(), err)
	}
	anchorPath := audit.DefaultAnchorPath(filepath.Join(dir, "data"))
	an := audit.NewAnchorer(st, key, anchorPath, nil)
	if err := an.Write(ctx); err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(anchorPath)
	if err != nil {
		t.Fatal(err)
	}
	a, err := audit.ParseAnchor(raw)
	if err != nil {
		t.Fatal(err)
	}
	pub := key.Public().(ed25519.PublicKey)
	if err := audit.CheckSignature(a, pub); err != nil {
		t.Fatal(err)
	}
	if h := a.Heads["acme"]; h.Seq != 10 {
		t.Fatalf("anchored head of acme: %+v, want seq 10", h)
	}
	// Intact, and grown since: the anchor holds.
	act("acme", "DELETE /v1/sandboxes/a")
	if rep, err := l.VerifyAnchor(ctx, store.AnyOwner, a); err != nil || !rep.OK {
		t.Fatalf("intact chain against its anchor: %+v %v", rep, err)
	}

	// The attack: cut acme's chain to 6 records and rewind its head row.
	db, err := sql.Open("sqlite", dbPath)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Exec(`DELETE FROM audit_log WHERE tenant = 'acme' AND seq > 6`); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`UPDATE audit_heads SET seq = 6, hash = (SELECT hash FROM audit_log WHERE tenant = 'acme' AND seq = 6) WHERE tenant = 'acme'`); err != nil {
		t.Fatal(err)
	}
	rep, err := l.Verify(ctx, store.AnyOwner)
	if err != nil || !rep.OK {
		t.Fatalf("without the anchor the rewind is not seen (as documented), but Verify said %+v %v", rep, err)
	}
	rep, err = l.VerifyAnchor(ctx, store.AnyOwner, a)
	if err != nil {
		t.Fatal(err)
	}
	if rep.OK || rep.Bad == nil || rep.Bad.Tenant != "acme" || !strings.Contains(rep.Bad.Reason, "rewound") {
		t.Fatalf("the rewound chain passed its anchor: %+v", rep)
	}
	t.Logf("with the anchor: %s", rep.Bad.Reason)
	// A tenant's view checks only its own chain.
	if rep, err := l.VerifyAnchor(ctx, store.OwnedBy("other"), a); err != nil || !rep.OK {
		t.Fatalf("another tenant's view: %+v %v", rep, err)
	}

	// An anchor edited to match the rewind, or signed by another key.
	var edited audit.Anchor
	if err := json.Unmarshal(raw, &edited); err != nil {
		t.Fatal(err)
	}
	h := edited.Heads["acme"]
	h.Seq = 6
	edited.Heads["acme"] = h
	if audit.CheckSignature(&edited, pub) == nil {
		t.Fatal("an edited anchor passed its signature check")
	}
	other, err := audit.OpenAnchorKey(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	forged, err := audit.NewAnchorer(st, other, filepath.Join(t.TempDir(), "a.json"), nil).Sign(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if audit.CheckSignature(forged, pub) == nil {
		t.Fatal("an anchor signed by another key passed")
	}
	for _, bad := range []string{"", "{}", `{"version":1,"heads":{},"sig":""}`, `{"version":2,"sig":"00"}`, `{"version":1,"sig":"00","extra":1}`} {
		if _, err := audit.ParseAnchor([]byte(bad)); err == nil {
			t.Errorf("ParseAnchor(%q) accepted", bad)
		}
	}
}

// FuzzParseAnchor: whatever the file, ParseAnchor refuses it or returns an
// anchor within bounds, and a signature check never panics.
func FuzzParseAnchor(f *testing.F) {
	f.Add([]byte(`{"version":1,"time":"2026-01-01T00:00:00Z","heads":{"a":{"seq":3,"hash":"ab"}},"key":"","sig":"00"}`))
	f.Add([]byte(`{"version":1,"heads":{"":{"seq":-1,"hash":""}},"sig":"zz"}`))
	f.Add([]byte(`[]`))
	pub := make(ed25519.PublicKey, ed25519.PublicKeySize)
	f.Fuzz(func(t *testing.T, b []byte) {
		a, err := audit.ParseAnchor(b)
		if err != nil {
			return
		}
		if a.Version != 1 || a.Sig == "" {
			t.Fatalf("accepted %+v", a)
		}
		for _, h := range a.Heads {
			if h.Seq < 0 {
				t.Fatalf("negative seq accepted: %+v", a)
			}
		}
		_ = audit.CheckSignature(a, pub)
	})
}

// TestAnchorWebhook: with a webhook each anchor written is POSTed to it
// as well, signed as the file's is; a webhook that fails leaves the file
// written; a URL that is not http(s) is refused.
func TestAnchorWebhook(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	st, err := sqlite.Open(ctx, filepath.Join(dir, "berth.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	l := audit.New(st, []byte("unit-test-audit-key-0123456789abcdef"), nil)
	op, err := l.Begin(ctx, audit.Entry{Tenant: "acme", Actor: "key:k", Action: "POST /v1/sandboxes"})
	if err != nil {
		t.Fatal(err)
	}
	op.Complete("ok")
	key, err := audit.OpenAnchorKey(dir)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var got [][]byte
	status := http.StatusOK
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		defer mu.Unlock()
		if r.Method == http.MethodPost && r.Header.Get("Content-Type") == "application/json" {
			got = append(got, b)
		}
		w.WriteHeader(status)
	}))
	defer hook.Close()
	an := audit.NewAnchorer(st, key, filepath.Join(dir, "anchor.json"), nil)
	if err := an.PostTo("ftp://example.invalid/x", nil); err == nil {
		t.Error("an ftp URL was taken")
	}
	if err := an.PostTo(hook.URL+"/anchors", hook.Client()); err != nil {
		t.Fatal(err)
	}
	if err := an.Write(ctx); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	if len(got) != 1 {
		t.Fatalf("the webhook got %d anchors, want 1", len(got))
	}
	a, err := audit.ParseAnchor(got[0])
	mu.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	if err := audit.CheckSignature(a, key.Public().(ed25519.PublicKey)); err != nil || a.Heads["acme"].Seq == 0 {
		t.Fatalf("the posted anchor: %+v %v", a, err)
	}
	mu.Lock()
	status = http.StatusInternalServerError
	mu.Unlock()
	if err := os.Remove(filepath.Join(dir, "anchor.json")); err != nil {
		t.Fatal(err)
	}
	if err := an.Write(ctx); err != nil {
		t.Fatalf("a failing webhook failed the write: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "anchor.json")); err != nil {
		t.Fatalf("a failing webhook left no file: %v", err)
	}
}
