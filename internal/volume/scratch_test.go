package volume

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func poolUsed(t *testing.T, p *Pool) int64 {
	t.Helper()
	var st unix.Statfs_t
	if err := unix.Statfs(p.Root(), &st); err != nil {
		t.Fatal(err)
	}
	return int64(st.Blocks-st.Bfree) * st.Bsize
}

// TestScratchCapInPool checks sandboxes' disk caps where they live: an
// ext4 image per writable layer inside a real loop-mounted XFS reflink
// pool. A write past the cap fails with ENOSPC having written no more than
// the cap, the pool grows by no more than the cap and gets the space back
// when the file is deleted (discard), files past the inode cap are
// refused, and a reflink clone of a frozen layer is an independent layer
// with the same cap. It needs root and mkfs.xfs and fails without them.
func TestScratchCapInPool(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("this test needs root (loop devices, mounts)")
	}
	if _, err := exec.LookPath("mkfs.xfs"); err != nil {
		t.Fatal("this test needs mkfs.xfs (apt-get install xfsprogs)")
	}
	dataDir := t.TempDir()
	pool, err := OpenPool(dataDir, 2<<30)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := pool.Close(false); err != nil {
			t.Error(err)
		}
	})
	if !pool.Reflink() {
		t.Fatalf("pool %s has no reflink", pool.Kind())
	}
	if c, err := pool.Capacity(); err != nil || c < 1<<30 || c > 2<<30 {
		t.Fatalf("pool capacity %d, %v", c, err)
	}
	m, err := NewScratch(filepath.Join(pool.Root(), "scratch"), 100000000, 100000000, true)
	if err != nil {
		t.Fatal(err)
	}
	const capBytes, capInodes = 32 << 20, 2048
	before := poolUsed(t, pool)
	if err := m.Create("a", capBytes, capInodes); err != nil {
		t.Fatal(err)
	}
	if err := m.Mount("a"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Delete("a"); m.Delete("b") })
	if c, i, err := m.Capacity("a"); err != nil || c > capBytes || c < capBytes*3/4 || i != capInodes {
		t.Fatalf("capacity %d bytes %d inodes, %v", c, i, err)
	}

	big := filepath.Join(m.Path("a"), "big")
	f, err := os.Create(big)
	if err != nil {
		t.Fatal(err)
	}
	chunk := bytes.Repeat([]byte{7}, 1<<20)
	var written int64
	var werr error
	for written < 4*capBytes && werr == nil {
		var n int
		n, werr = f.Write(chunk)
		written += int64(n)
		if werr == nil && written%(8<<20) == 0 {
			werr = f.Sync()
		}
	}
	if werr == nil {
		werr = f.Sync()
	}
	f.Close()
	if !errors.Is(werr, syscall.ENOSPC) {
		t.Fatalf("write past the cap: %v after %d bytes, want ENOSPC", werr, written)
	}
	full := poolUsed(t, pool)
	t.Logf("cap %d: wrote %d bytes, then %v; pool used %d -> %d (+%d)", capBytes, written, werr, before, full, full-before)
	if written > capBytes {
		t.Fatalf("wrote %d bytes under a %d-byte cap", written, capBytes)
	}
	if full-before > capBytes {
		t.Fatalf("the pool grew by %d bytes under a %d-byte cap", full-before, capBytes)
	}

	// Deleting gives the space back to the pool (mounted with discard).
	if err := os.Remove(big); err != nil {
		t.Fatal(err)
	}
	// ext4 discards freed extents after the transaction commits, and the
	// loop device punches them out of the image: give it a moment.
	freed := poolUsed(t, pool)
	for i := 0; i < 60 && freed > before+capBytes/4; i++ {
		syscall.Sync()
		time.Sleep(50 * time.Millisecond)
		freed = poolUsed(t, pool)
	}
	if freed > before+capBytes/4 {
		t.Errorf("pool used %d after the delete, %d before the write: discard does not reach the pool", freed, before)
	}

	// Inodes.
	var made int
	var cerr error
	for made < 2*capInodes {
		g, err := os.Create(filepath.Join(m.Path("a"), "f"+strconv.Itoa(made)))
		if err != nil {
			cerr = err
			break
		}
		g.Close()
		made++
	}
	if !errors.Is(cerr, syscall.ENOSPC) || made > capInodes {
		t.Fatalf("created %d files under a %d-inode cap, then %v", made, capInodes, cerr)
	}
	t.Logf("inode cap %d: created %d files, then %v", capInodes, made, cerr)
	if err := os.WriteFile(filepath.Join(m.Path("a"), "f0"), []byte("parent"), 0o644); err != nil {
		t.Fatal(err)
	}

	// A new layer of the same cap is a clone of the same empty image, and
	// empty.
	if ents, _ := os.ReadDir(filepath.Join(pool.Root(), "scratch-base")); len(ents) != 1 {
		t.Errorf("base images: %v, want one", ents)
	}
	if err := m.Create("c", capBytes, capInodes); err != nil {
		t.Fatal(err)
	}
	if err := m.Mount("c"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(m.Path("c"), "f0")); err == nil {
		t.Fatal("a new layer sees another layer's files")
	}
	if err := m.Delete("c"); err != nil {
		t.Fatal(err)
	}

	// A clone of the frozen layer is its own.
	if err := m.Freeze("a"); err != nil {
		t.Fatal(err)
	}
	stage := filepath.Join(pool.Root(), "stage.img")
	err = CloneFile(m.Image("a"), stage)
	if terr := m.Thaw("a"); err == nil {
		err = terr
	}
	if err != nil {
		t.Fatal(err)
	}
	defer os.Remove(stage)
	if err := m.CreateFrom("b", stage); err != nil {
		t.Fatal(err)
	}
	if err := m.Mount("b"); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(m.Path("b"), "f0")); string(b) != "parent" {
		t.Fatalf("clone reads %q", b)
	}
	if err := os.WriteFile(filepath.Join(m.Path("b"), "f0"), []byte("child"), 0o644); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(m.Path("a"), "f0")); string(b) != "parent" {
		t.Fatalf("the clone's write reached the original: %q", b)
	}
	if c, i, err := m.Capacity("b"); err != nil || c > capBytes || i != capInodes {
		t.Fatalf("clone capacity %d bytes %d inodes, %v", c, i, err)
	}
	for _, id := range []string{"a", "b"} {
		if err := m.Delete(id); err != nil {
			t.Fatal(err)
		}
		if m.Exists(id) || m.Mounted(id) {
			t.Fatalf("layer %s left after delete", id)
		}
	}
}

// TestRemadeImageIsNotTheLazilyUnmountedOne: a layer's filesystem that
// could only be detached lazily (something still held it) keeps its loop
// device bound to the deleted image; a new image made at the same path
// must get a new filesystem, not that one (a restarted sandbox would see
// its discarded files again).
func TestRemadeImageIsNotTheLazilyUnmountedOne(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("this test needs root (loop devices, mounts)")
	}
	m, err := NewScratch(t.TempDir(), 100000000, 100000000, false)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Create("a", 16<<20, 1024); err != nil {
		t.Fatal(err)
	}
	if err := m.Mount("a"); err != nil {
		t.Fatal(err)
	}
	held, err := os.Create(filepath.Join(m.Path("a"), "old"))
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	if err := unix.Unmount(m.Path("a"), unix.MNT_DETACH); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(m.Image("a")); err != nil {
		t.Fatal(err)
	}
	if err := m.Create("a", 16<<20, 1024); err != nil {
		t.Fatal(err)
	}
	if err := m.Mount("a"); err != nil {
		t.Fatal(err)
	}
	defer m.Delete("a")
	if _, err := os.Stat(filepath.Join(m.Path("a"), "old")); err == nil {
		t.Fatal("the new image mounted the old, lazily unmounted filesystem")
	}
}
