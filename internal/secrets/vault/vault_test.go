package vault_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/berth-sh/berth/internal/secrets"
	"github.com/berth-sh/berth/internal/secrets/vault"
	"github.com/berth-sh/berth/internal/store/sqlite"
)

// Rotate over a real SQLite store: every secret re-wrapped, the key file
// left holding the new key only, values open under it; a key file that
// cannot be written stops the rotation before anything changed.
func TestRotate(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	st, err := sqlite.Open(ctx, filepath.Join(dir, "berth.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	old, _ := secrets.NewKey()
	kr, _ := secrets.NewKeyring(old)
	v := vault.New(st, kr)
	for _, n := range []string{"A", "B", "C"} {
		if _, _, err := v.Put(ctx, "t", n, []byte("val-"+n)); err != nil {
			t.Fatal(err)
		}
	}
	nk, _ := secrets.NewKey()
	if _, err := v.Rotate(ctx, nk, filepath.Join(dir, "no-such-dir", "k")); err == nil {
		t.Fatal("rotation with an unwritable key file succeeded")
	}
	if ids := v.KeyIDs(); len(ids) != 1 || ids[0] != old.ID {
		t.Fatalf("a failed rotation changed the keyring: %v", ids)
	}
	kf := filepath.Join(dir, "secrets.key")
	r, err := v.Rotate(ctx, nk, kf)
	if err != nil || r.Rewrapped != 3 || r.KeyID != nk.ID || len(r.Removed) != 1 || r.Removed[0] != old.ID {
		t.Fatalf("rotate: %+v %v", r, err)
	}
	keys, err := secrets.ReadKeyFile(kf)
	if err != nil || len(keys) != 1 || keys[0].ID != nk.ID {
		t.Fatalf("key file: %v %v", keys, err)
	}
	if fi, _ := os.Stat(kf); fi.Mode().Perm() != 0o600 {
		t.Fatalf("key file mode %v", fi.Mode().Perm())
	}
	for _, n := range []string{"A", "B", "C"} {
		val, err := v.Resolve(ctx, "t", n)
		if err != nil || string(val) != "val-"+n {
			t.Fatalf("%s after rotation: %q %v", n, val, err)
		}
	}
	// A second rotation to the same key has nothing to do.
	if r, err := v.Rotate(ctx, nk, kf); err != nil || r.Rewrapped != 0 {
		t.Fatalf("rotate again: %+v %v", r, err)
	}
}
