package manager

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
	"syscall"
	"time"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/internal/failpoint"
	"github.com/berth-sh/berth/internal/sandbox"
	"github.com/berth-sh/berth/internal/volume"
)

// DefaultDiskBytes is the server-wide disk cap of a sandbox's writable
// root layer when neither the request nor its template gives one.
const DefaultDiskBytes = 10 << 30

// snapshotScratchImage is the scratch layer's image in a snapshot or fork
// stage (older snapshots hold an upper/ tree instead).
const snapshotScratchImage = "scratch.img"

// diskDefault is the server-wide cap; 0: none.
func (m *Manager) diskDefault() int64 {
	if m.cfg.DiskDefault < 0 {
		return 0
	}
	return m.cfg.DiskDefault
}

// withDiskDefault fills a spec's disk cap from the server default, unless
// its root layer is on its workspace volume.
func (m *Manager) withDiskDefault(sp *sandbox.Spec) {
	if sp.Resources.DiskBytes == 0 && !specPersistsRoot(sp) {
		sp.Resources.DiskBytes = m.diskDefault()
	}
}

// checkDisk refuses a disk cap the storage pool cannot hold, and one for
// a root layer that lives on the workspace volume.
func (m *Manager) checkDisk(sp *sandbox.Spec) error {
	b := sp.Resources.DiskBytes
	if b == 0 {
		return nil
	}
	if specPersistsRoot(sp) {
		return errdefs.Invalid("disk does not apply with persist_root: the root layer is on the workspace volume; size that (volume_size_bytes)")
	}
	max := int64(sandbox.MaxDiskBytes)
	if c, err := m.pool.Capacity(); err == nil && c < max {
		max = c
	}
	if b < sandbox.MinDiskBytes || b > max {
		return errdefs.Invalid("disk must be between %d MiB and %d MiB (the storage pool's size), got %d bytes",
			sandbox.MinDiskBytes>>20, max>>20, b)
	}
	return nil
}

// diskCap is sb's disk cap in bytes (0: none).
func (m *Manager) diskCap(sb *sandbox.Sandbox) int64 {
	if b := sb.Spec.Resources.DiskBytes; b != 0 {
		return b
	}
	return m.diskDefault()
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
func (m *Manager) legacyUpper(id string) (upper, work string, ok bool) {
	dir := m.paths(id).scratch
	upper, work = filepath.Join(dir, "upper"), filepath.Join(dir, "work")
	if _, err := os.Lstat(upper); err != nil {
		return "", "", false
	}
	if _, err := os.Lstat(m.paths(id).upper); err == nil {
		return "", "", false
	}
	return upper, work, true
}

// prepareScratch makes and mounts the filesystem of sb's writable root
// layer, with its upper and work dirs: an ext4 image of the disk cap, or,
// when there is no cap, a plain directory in the pool. Idempotent; an
// existing image (a restarted create, a fork's clone) is kept as it is.
func (m *Manager) prepareScratch(sb *sandbox.Sandbox) error {
	if persistsRoot(sb) {
		return nil
	}
	if _, _, ok := m.legacyUpper(sb.ID); ok {
		return nil
	}
	p := m.paths(sb.ID)
	if b := m.diskCap(sb); b > 0 || m.scratch.Exists(sb.ID) {
		t0 := time.Now()
		if err := m.scratch.Create(sb.ID, b, sandbox.DiskInodes(b)); err != nil {
			return fmt.Errorf("disk: %w", err)
		}
		t1 := time.Now()
		if err := m.scratch.Mount(sb.ID); err != nil {
			return fmt.Errorf("disk: %w", err)
		}
		m.log.Debug("writable layer ready", "sandbox", sb.ID, "cap", b, "create", t1.Sub(t0), "mount", time.Since(t1))
	}
	for _, d := range []string{p.upper, p.work} {
		if err := os.MkdirAll(d, 0o711); err != nil {
			return err
		}
	}
	return nil
}

// unmountScratch unmounts sb's writable layer's filesystem (kept).
func (m *Manager) unmountScratch(sb *sandbox.Sandbox) error {
	return m.scratch.Unmount(sb.ID)
}

// dropScratch discards sb's writable layer in scratch space (its
// filesystem and image, or a legacy upper dir) but keeps the scratch dir
// and what else it holds (a checkpoint).
func (m *Manager) dropScratch(id string) error {
	if err := m.scratch.Unmount(id); err != nil {
		return err
	}
	p := m.paths(id)
	if m.scratch.Mounted(id) {
		return fmt.Errorf("disk: %s is still mounted", m.scratch.Path(id))
	}
	var errs []error
	for _, d := range []string{m.scratch.Path(id), filepath.Join(p.scratch, "upper"), filepath.Join(p.scratch, "work")} {
		errs = append(errs, os.RemoveAll(d))
	}
	if err := os.Remove(m.scratch.Image(id)); err != nil && !errors.Is(err, os.ErrNotExist) {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// removeScratch removes sb's whole scratch dir, unmounting its layer's
// filesystem first (never removing through a mount).
func (m *Manager) removeScratch(id string) error {
	return m.scratch.Delete(id)
}

// captureScratch copies sb's writable layer in scratch space into dir, a
// snapshot or fork stage: its image by reflink, its filesystem frozen
// (FIFREEZE) meanwhile; or a legacy or uncapped plain upper dir as a tree.
// The caller has frozen sb's processes.
func (m *Manager) captureScratch(sb *sandbox.Sandbox, dir string) (err error) {
	if persistsRoot(sb) {
		return nil
	}
	id := sb.ID
	if m.scratch.Exists(id) {
		if m.scratch.Mounted(id) {
			if err := m.scratch.Freeze(id); err != nil {
				return err
			}
			defer func() {
				if terr := m.scratch.Thaw(id); terr != nil && err == nil {
					err = fmt.Errorf("thawing the writable layer: %w", terr)
				}
			}()
		}
		failpoint.Hit("capture.frozen")
		if err := volume.CloneFile(m.scratch.Image(id), filepath.Join(dir, snapshotScratchImage)); err != nil {
			return fmt.Errorf("cloning the writable layer: %w", err)
		}
		return nil
	}
	upper := m.paths(id).upper
	if legacy, _, ok := m.legacyUpper(id); ok {
		upper = legacy
	}
	if _, err := os.Lstat(upper); err != nil {
		return nil // nothing written yet (a stopped sandbox)
	}
	syscall.Sync() // the layer's dirty pages, while nothing writes
	return volume.CloneTree(upper, filepath.Join(dir, snapshotUpperDir))
}

// restoreScratch lays a captured writable layer down as sb's own, in place
// of what sb has: a clone of the captured image, or (snapshots from before
// disk caps) a new filesystem of sb's cap filled with the captured tree.
// The filesystem is left unmounted; provision mounts it.
func (m *Manager) restoreScratch(sb *sandbox.Sandbox, dir string) error {
	if persistsRoot(sb) {
		return nil
	}
	if err := m.dropScratch(sb.ID); err != nil {
		return err
	}
	if img := filepath.Join(dir, snapshotScratchImage); exists(img) {
		return m.scratch.CreateFrom(sb.ID, img)
	}
	tree := filepath.Join(dir, snapshotUpperDir)
	if !exists(tree) {
		return nil
	}
	if err := m.prepareScratch(sb); err != nil {
		return err
	}
	err := volume.CloneTreeInto(tree, m.paths(sb.ID).upper)
	return errors.Join(err, m.unmountScratch(sb))
}

func exists(path string) bool {
	_, err := os.Lstat(path)
	return err == nil
}

// DiskUsage reports the cap and usage of sb's writable root layer; nil
// when the layer is on the workspace volume (Storage reports that) or sb
// is gone.
func (m *Manager) DiskUsage(sb *sandbox.Sandbox) *api.Disk {
	if !sb.State.Live() || persistsRoot(sb) {
		return nil
	}
	b := m.diskCap(sb)
	d := &api.Disk{CapBytes: b, CapInodes: sandbox.DiskInodes(b)}
	switch _, _, legacy := m.legacyUpper(sb.ID); {
	case legacy:
		d.Note = "made before disk caps: its writable layer is uncapped until it is stopped or deleted"
	case b == 0 && !m.scratch.Exists(sb.ID):
		d.Note = "no disk cap: the server's --disk-default is 0 and none was asked for"
	case m.scratch.Mounted(sb.ID):
		d.Enforced = true
		if c, i, err := m.scratch.Capacity(sb.ID); err == nil {
			d.CapBytes, d.CapInodes = c, i
		}
		if u, err := m.scratch.Usage(sb.ID); err == nil {
			d.UsedBytes, d.UsedInodes, d.ReadOnly = u.UsedBytes, u.UsedInodes, u.ReadOnly
		}
	default:
		d.Enforced = true // made at the next start
	}
	return d
}
