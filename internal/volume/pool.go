package volume

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/berth-sh/berth/internal/overlay"
)

// Pool is the filesystem that holds berth's writable data: volume images,
// sandboxes' writable layers and snapshots. Fork and snapshot copy them by
// reflink (FICLONE), which costs metadata, not data, so the pool must
// support it. If the data dir's own filesystem does (XFS with reflink,
// btrfs), the pool is a directory there; otherwise berth makes an XFS
// filesystem with reflink on a sparse image file in the data dir and mounts
// it through a loop device. Without mkfs.xfs it falls back to a plain
// directory, and copies become real copies (documented; slower).
type Pool struct {
	root    string
	image   string // "" unless the pool is a loop-mounted image
	reflink bool
}

// DefaultPoolSize is the size of a pool image: sparse, so it takes host
// disk only as it fills.
const DefaultPoolSize = 256 << 30

// OpenPool opens (creating and mounting if needed) the pool under dataDir.
func OpenPool(dataDir string, size int64) (*Pool, error) {
	root := filepath.Join(dataDir, "pool")
	if err := os.MkdirAll(root, 0o711); err != nil {
		return nil, err
	}
	if mounted, err := overlay.Mounted(root); err != nil {
		return nil, err
	} else if mounted || reflinkWorks(root) {
		return &Pool{root: root, image: poolImageIfMounted(dataDir, mounted), reflink: reflinkWorks(root)}, nil
	}
	if _, err := exec.LookPath("mkfs.xfs"); err != nil {
		return &Pool{root: root}, nil // copy fallback
	}
	if size <= 0 {
		size = DefaultPoolSize
	}
	img := filepath.Join(dataDir, "pool.img")
	if _, err := os.Stat(img); errors.Is(err, os.ErrNotExist) {
		tmp := img + ".tmp"
		if err := os.WriteFile(tmp, nil, 0o600); err != nil {
			return nil, err
		}
		if err := os.Truncate(tmp, size); err != nil {
			return nil, err
		}
		if out, err := exec.Command("mkfs.xfs", "-q", "-f", "-m", "reflink=1", "-L", "berth-pool", tmp).CombinedOutput(); err != nil {
			os.Remove(tmp)
			return nil, fmt.Errorf("mkfs.xfs: %w: %s", err, strings.TrimSpace(string(out)))
		}
		if err := os.Rename(tmp, img); err != nil {
			return nil, err
		}
	}
	loop, err := attachLoop(img)
	if err != nil {
		return nil, err
	}
	defer loop.Close()
	// discard: space freed in the pool is given back to the host.
	if err := unix.Mount(loop.Name(), root, "xfs", unix.MS_NOSUID|unix.MS_NODEV, "discard"); err != nil {
		return nil, fmt.Errorf("mounting the storage pool: %w", err)
	}
	if err := os.Chmod(root, 0o711); err != nil {
		return nil, err
	}
	return &Pool{root: root, image: img, reflink: reflinkWorks(root)}, nil
}

func poolImageIfMounted(dataDir string, mounted bool) string {
	if mounted {
		return filepath.Join(dataDir, "pool.img")
	}
	return ""
}

// Root is the pool's directory.
func (p *Pool) Root() string { return p.root }

// Reflink reports whether copies in the pool are copy-on-write.
func (p *Pool) Reflink() bool { return p.reflink }

// Kind describes the pool for humans.
func (p *Pool) Kind() string {
	switch {
	case p.image != "" && p.reflink:
		return "xfs-reflink on " + p.image
	case p.reflink:
		return "reflink-capable data dir"
	default:
		return "copy fallback (no reflink)"
	}
}

// Close unmounts a loop-mounted pool if nothing uses it; inUse says
// whether anything outside the pool (an overlay whose writable layer is in
// it) still does. A busy pool stays mounted: never detached lazily, which
// would leave it alive but unreachable.
func (p *Pool) Close(inUse bool) error {
	if p.image == "" || inUse {
		return nil
	}
	ms, err := overlay.MountsUnder(p.root)
	if err != nil || len(ms) > 1 {
		return err
	}
	// A writable layer's filesystem just unmounted may hold the pool a
	// little longer (a lazily detached one whose last user is exiting, a
	// mount namespace being set up for another container that copied it):
	// retry for about a second.
	for i := 0; ; i++ {
		err := unix.Unmount(p.root, 0)
		switch {
		case err == nil:
			return waitDetached(p.image, detachWait)
		case errors.Is(err, unix.EINVAL):
			return nil
		case errors.Is(err, unix.EBUSY) && i < 20:
			time.Sleep(time.Duration(i+1) * 5 * time.Millisecond)
		case errors.Is(err, unix.EBUSY):
			return nil // stays mounted, never detached lazily
		default:
			return err
		}
	}
}

// reflinkWorks tries a FICLONE between two files in dir.
func reflinkWorks(dir string) bool {
	a, err := os.CreateTemp(dir, ".reflink-probe-")
	if err != nil {
		return false
	}
	defer os.Remove(a.Name())
	defer a.Close()
	if _, err := a.WriteString("probe"); err != nil {
		return false
	}
	b, err := os.CreateTemp(dir, ".reflink-probe-")
	if err != nil {
		return false
	}
	defer os.Remove(b.Name())
	defer b.Close()
	return unix.IoctlFileClone(int(b.Fd()), int(a.Fd())) == nil
}

// CloneFile copies src to dst (which must not exist) by reflink where the
// filesystem allows, else by a sparse-aware copy. dst gets src's mode.
func CloneFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	st, err := in.Stat()
	if err != nil {
		return err
	}
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_EXCL|os.O_WRONLY, st.Mode().Perm())
	if err != nil {
		return err
	}
	ok := false
	defer func() {
		out.Close()
		if !ok {
			os.Remove(dst)
		}
	}()
	if err := unix.IoctlFileClone(int(out.Fd()), int(in.Fd())); err != nil {
		// copy_file_range keeps holes and lets the kernel share extents
		// where it can.
		if _, err := io.Copy(out, in); err != nil {
			return err
		}
		if err := out.Truncate(st.Size()); err != nil {
			return err
		}
	}
	if err := out.Sync(); err != nil {
		return err
	}
	ok = true
	return nil
}

// CloneTree copies the directory tree src to dst (which must not exist),
// preserving ownership, modes, xattrs (overlay whiteouts and opaque
// markers included) and times, by reflink where the filesystem allows.
func CloneTree(src, dst string) error {
	if _, err := os.Lstat(src); errors.Is(err, os.ErrNotExist) {
		return os.MkdirAll(dst, 0o755)
	}
	out, err := exec.Command("cp", "-a", "--reflink=auto", "--", src, dst).CombinedOutput()
	if err != nil {
		return fmt.Errorf("copying %s: %w: %s", src, err, strings.TrimSpace(string(out)))
	}
	return nil
}

// CloneTreeInto copies the contents of directory src into the existing
// directory dst (dst itself takes src's owner, mode and xattrs), like
// CloneTree.
func CloneTreeInto(src, dst string) error {
	out, err := exec.Command("cp", "-a", "--reflink=auto", "--", src+"/.", dst).CombinedOutput()
	if err != nil {
		return fmt.Errorf("copying %s: %w: %s", src, err, strings.TrimSpace(string(out)))
	}
	return nil
}

// Capacity is the size of the pool's filesystem in bytes.
func (p *Pool) Capacity() (int64, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(p.root, &st); err != nil {
		return 0, err
	}
	return int64(st.Blocks) * st.Bsize, nil
}

// Filesystem freeze ioctls (linux/fs.h: _IOWR('X', 119/120, int)).
const (
	fifreeze = 0xc0045877
	fithaw   = 0xc0045878
)

// Freeze flushes and freezes volume id's filesystem (FIFREEZE): its image
// is then crash-consistent on disk until Thaw. Writers block meanwhile.
func (m *Manager) Freeze(id string) error {
	if err := FreezeFS(m.Path(id)); err != nil {
		return fmt.Errorf("freezing volume %s: %w", id, err)
	}
	return nil
}

// Thaw undoes Freeze.
func (m *Manager) Thaw(id string) error {
	if _, err := ThawFS(m.Path(id)); err != nil {
		return fmt.Errorf("thawing volume %s: %w", id, err)
	}
	return nil
}

// openFS opens the mount point of a filesystem for its freeze ioctls.
// Opening for reading does not block on a frozen filesystem (atime
// updates are skipped there, not waited for).
func openFS(mp string) (int, error) {
	return unix.Open(mp, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOATIME|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0)
}

// FreezeFS flushes and freezes the filesystem mounted at mp (FIFREEZE);
// one already frozen is no error.
func FreezeFS(mp string) error {
	fd, err := openFS(mp)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	if _, err := unix.IoctlRetInt(fd, fifreeze); err != nil && !errors.Is(err, unix.EBUSY) {
		return err
	}
	return nil
}

// ThawFS undoes a freeze of the filesystem mounted at mp (FITHAW) and
// reports whether it was frozen; one that is not is no error.
func ThawFS(mp string) (bool, error) {
	fd, err := openFS(mp)
	if err != nil {
		return false, err
	}
	defer unix.Close(fd)
	if _, err := unix.IoctlRetInt(fd, fithaw); err != nil {
		if errors.Is(err, unix.EINVAL) {
			return false, nil
		}
		return false, fmt.Errorf("FITHAW: %w", err)
	}
	return true, nil
}

// FrozenFS reports whether the filesystem mounted at mp is frozen. There
// is no read-only question for it: a second FIFREEZE answers EBUSY on a
// frozen filesystem; on a thawed one it freezes it, which is undone at
// once (a flush, a few ms of writers waiting). The caller keeps anything
// that may freeze it meanwhile away.
func FrozenFS(mp string) (bool, error) {
	fd, err := openFS(mp)
	if err != nil {
		return false, err
	}
	defer unix.Close(fd)
	if _, err := unix.IoctlRetInt(fd, fifreeze); err != nil {
		if errors.Is(err, unix.EBUSY) {
			return true, nil
		}
		return false, err
	}
	_, err = unix.IoctlRetInt(fd, fithaw)
	return false, err
}

// Image returns the path of volume id's image file.
func (m *Manager) Image(id string) string { return m.image(id) }

// CreateFrom makes volume id as a copy-on-write clone of an image file.
func (m *Manager) CreateFrom(id, srcImage string) error {
	if err := os.MkdirAll(m.Path(id), 0o711); err != nil {
		return err
	}
	tmp := m.image(id) + ".tmp"
	os.Remove(tmp)
	if err := CloneFile(srcImage, tmp); err != nil {
		return err
	}
	return os.Rename(tmp, m.image(id))
}

// waitDetached waits until no loop device is bound to image: the kernel
// clears an autoclear device after the unmount returns, from a work queue,
// and a daemon that reports its pool closed must not leave it to chance
// (a next open would otherwise find the device still bound). It gives up
// after limit with an error naming the device. The work queue runs late
// on a loaded host (seen: over 3 s at load 50 on 2 cores), so the limit
// is generous; an idle host takes milliseconds.
func waitDetached(image string, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for {
		dev, bound := findLoop(image)
		if !bound {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("unmounted, but %s still holds %s after %s", dev, image, limit)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
