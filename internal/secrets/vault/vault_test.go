package vault_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/berth-sh/berth/internal/failpoint"
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

// A rotation that fails at any of its steps (re-wrapping a secret, after
// the re-wrap before the key file is cut to the new key) keeps both keys
// in the file: a daemon started from that file opens every secret, and
// rotating again finishes the job. Not parallel: failpoints are the
// process's.
func TestRotateFailsAtEachStep(t *testing.T) {
	for _, point := range []string{"secrets.rewrap", "secrets.rotate.after-rewrap"} {
		t.Run(point, func(t *testing.T) {
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
			names := []string{"A", "B", "C"}
			for _, n := range names {
				if _, _, err := v.Put(ctx, "t", n, []byte("val-"+n)); err != nil {
					t.Fatal(err)
				}
			}
			kf := filepath.Join(dir, "secrets.key")
			nk, _ := secrets.NewKey()
			disarm, err := failpoint.Arm(point + "=1*return(injected)")
			if err != nil {
				t.Fatal(err)
			}
			_, err = v.Rotate(ctx, nk, kf)
			disarm()
			if err == nil || !strings.Contains(err.Error(), "failpoint "+point) {
				t.Fatalf("rotation with %s failing: %v", point, err)
			}
			keys, err := secrets.ReadKeyFile(kf)
			if err != nil || len(keys) != 2 {
				t.Fatalf("key file after the failed rotation: %v %v", keys, err)
			}
			// A daemon started now, from the file.
			kr2, err := secrets.NewKeyring(keys...)
			if err != nil {
				t.Fatal(err)
			}
			v2 := vault.New(st, kr2)
			for _, n := range names {
				if val, err := v2.Resolve(ctx, "t", n); err != nil || string(val) != "val-"+n {
					t.Fatalf("%s after the failed rotation: %q %v", n, val, err)
				}
			}
			if _, err := v2.Rotate(ctx, nk, kf); err != nil {
				t.Fatalf("rotating again: %v", err)
			}
			if keys, err := secrets.ReadKeyFile(kf); err != nil || len(keys) != 1 || keys[0].ID != nk.ID {
				t.Fatalf("key file after rotating again: %v %v", keys, err)
			}
			only, _ := secrets.NewKeyring(nk)
			v3 := vault.New(st, only)
			for _, n := range names {
				if val, err := v3.Resolve(ctx, "t", n); err != nil || string(val) != "val-"+n {
					t.Fatalf("%s under the new key alone: %q %v", n, val, err)
				}
			}
		})
	}
}
