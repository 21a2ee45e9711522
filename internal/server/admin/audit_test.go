package admin

import (
	"context"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"strings"
	"testing"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/internal/audit"
	"github.com/berth-sh/berth/internal/auth"
	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/internal/server/rest"
	"github.com/berth-sh/berth/internal/store"
	"github.com/berth-sh/berth/internal/store/sqlite"
)

var testAuditKey = []byte("server-test-audit-key-0123456789abcdef")

func openAuditStore(t *testing.T) store.Store {
	t.Helper()
	st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "audit.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

// TestAuditFilterRefusesBadInput: malformed times and control characters
// in the filters are 400s naming the field.
func TestAuditFilterRefusesBadInput(t *testing.T) {
	st := openAuditStore(t)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	l := audit.New(st, testAuditKey, log)
	s := &Handlers{Opts: func() Options { return Options{Audit: l} }, Log: func() *slog.Logger { return log }}
	for _, q := range []string{"since=yesterday", "until=2026-13-01T00:00:00Z", "actor=a%00b", "target=%7f", "action=" + strings.Repeat("a", 513), "limit=0", "cursor=zz"} {
		r := httptest.NewRequest("GET", "/v1/audit?"+q, nil)
		w := httptest.NewRecorder()
		s.ListAudit(w, r)
		if w.Code != http.StatusBadRequest || !strings.Contains(w.Body.String(), "invalid_argument") {
			t.Errorf("%s: %d %s", q, w.Code, w.Body.String())
		}
	}
}

// FuzzAuditFilter: whatever the query, the filter parser answers (a
// filter or ErrInvalid) and an accepted filter holds no control character.
func FuzzAuditFilter(f *testing.F) {
	for _, s := range []string{"since=2026-01-02T03:04:05Z&actor=key:abc", "target=sb1&action=POST+/v1/sandboxes", "until=x", "actor=%00", "actor=%c2%85"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, q string) {
		r := &http.Request{URL: &url.URL{RawQuery: q}}
		af, err := auditFilter(r)
		if err != nil {
			if !errors.Is(err, errdefs.ErrInvalid) {
				t.Fatalf("%q: %v is not invalid_argument", q, err)
			}
			return
		}
		for _, v := range []string{af.Actor, af.Action, af.Target} {
			if checkAuditText("x", v) != nil {
				t.Fatalf("%q: accepted %q", q, v)
			}
		}
	})
}

// TestAuditReadScope: an API key reads its own tenant's chains only; the
// host operator on the unix socket reads every tenant's.
func TestAuditReadScope(t *testing.T) {
	st := openAuditStore(t)
	ctx := context.Background()
	l := audit.New(st, testAuditKey, nil)
	for _, tenant := range []string{"", "acme"} {
		op, err := l.Begin(ctx, audit.Entry{Tenant: tenant, Actor: "key:x", Action: "POST /v1/volumes"})
		if err != nil {
			t.Fatal(err)
		}
		op.Complete("ok 201")
	}
	s := &Handlers{Opts: func() Options { return Options{Audit: l} }}
	for _, tc := range []struct {
		name string
		p    auth.Principal
		want int
	}{
		{"host operator", auth.Admin, 2},
		{"acme's admin key", auth.Principal{Actor: "key:k", KeyID: "k", Tenant: "acme", Scopes: []string{string(auth.ScopeAdmin)}}, 1},
		{"default tenant's admin key", auth.Principal{Actor: "key:d", KeyID: "d", Scopes: []string{string(auth.ScopeAdmin)}}, 1},
	} {
		r := httptest.NewRequest("GET", "/v1/audit", nil)
		r = r.WithContext(rest.WithCaller(r.Context(), tc.p))
		w := httptest.NewRecorder()
		s.ListAudit(w, r)
		var es []map[string]any
		if err := json.Unmarshal(w.Body.Bytes(), &es); err != nil || w.Code != 200 || len(es) != tc.want {
			t.Errorf("%s: %d %s; want %d entries", tc.name, w.Code, w.Body.String(), tc.want)
		}
		r = httptest.NewRequest("POST", "/v1/audit/verify", nil)
		r = r.WithContext(rest.WithCaller(r.Context(), tc.p))
		w = httptest.NewRecorder()
		s.VerifyAudit(w, r)
		var v struct {
			OK      bool
			Checked int
		}
		if err := json.Unmarshal(w.Body.Bytes(), &v); err != nil || !v.OK || v.Checked != 2*tc.want {
			t.Errorf("%s: verify %s; want ok with %d records", tc.name, w.Body.String(), 2*tc.want)
		}
	}
}

// TestAuditVerifyAnchor: POST /v1/audit/verify with an anchor checks it
// with the daemon's own key (a forged one is 400) and the chains against
// it; without a key configured the anchor check is unavailable.
func TestAuditVerifyAnchor(t *testing.T) {
	st := openAuditStore(t)
	ctx := context.Background()
	l := audit.New(st, testAuditKey, nil)
	op, err := l.Begin(ctx, audit.Entry{Tenant: "acme", Actor: "key:x", Action: "POST /v1/volumes"})
	if err != nil {
		t.Fatal(err)
	}
	op.Complete("ok 201")
	key, err := audit.OpenAnchorKey(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	other, err := audit.OpenAnchorKey(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	sign := func(k ed25519.PrivateKey) string {
		a, err := audit.NewAnchorer(st, k, filepath.Join(t.TempDir(), "a"), nil).Sign(ctx)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := json.Marshal(api.AuditVerifyRequest{Anchor: mustJSON(t, a)})
		return string(b)
	}
	var anchorKey ed25519.PublicKey
	s := &Handlers{Opts: func() Options { return Options{Audit: l, AuditAnchorKey: anchorKey} }}
	verify := func(body string) (int, string) {
		r := httptest.NewRequest("POST", "/v1/audit/verify", strings.NewReader(body))
		r.Header.Set("Content-Type", "application/json")
		r = r.WithContext(rest.WithCaller(r.Context(), auth.Admin))
		w := httptest.NewRecorder()
		s.VerifyAudit(w, r)
		return w.Code, w.Body.String()
	}
	good := sign(key)
	if code, b := verify(good); code != 503 {
		t.Errorf("no anchor key: %d %s, want 503", code, b)
	}
	anchorKey = key.Public().(ed25519.PublicKey)
	if code, b := verify(good); code != 200 || !strings.Contains(b, `"ok": true`) {
		t.Errorf("a good anchor: %d %s", code, b)
	}
	if code, b := verify(sign(other)); code != 400 {
		t.Errorf("an anchor of another key: %d %s, want 400", code, b)
	}
	if code, b := verify(`{"anchor":{"version":1}}`); code != 400 {
		t.Errorf("an unsigned anchor: %d %s, want 400", code, b)
	}
}

func mustJSON(t *testing.T, v any) json.RawMessage {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
