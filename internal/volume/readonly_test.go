package volume

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestReadOnlyAfterHostDiskFull fills the filesystem under a volume's
// image (a 24 MiB tmpfs under a 64 MiB sparse image) while the volume is
// written: ext4 stops taking writes. On kernels 6.x statfs still says
// read-write (the volume went read-only silently: no event, nothing in
// inspect or doctor); Usage must say read-only. A fresh mount, once there
// is room, takes writes again (what a stop and start of its sandbox does).
func TestReadOnlyAfterHostDiskFull(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("needs root for loop mounts")
	}
	root := t.TempDir()
	if err := unix.Mount("volume-test", root, "tmpfs", 0, "size=24m"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Unmount(root, unix.MNT_DETACH) })
	m, err := New(root, 100000000, 100000000)
	if err != nil {
		t.Fatal(err)
	}
	size, inodes, err := Normalize(64<<20, 512)
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
	if u, err := m.Usage("v1"); err != nil || u.ReadOnly {
		t.Fatalf("a fresh volume: %+v %v", u, err)
	}
	f, err := os.Create(filepath.Join(m.Path("v1"), "big"))
	if err != nil {
		t.Fatal(err)
	}
	chunk := bytes.Repeat([]byte{1}, 1<<20)
	var werr error
	for i := 0; i < 48 && werr == nil; i++ {
		if _, werr = f.Write(chunk); werr == nil {
			werr = f.Sync()
		}
	}
	f.Close()
	if werr == nil {
		t.Fatal("48 MiB written into a volume over a 24 MiB host filesystem")
	}
	// The journal aborted with the failed write; ext4 records its
	// emergency read-only state at the next change a writer tries (the
	// sandbox's processes go on writing), which fails.
	var u Usage
	for i := 0; i < 100; i++ {
		if err := os.WriteFile(filepath.Join(m.Path("v1"), "next"), nil, 0o600); err == nil {
			t.Fatal("a volume whose journal aborted takes a new file")
		}
		if u, err = m.Usage("v1"); err != nil || u.ReadOnly {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil || !u.ReadOnly {
		t.Fatalf("after the host filesystem filled (write error %v): usage %+v %v, want read-only", werr, u, err)
	}
	if err := os.WriteFile(filepath.Join(m.Path("v1"), "probe"), nil, 0o600); err == nil {
		t.Fatal("the volume reported read-only takes writes")
	}
	// Room again: the filesystem stays read-only until it is mounted anew.
	if err := unix.Mount("", root, "", unix.MS_REMOUNT, "size=256m"); err != nil {
		t.Fatal(err)
	}
	if u, err := m.Usage("v1"); err != nil || !u.ReadOnly {
		t.Fatalf("with room again, before a new mount: %+v %v", u, err)
	}
	if err := m.Unmount("v1"); err != nil {
		t.Fatal(err)
	}
	if err := m.Mount("v1"); err != nil {
		t.Fatal(err)
	}
	if u, err := m.Usage("v1"); err != nil || u.ReadOnly {
		t.Fatalf("mounted anew with room: %+v %v", u, err)
	}
	if err := os.WriteFile(filepath.Join(m.Path("v1"), "probe"), []byte("ok"), 0o600); err != nil {
		t.Fatalf("mounted anew with room: %v", err)
	}
}

func TestEmergencyROOption(t *testing.T) {
	for in, want := range map[string]bool{
		"rw\nbsddf\nerrors=remount-ro\n":        false,
		"rw\nerrors=remount-ro\nemergency_ro\n": true,
		"rw\nno_emergency_ro_here\n":            false,
		"":                                      false,
		"rw bsddf errors=remount-ro emergency_ro\n  ": true,
	} {
		if got := emergencyRO(in); got != want {
			t.Errorf("emergencyRO(%q) = %v, want %v", in, got, want)
		}
	}
}
