// Package volume manages berth's named, quota-limited filesystems. Each
// volume is an ext4 filesystem in a sparse image file under the data dir,
// mounted through a loop device when a sandbox uses it. The filesystem
// itself enforces the quota: a write past the size fails with ENOSPC
// inside the sandbox and the host's disk never holds more than the image's
// size; the inode count is fixed at mkfs time. Loop devices are configured
// with autoclear, so unmounting a volume also releases its device.
//
// The same images are sandboxes' disk-capped writable root layers
// (NewScratch). The storage pool holds volume images, writable-layer images
// and snapshots on a filesystem with reflink (the data dir itself, or XFS
// reflink=1 on a sparse image made here), so fork and snapshot clone
// metadata, not data; without mkfs.xfs it falls back to real copies. Why
// this design, and the measurements: docs/storage.md.
package volume

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/internal/overlay"
)

// Limits of a volume.
const (
	DefaultSize = 1 << 30
	MinSize     = 16 << 20
	MaxSize     = 16 << 40
	// bytesPerInode sets the default inode count: one per 16 KiB.
	bytesPerInode = 16 << 10
)

// Manager owns the volumes under one root directory.
type Manager struct {
	root      string
	uid, gid  int    // owner of a new volume's root dir (sandbox root on the host)
	mountOpts string // filesystem options of Mount
	baseDir   string // empty images to clone (see base); "": mkfs each time
}

// New returns a Manager for volumes under root, whose top directory is
// owned by uid:gid (sandbox root as the host sees it).
func New(root string, uid, gid int) (*Manager, error) {
	if err := os.MkdirAll(root, 0o711); err != nil {
		return nil, err
	}
	if _, err := exec.LookPath("mkfs.ext4"); err != nil {
		return nil, fmt.Errorf("volumes need mkfs.ext4 (apt-get install e2fsprogs): %w", err)
	}
	return &Manager{root: root, uid: uid, gid: gid, mountOpts: "errors=remount-ro"}, nil
}

// NewScratch returns a Manager for sandboxes' writable root layers under
// root: the same ext4 images as volumes (the image's size and inode count
// are the layer's cap), mounted with discard, so that what a sandbox
// deletes is given back to the pool at once.
//
// With reflink, new images are clones of an empty image kept per size in
// root's sibling directory "<root>-base", made once.
func NewScratch(root string, uid, gid int, reflink bool) (*Manager, error) {
	m, err := New(root, uid, gid)
	if err != nil {
		return nil, err
	}
	m.mountOpts = "errors=remount-ro,discard"
	if reflink {
		m.baseDir = root + "-base"
	}
	return m, nil
}

// Root returns the directory holding the volumes.
func (m *Manager) Root() string { return m.root }

func (m *Manager) dir(id string) string   { return filepath.Join(m.root, id) }
func (m *Manager) image(id string) string { return filepath.Join(m.root, id, "disk.img") }

// Path returns where volume id is mounted (when it is).
func (m *Manager) Path(id string) string { return filepath.Join(m.root, id, "mnt") }

// Normalize applies defaults and checks a size and inode count.
func Normalize(size, inodes int64) (int64, int64, error) {
	if size == 0 {
		size = DefaultSize
	}
	if size < MinSize || size > MaxSize {
		return 0, 0, errdefs.Invalid("volume size must be between %d MiB and %d TiB", MinSize>>20, MaxSize>>40)
	}
	if inodes == 0 {
		inodes = size / bytesPerInode
	}
	if inodes < 256 || inodes > size/1024 {
		return 0, 0, errdefs.Invalid("volume inodes must be between 256 and one per KiB (%d)", size/1024)
	}
	return size, inodes, nil
}

// Create makes the image of volume id: a sparse file of size bytes with an
// ext4 filesystem of inodes inodes. It is idempotent for an existing image.
func (m *Manager) Create(id string, size, inodes int64) error {
	if err := os.MkdirAll(m.Path(id), 0o711); err != nil {
		return err
	}
	img := m.image(id)
	if _, err := os.Stat(img); err == nil {
		return nil
	}
	tmp := img + ".tmp"
	os.Remove(tmp)
	if base, ok := m.base(size, inodes); ok {
		if err := CloneFile(base, tmp); err == nil {
			return os.Rename(tmp, img)
		}
		os.Remove(tmp)
	}
	if err := m.mkfs(tmp, size, inodes); err != nil {
		return err
	}
	return os.Rename(tmp, img)
}

// mkfs makes path a sparse file of size bytes holding an empty ext4
// filesystem of inodes inodes, root owned by the manager's uid:gid.
func (m *Manager) mkfs(path string, size, inodes int64) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	err = f.Truncate(size)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(path)
		return err
	}
	out, err := exec.Command("mkfs.ext4", "-q", "-F", "-m", "0", "-N", strconv.FormatInt(inodes, 10),
		"-E", fmt.Sprintf("root_owner=%d:%d,lazy_itable_init=1,lazy_journal_init=1", m.uid, m.gid),
		"-L", "berth-vol", path).CombinedOutput()
	if err != nil {
		os.Remove(path)
		return fmt.Errorf("mkfs.ext4: %w: %s", err, strings.TrimSpace(string(out)))
	}
	return nil
}

// maxBases bounds the empty images a scratch manager keeps, one per
// (size, inodes) asked for.
const maxBases = 16

// base returns an empty image of size and inodes to clone, making it on
// first use, when the manager keeps them (a scratch manager on a reflink
// pool): a reflink clone costs about a millisecond where mkfs.ext4 takes
// 20-100. Clones share the filesystem UUID, which ext4 does not mind.
func (m *Manager) base(size, inodes int64) (string, bool) {
	if m.baseDir == "" {
		return "", false
	}
	path := filepath.Join(m.baseDir, fmt.Sprintf("%d-%d.img", size, inodes))
	if _, err := os.Stat(path); err == nil {
		return path, true
	}
	if err := os.MkdirAll(m.baseDir, 0o700); err != nil {
		return "", false
	}
	if ents, err := os.ReadDir(m.baseDir); err != nil || len(ents) >= maxBases {
		return "", false
	}
	f, err := os.CreateTemp(m.baseDir, ".new-")
	if err != nil {
		return "", false
	}
	tmp := f.Name()
	f.Close()
	if err := m.mkfs(tmp, size, inodes); err != nil {
		return "", false
	}
	if err := os.Rename(tmp, path); err != nil { // a concurrent maker's is as good
		os.Remove(tmp)
		return "", false
	}
	return path, true
}

// Mount mounts volume id at Path(id), if it is not mounted yet.
func (m *Manager) Mount(id string) error {
	mp := m.Path(id)
	if ok, err := overlay.Mounted(mp); err != nil {
		return err
	} else if ok {
		return nil
	}
	loop, err := attachLoop(m.image(id))
	if err != nil {
		return err
	}
	defer loop.Close()
	if err := unix.Mount(loop.Name(), mp, "ext4", unix.MS_NOSUID|unix.MS_NODEV, m.mountOpts); err != nil {
		return fmt.Errorf("mounting volume %s: %w", id, err)
	}
	return nil
}

// Unmount unmounts volume id; its loop device is released with it.
//
// It returns once the loop device under it has let go of its image too
// (or fails naming the device after detachWait): the kernel clears an
// autoclear device from a work queue after the unmount returns, late on a
// loaded host, and a delete that answered with the device still bound
// would leave it to whoever looks next (seen: a runsc sandbox's scratch
// device still bound just after its delete, at load 16 on 2 cores). The
// image is still there when this fails, so a retry waits again.
func (m *Manager) Unmount(id string) error {
	if err := overlay.Unmount(m.Path(id)); err != nil {
		return err
	}
	return waitDetached(m.image(id), detachWait)
}

// detachWait bounds how long an unmount waits for its loop device to let
// go of the image.
const detachWait = 15 * time.Second

// Mounted reports whether volume id is mounted.
func (m *Manager) Mounted(id string) bool {
	ok, _ := overlay.Mounted(m.Path(id))
	return ok
}

// Delete unmounts volume id and removes its image. Idempotent.
func (m *Manager) Delete(id string) error {
	if err := m.Unmount(id); err != nil {
		return err
	}
	if ms, _ := overlay.MountsUnder(m.dir(id)); len(ms) > 0 {
		return fmt.Errorf("volume %s: still mounted at %v", id, ms)
	}
	return os.RemoveAll(m.dir(id))
}

// Capacity is what volume id can hold, from its mounted filesystem: bytes
// and inodes.
func (m *Manager) Capacity(id string) (bytes, inodes int64, err error) {
	var st unix.Statfs_t
	if err := unix.Statfs(m.Path(id), &st); err != nil {
		return 0, 0, err
	}
	return int64(st.Blocks) * st.Bsize, int64(st.Files), nil
}

// Exists reports whether volume id has an image.
func (m *Manager) Exists(id string) bool {
	_, err := os.Stat(m.image(id))
	return err == nil
}

// IDs lists the volumes that have a directory under the root.
func (m *Manager) IDs() ([]string, error) {
	ents, err := os.ReadDir(m.root)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range ents {
		if e.IsDir() {
			out = append(out, e.Name())
		}
	}
	return out, nil
}

// Usage is what a volume holds.
type Usage struct {
	UsedBytes, UsedInodes int64
	// ReadOnly: the mounted filesystem takes no writes — ext4 stops them
	// after an I/O error (the host disk under the pool filled, say;
	// ReadOnlyFS). The next mount (stop/start) is read-write again.
	ReadOnly bool
}

// Usage reports volume id's usage: exact from the filesystem when mounted,
// else the bytes its image occupies on the host.
func (m *Manager) Usage(id string) (Usage, error) {
	if m.Mounted(id) {
		var st unix.Statfs_t
		if err := unix.Statfs(m.Path(id), &st); err != nil {
			return Usage{}, err
		}
		ro, err := readOnlyFS(m.Path(id), &st)
		if err != nil {
			return Usage{}, err
		}
		return Usage{
			UsedBytes:  int64(st.Blocks-st.Bfree) * st.Bsize,
			UsedInodes: int64(st.Files - st.Ffree),
			ReadOnly:   ro != Writable,
		}, nil
	}
	var st unix.Stat_t
	if err := unix.Stat(m.image(id), &st); err != nil {
		return Usage{}, err
	}
	return Usage{UsedBytes: st.Blocks * 512}, nil
}

// attachLoop binds a free loop device to file, with autoclear, or returns
// the device it is already bound to.
func attachLoop(file string) (*os.File, error) {
	if dev, ok := findLoop(file); ok {
		return os.OpenFile(dev, os.O_RDWR, 0)
	}
	ctl, err := os.OpenFile("/dev/loop-control", os.O_RDWR, 0)
	if err != nil {
		return nil, fmt.Errorf("opening /dev/loop-control: %w", err)
	}
	defer ctl.Close()
	back, err := os.OpenFile(file, os.O_RDWR, 0)
	if err != nil {
		return nil, err
	}
	defer back.Close()
	for attempt := 0; attempt < 20; attempt++ {
		n, err := unix.IoctlRetInt(int(ctl.Fd()), unix.LOOP_CTL_GET_FREE)
		if err != nil {
			return nil, fmt.Errorf("no free loop device: %w", err)
		}
		dev := fmt.Sprintf("/dev/loop%d", n)
		loop, err := os.OpenFile(dev, os.O_RDWR, 0)
		if errors.Is(err, os.ErrNotExist) {
			// Some hosts have no devtmpfs node yet for a new device.
			if err = unix.Mknod(dev, unix.S_IFBLK|0o660, int(unix.Mkdev(7, uint32(n)))); err == nil {
				loop, err = os.OpenFile(dev, os.O_RDWR, 0)
			}
		}
		if err != nil {
			return nil, fmt.Errorf("opening %s: %w", dev, err)
		}
		cfg := unix.LoopConfig{Fd: uint32(back.Fd())}
		cfg.Info.Flags = unix.LO_FLAGS_AUTOCLEAR
		copy(cfg.Info.File_name[:], file)
		if err := unix.IoctlLoopConfigure(int(loop.Fd()), &cfg); err != nil {
			loop.Close()
			if errors.Is(err, unix.EBUSY) {
				time.Sleep(time.Millisecond)
				continue // another process took it first
			}
			return nil, fmt.Errorf("configuring %s: %w", dev, err)
		}
		loops.bound(back, dev)
		return loop, nil
	}
	return nil, errors.New("no free loop device after 20 attempts")
}
