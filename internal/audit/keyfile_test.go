package audit_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"os"
	"path/filepath"
	"testing"

	"github.com/berth-sh/berth/internal/audit"
	"github.com/berth-sh/berth/internal/store"
	"github.com/berth-sh/berth/internal/store/sqlite"
)

// TestOpenKeyFile: a shared key file is read, never made; one that is
// missing, readable by others, not a regular file or short is refused.
func TestOpenKeyFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "shared.key")
	if _, err := audit.OpenKeyFile(path); err == nil {
		t.Fatal("a missing key file was accepted")
	}
	if _, err := os.Stat(path); err == nil {
		t.Fatal("OpenKeyFile made the key file")
	}
	key := make([]byte, 32)
	rand.Read(key)
	if err := os.WriteFile(path, key, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := audit.OpenKeyFile(path); err == nil {
		t.Fatal("a world-readable key file was accepted")
	}
	if err := os.Chmod(path, 0o600); err != nil {
		t.Fatal(err)
	}
	got, err := audit.OpenKeyFile(path)
	if err != nil || !bytes.Equal(got, key) {
		t.Fatalf("OpenKeyFile = %x, %v; want the file's key", got, err)
	}
	short := filepath.Join(dir, "short.key")
	if err := os.WriteFile(short, key[:16], 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := audit.OpenKeyFile(short); err == nil {
		t.Fatal("a 16-byte key was accepted")
	}
	if _, err := audit.OpenKeyFile(dir); err == nil {
		t.Fatal("a directory was accepted as a key file")
	}
}

// TestSharedKeyVerifies: two daemons (two store handles on one database)
// sealing with the key of one --audit-key-file interleave records in one
// chain that either verifies; a daemon with its own key does not.
func TestSharedKeyVerifies(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	path := filepath.Join(dir, "shared.key")
	key := make([]byte, 32)
	rand.Read(key)
	if err := os.WriteFile(path, key, 0o600); err != nil {
		t.Fatal(err)
	}
	db := filepath.Join(dir, "berth.db")
	open := func() store.Store {
		s, err := sqlite.Open(ctx, db)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}
	logOf := func(st store.Store, key []byte) *audit.Log { return audit.New(st, key, nil) }
	ka, err := audit.OpenKeyFile(path)
	if err != nil {
		t.Fatal(err)
	}
	kb, err := audit.OpenKeyFile(path)
	if err != nil {
		t.Fatal(err)
	}
	a, b := logOf(open(), ka), logOf(open(), kb)
	for i := range 6 {
		l := a
		if i%2 == 1 {
			l = b
		}
		l.System(ctx, "", "test", "act", "target")(nil)
	}
	for name, l := range map[string]*audit.Log{"a": a, "b": b} {
		rep, err := l.Verify(ctx, store.AnyOwner)
		if err != nil || !rep.OK || rep.Checked != 12 {
			t.Errorf("daemon %s verifies %+v, %v; want ok over 12 records", name, rep, err)
		}
	}
	own, err := audit.OpenKey(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if rep, err := logOf(open(), own).Verify(ctx, store.AnyOwner); err != nil || rep.OK {
		t.Errorf("a daemon with its own key verified the shared chain: %+v, %v", rep, err)
	}
}
