package overlay

import (
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// TestMounted: the statx answer agrees with the mount table for a mount
// point, a dir inside it, a plain dir, a missing path and a symlink to the
// mount point (not followed).
func TestMounted(t *testing.T) {
	dir := t.TempDir()
	mp := filepath.Join(dir, "mp")
	plain := filepath.Join(dir, "plain")
	for _, d := range []string{mp, plain} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := unix.Mount("tmpfs", mp, "tmpfs", 0, "size=1m"); err != nil {
		t.Fatalf("mount tmpfs (the test needs root): %v", err)
	}
	t.Cleanup(func() {
		if err := unix.Unmount(mp, 0); err != nil {
			t.Errorf("unmount %s: %v", mp, err)
		}
	})
	if err := os.Mkdir(filepath.Join(mp, "inner"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(mp, filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string]bool{
		mp:                          true,
		mp + "/":                    true,
		filepath.Join(mp, "inner"):  false,
		plain:                       false,
		filepath.Join(dir, "gone"):  false,
		filepath.Join(dir, "link"):  false,
		filepath.Join(plain, "x/y"): false,
	} {
		got, err := Mounted(path)
		if err != nil || got != want {
			t.Errorf("Mounted(%s) = %v, %v; want %v", path, got, err, want)
		}
		table, err := mountedInTable(path)
		if err != nil || table != want {
			t.Errorf("mountedInTable(%s) = %v, %v; want %v", path, table, err, want)
		}
	}
}
