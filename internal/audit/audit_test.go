package audit

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/berth-sh/berth/internal/store"
)

// TestOpenKey: the key is made once, 0600, and read back the same; a
// short key file is refused rather than used.
func TestOpenKey(t *testing.T) {
	dir := t.TempDir()
	k1, err := OpenKey(dir)
	if err != nil || len(k1) != 32 {
		t.Fatalf("OpenKey = %d bytes, %v", len(k1), err)
	}
	fi, err := os.Stat(filepath.Join(dir, KeyFile))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("key file mode %v, %v; want 0600", fi.Mode(), err)
	}
	k2, err := OpenKey(dir)
	if err != nil || !bytes.Equal(k1, k2) {
		t.Fatalf("reopened key differs (%v)", err)
	}
	if err := os.WriteFile(filepath.Join(dir, KeyFile), []byte("short"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := OpenKey(dir); err == nil {
		t.Fatal("a 5-byte audit key was accepted")
	}
}

// TestSealCoversEveryField: changing any sealed field changes the seal,
// and moving bytes between adjacent fields does too (the encoding is
// length-prefixed).
func TestSealCoversEveryField(t *testing.T) {
	key := []byte("unit-test-audit-key-0123456789abcdef")
	base := store.AuditRecord{Tenant: "t", Seq: 2, Kind: store.AuditBegin, Ref: 0, Time: time.UnixMicro(1700000000000000),
		Actor: "key:a", Action: "POST /v1/x", Target: "id", RequestID: "r", Source: "s", Result: "", PrevHash: "p"}
	want := Seal(key, &base)
	for name, edit := range map[string]func(r *store.AuditRecord){
		"tenant":      func(r *store.AuditRecord) { r.Tenant = "u" },
		"seq":         func(r *store.AuditRecord) { r.Seq = 3 },
		"kind":        func(r *store.AuditRecord) { r.Kind = store.AuditOutcome },
		"ref":         func(r *store.AuditRecord) { r.Ref = 1 },
		"time":        func(r *store.AuditRecord) { r.Time = r.Time.Add(time.Microsecond) },
		"actor":       func(r *store.AuditRecord) { r.Actor = "key:b" },
		"action":      func(r *store.AuditRecord) { r.Action = "DELETE /v1/x" },
		"target":      func(r *store.AuditRecord) { r.Target = "other" },
		"request id":  func(r *store.AuditRecord) { r.RequestID = "q" },
		"source":      func(r *store.AuditRecord) { r.Source = "z" },
		"result":      func(r *store.AuditRecord) { r.Result = "ok" },
		"prev hash":   func(r *store.AuditRecord) { r.PrevHash = "q" },
		"field shift": func(r *store.AuditRecord) { r.Actor, r.Action = "key:aPOST", " /v1/x" },
	} {
		r := base
		edit(&r)
		if Seal(key, &r) == want {
			t.Errorf("changing the %s left the seal unchanged", name)
		}
	}
	r := base
	r.ID, r.Hash = 99, "anything"
	if Seal(key, &r) != want {
		t.Error("the row id or the stored hash changed the seal: they are not sealed fields")
	}
	if Seal([]byte("another-key-0123456789abcdef0123456"), &base) == want {
		t.Error("another key gave the same seal")
	}
}
