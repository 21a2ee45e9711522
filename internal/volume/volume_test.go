package volume

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

func TestQuotaEnforcedByFilesystem(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for loop mounts")
	}
	m, err := New(t.TempDir(), 100000000, 100000000)
	if err != nil {
		t.Fatal(err)
	}
	size, inodes, err := Normalize(32<<20, 512)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Create("v1", size, inodes); err != nil {
		t.Fatal(err)
	}
	if err := m.Mount("v1"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Delete("v1") })
	var st syscall.Stat_t
	syscall.Stat(m.Path("v1"), &st)
	if st.Uid != 100000000 || st.Gid != 100000000 {
		t.Fatalf("volume root owned by %d:%d", st.Uid, st.Gid)
	}
	// Writing past the size fails with ENOSPC.
	f, err := os.Create(filepath.Join(m.Path("v1"), "big"))
	if err != nil {
		t.Fatal(err)
	}
	chunk := bytes.Repeat([]byte{1}, 1<<20)
	var werr error
	written := 0
	for i := 0; i < 64 && werr == nil; i++ {
		var n int
		n, werr = f.Write(chunk)
		written += n
		if werr == nil {
			werr = f.Sync()
		}
	}
	f.Close()
	if !errors.Is(werr, syscall.ENOSPC) {
		t.Fatalf("writing %d MiB into a 32 MiB volume: %v", written>>20, werr)
	}
	// The image never takes more than its size on the host.
	var ist syscall.Stat_t
	syscall.Stat(m.image("v1"), &ist)
	if ist.Blocks*512 > size {
		t.Fatalf("image uses %d bytes on the host, quota %d", ist.Blocks*512, size)
	}
	os.Remove(filepath.Join(m.Path("v1"), "big"))
	if err := os.WriteFile(filepath.Join(m.Path("v1"), "keep"), []byte("kept"), 0o644); err != nil {
		t.Fatal(err)
	}
	// Inode limit.
	var ierr error
	for i := 0; i < 1000 && ierr == nil; i++ {
		var g *os.File
		g, ierr = os.Create(filepath.Join(m.Path("v1"), "f"+string(rune('a'+i%26))+string(rune('0'+i/26%10))+string(rune('a'+i/260))))
		if ierr == nil {
			g.Close()
		}
	}
	if !errors.Is(ierr, syscall.ENOSPC) {
		t.Fatalf("inode limit not enforced: %v", ierr)
	}
	u, err := m.Usage("v1")
	if err != nil || u.UsedInodes < 500 {
		t.Fatalf("usage %+v %v", u, err)
	}
	// Data survives unmount and remount.
	if err := m.Unmount("v1"); err != nil {
		t.Fatal(err)
	}
	if m.Mounted("v1") {
		t.Fatal("still mounted")
	}
	if err := m.Mount("v1"); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(m.Path("v1"), "keep")); string(b) != "kept" {
		t.Fatalf("data lost across remount: %q", b)
	}
	if err := m.Delete("v1"); err != nil {
		t.Fatal(err)
	}
	if m.Exists("v1") || m.Mounted("v1") {
		t.Fatal("volume left after delete")
	}
}

func TestNormalize(t *testing.T) {
	if s, n, err := Normalize(0, 0); err != nil || s != DefaultSize || n != DefaultSize/bytesPerInode {
		t.Fatalf("defaults: %d %d %v", s, n, err)
	}
	for _, c := range [][2]int64{{1, 0}, {MaxSize + 1, 0}, {64 << 20, 10}, {64 << 20, 64 << 20}} {
		if _, _, err := Normalize(c[0], c[1]); err == nil {
			t.Errorf("accepted size %d inodes %d", c[0], c[1])
		}
	}
}
