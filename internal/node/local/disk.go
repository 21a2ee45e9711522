package local

// Disk caps. A sandbox's writable root layer (overlay upper and work dirs,
// so /tmp and everything else it writes outside its volumes) lives on its
// own ext4 filesystem: a sparse image of the cap's size in the storage
// pool, pool/scratch/<id>/disk.img, loop-mounted at pool/scratch/<id>/mnt
// with discard. The filesystem enforces the cap: a write past it fails
// with ENOSPC inside the sandbox, creating a file past the inode cap
// likewise, and the image never takes more of the pool than its size.
// Fork and snapshot clone the image by reflink, as for workspace volumes.
//
// Why not XFS project quotas on the pool: the CI machine's kernel (6.18)
// is built without CONFIG_XFS_QUOTA, so the pool cannot be mounted with
// prjquota there at all ("quota support not available in this kernel"),
// and a reflink-capable data dir need not be XFS; an image per
// sandbox works wherever loop devices and ext4 do, on every kind of pool
// (loop XFS, a reflink-capable data dir, the copy fallback), and gives an
// exact inode cap too. The cost is one mkfs.ext4 (~20 ms) and one loop
// device per running sandbox.

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"

	"github.com/berth-sh/berth/internal/failpoint"
	"github.com/berth-sh/berth/internal/node"
	"github.com/berth-sh/berth/internal/sandbox"
	"github.com/berth-sh/berth/internal/volume"
)

// snapshotScratchImage is the scratch layer's image in a snapshot or fork
// stage (older snapshots hold an upper/ tree instead).
const snapshotScratchImage = "scratch.img"

// diskDefault is the cap of a record that names none; 0: none.
func (b *Backend) diskDefault() int64 { return max(b.cfg.DiskDefault, 0) }

// diskCap is sb's disk cap in bytes (0: none).
func (b *Backend) diskCap(sb *sandbox.Sandbox) int64 {
	if n := sb.Spec.Resources.DiskBytes; n != 0 {
		return n
	}
	return b.diskDefault()
}

// persistsRoot reports whether sb's writable root layer is on its
// workspace volume (whose size caps it) rather than in scratch space.
func persistsRoot(sb *sandbox.Sandbox) bool { return specPersistsRoot(&sb.Spec) }

func specPersistsRoot(sp *sandbox.Spec) bool {
	return sp.PersistRoot && len(sp.Volumes) > 0 && sp.Volumes[0].Owned
}

// legacyUpper returns the upper dir of a sandbox made before disk caps
// (a plain directory scratch/<id>/upper), if it has one: it keeps working
// uncapped until its writable layer is discarded (stop) or deleted.
func (b *Backend) legacyUpper(id string) (upper, work string, ok bool) {
	dir := b.paths(id).scratch
	upper, work = filepath.Join(dir, "upper"), filepath.Join(dir, "work")
	if _, err := os.Lstat(upper); err != nil {
		return "", "", false
	}
	if _, err := os.Lstat(b.paths(id).upper); err == nil {
		return "", "", false
	}
	return upper, work, true
}

// prepareScratch makes and mounts the filesystem of sb's writable root
// layer, with its upper and work dirs: an ext4 image of the disk cap, or,
// when there is no cap, a plain directory in the pool. Idempotent; an
// existing image (a restarted create, a fork's clone) is kept as it is.
func (b *Backend) prepareScratch(sb *sandbox.Sandbox) error {
	if persistsRoot(sb) {
		return nil
	}
	if _, _, ok := b.legacyUpper(sb.ID); ok {
		return nil
	}
	p := b.paths(sb.ID)
	if n := b.diskCap(sb); n > 0 || b.scratch.Exists(sb.ID) {
		t0 := time.Now()
		if err := b.scratch.Create(sb.ID, n, sandbox.DiskInodes(n)); err != nil {
			return fmt.Errorf("disk: %w", err)
		}
		t1 := time.Now()
		if err := b.scratch.Mount(sb.ID); err != nil {
			return fmt.Errorf("disk: %w", err)
		}
		b.log.Debug("writable layer ready", "sandbox", sb.ID, "cap", n, "create", t1.Sub(t0), "mount", time.Since(t1))
	}
	for _, d := range []string{p.upper, p.work} {
		if err := os.MkdirAll(d, 0o711); err != nil {
			return err
		}
	}
	return nil
}

// dropScratch discards sb's writable layer in scratch space (its
// filesystem and image, or a legacy upper dir) but keeps the scratch dir
// and what else it holds (a checkpoint).
func (b *Backend) dropScratch(id string) error {
	if err := b.scratch.Unmount(id); err != nil {
		return err
	}
	p := b.paths(id)
	if b.scratch.Mounted(id) {
		return fmt.Errorf("disk: %s is still mounted", b.scratch.Path(id))
	}
	var errs []error
	for _, d := range []string{b.scratch.Path(id), filepath.Join(p.scratch, "upper"), filepath.Join(p.scratch, "work")} {
		errs = append(errs, os.RemoveAll(d))
	}
	if err := os.Remove(b.scratch.Image(id)); err != nil && !errors.Is(err, os.ErrNotExist) {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// captureScratch copies sb's writable layer in scratch space into dir, a
// snapshot or fork stage: its image by reflink, its filesystem frozen
// (FIFREEZE) meanwhile; or a legacy or uncapped plain upper dir as a tree.
// The caller has frozen sb's processes.
func (b *Backend) captureScratch(sb *sandbox.Sandbox, dir string) (err error) {
	if persistsRoot(sb) {
		return nil
	}
	id := sb.ID
	if b.scratch.Exists(id) {
		if b.scratch.Mounted(id) {
			if err := b.scratch.Freeze(id); err != nil {
				return err
			}
			defer func() {
				if terr := b.scratch.Thaw(id); terr != nil && err == nil {
					err = fmt.Errorf("thawing the writable layer: %w", terr)
				}
			}()
		}
		if err := failpoint.Inject("capture.frozen"); err != nil {
			return err
		}
		if err := volume.CloneFile(b.scratch.Image(id), filepath.Join(dir, snapshotScratchImage)); err != nil {
			return fmt.Errorf("cloning the writable layer: %w", err)
		}
		return nil
	}
	upper := b.paths(id).upper
	if legacy, _, ok := b.legacyUpper(id); ok {
		upper = legacy
	}
	if _, err := os.Lstat(upper); err != nil {
		return nil // nothing written yet (a stopped sandbox)
	}
	// The layer's dirty pages, while nothing writes: syncfs(2) of the
	// filesystem the layer is on, never sync(2) of the whole host (which
	// would hold the parent frozen for as long as every other tenant's
	// writeback takes).
	if err := syncFS(upper); err != nil {
		return fmt.Errorf("flushing the writable layer: %w", err)
	}
	return volume.CloneTree(upper, filepath.Join(dir, snapshotUpperDir))
}

// restoreScratch lays a captured writable layer down as sb's own, in place
// of what sb has: a clone of the captured image, or (snapshots from before
// disk caps) a new filesystem of sb's cap filled with the captured tree.
// The filesystem is left unmounted; provision mounts it.
func (b *Backend) restoreScratch(sb *sandbox.Sandbox, dir string) error {
	if persistsRoot(sb) {
		return nil
	}
	if err := b.dropScratch(sb.ID); err != nil {
		return err
	}
	if img := filepath.Join(dir, snapshotScratchImage); exists(img) {
		return b.scratch.CreateFrom(sb.ID, img)
	}
	tree := filepath.Join(dir, snapshotUpperDir)
	if !exists(tree) {
		return nil
	}
	if err := b.prepareScratch(sb); err != nil {
		return err
	}
	err := volume.CloneTreeInto(tree, b.paths(sb.ID).upper)
	return errors.Join(err, b.scratch.Unmount(sb.ID))
}

// syncFS flushes the filesystem that holds path.
func syncFS(path string) error {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	return unix.Syncfs(fd)
}

func exists(path string) bool {
	_, err := os.Lstat(path)
	return err == nil
}

// DiskUsage reports the cap and usage of sb's writable root layer; nil
// when the layer is on the workspace volume (Storage reports that) or sb
// is gone.
func (b *Backend) DiskUsage(sb *sandbox.Sandbox) *node.Disk {
	if !sb.State.Live() || persistsRoot(sb) {
		return nil
	}
	n := b.diskCap(sb)
	d := &node.Disk{CapBytes: n, CapInodes: sandbox.DiskInodes(n)}
	switch _, _, legacy := b.legacyUpper(sb.ID); {
	case legacy:
		d.Note = "made before disk caps: its writable layer is uncapped until it is stopped or deleted"
	case n == 0 && !b.scratch.Exists(sb.ID):
		d.Note = "no disk cap: the server's --disk-default is 0 and none was asked for"
	case b.scratch.Mounted(sb.ID):
		d.Enforced = true
		if c, i, err := b.scratch.Capacity(sb.ID); err == nil {
			d.CapBytes, d.CapInodes = c, i
		}
		if u, err := b.scratch.Usage(sb.ID); err == nil {
			d.UsedBytes, d.UsedInodes, d.ReadOnly = u.UsedBytes, u.UsedInodes, u.ReadOnly
		}
	default:
		d.Enforced = true // made at the next start
	}
	return d
}
