package atomicfile

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

func TestWrite(t *testing.T) {
	dir := t.TempDir()
	old := syscall.Umask(0o077)
	defer syscall.Umask(old)
	p := filepath.Join(dir, "cert.pem")
	// A looser file already there: replaced, and of the mode asked.
	if err := os.WriteFile(p, []byte("old"), 0o666); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, 0o666); err != nil {
		t.Fatal(err)
	}
	if err := Write(p, []byte("new"), 0o644); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Lstat(p)
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(p); string(b) != "new" || fi.Mode().Perm() != 0o644 {
		t.Errorf("file holds %q, mode %v; want \"new\", 0644 despite the umask and the old mode", b, fi.Mode().Perm())
	}
	// A symlink at the path is replaced, not followed.
	target := filepath.Join(dir, "target")
	if err := os.WriteFile(target, []byte("precious"), 0o600); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "key")
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	if err := Write(link, []byte("secret"), 0o600); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(target); string(b) != "precious" {
		t.Errorf("the write followed the symlink: its target holds %q", b)
	}
	if fi, err := os.Lstat(link); err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm() != 0o600 {
		t.Errorf("the path is %v %v; want a regular file of mode 0600", fi, err)
	}
	// Nothing else left in the directory.
	ents, _ := os.ReadDir(dir)
	if len(ents) != 3 {
		var names []string
		for _, e := range ents {
			names = append(names, e.Name())
		}
		t.Errorf("directory holds %v; want cert.pem, key, target", names)
	}
	// A missing directory is an error, not a panic.
	if err := Write(filepath.Join(dir, "no", "such"), nil, 0o600); err == nil {
		t.Error("write into a missing directory succeeded")
	}
}
