package manager

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/internal/sandbox"
	"github.com/berth-sh/berth/internal/store"
)

// Capacity. Volumes and writable layers are sparse images: they take host
// disk as they fill, up to their size. The daemon therefore checks, before
// it makes any, that what the new ones may grow to fits both in the pool
// (its free space) and in the host filesystem under the data dir (which
// holds the pool's own sparse image, the database and the logs), with a
// low-water mark of the host filesystem kept free for everything else;
// a request that does not fit is answered 507 insufficient_storage, naming
// the limit. What the existing objects may still grow to is counted too
// and named in the answer, though it is not reserved: sparse images are
// overcommitted, as with any thin provisioning.
//
// A full disk must not stop space from being freed through berth: a small
// reserve file is kept in the data dir, and a delete that finds the host
// filesystem (nearly) full removes it first, so that the database can
// record the delete; it is made again once there is room.

const (
	reserveName  = "reserve"
	reserveBytes = 32 << 20
)

// defaultLowWater is the host free space kept when no --disk-low-water is
// given: 1 GiB, or 5% of a smaller filesystem.
func defaultLowWater(total int64) int64 { return min(1<<30, total/20) }

// fsSpace returns the total and available bytes of the filesystem at path.
func fsSpace(path string) (total, avail int64, err error) {
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil {
		return 0, 0, err
	}
	return int64(st.Blocks) * st.Bsize, int64(st.Bavail) * st.Bsize, nil
}

// lowWater is the host free space creates must leave.
func (m *Manager) lowWater() int64 {
	if m.cfg.DiskLowWater > 0 {
		return m.cfg.DiskLowWater
	}
	total, _, err := fsSpace(m.cfg.DataDir)
	if err != nil {
		return 0
	}
	return defaultLowWater(total)
}

// admit refuses (507) making objects that may grow to need bytes, for
// what (e.g. "a sandbox with a 10 GiB disk"), when they cannot fit.
func (m *Manager) admit(ctx context.Context, need int64, what string) error {
	_, hostFree, err := fsSpace(m.cfg.DataDir)
	if err != nil {
		return fmt.Errorf("capacity: %w", err)
	}
	low := m.lowWater()
	// The reserve is the daemon's, not free space to give away.
	if _, err := os.Stat(filepath.Join(m.cfg.DataDir, reserveName)); err != nil {
		low += reserveBytes
	}
	if hostFree-need < low {
		// What the others may still grow to is read (a store list) only
		// for the answer, never on the create path that fits.
		return errdefs.InsufficientStorage("%s needs up to %s, but the filesystem under the data dir %s has %s free and "+
			"%s must stay free (--disk-low-water); existing sandboxes and volumes may still grow by up to %s",
			what, humanBytes(need), m.cfg.DataDir, humanBytes(hostFree), humanBytes(low), humanBytes(m.committed(ctx)))
	}
	if m.pool.Root() != m.cfg.DataDir {
		if _, poolFree, err := fsSpace(m.pool.Root()); err == nil && need > poolFree {
			return errdefs.InsufficientStorage("%s needs up to %s, but the storage pool has %s free",
				what, humanBytes(need), humanBytes(poolFree))
		}
	}
	return nil
}

// committed is what this daemon's live volumes and writable layers may
// still grow to: their sizes less what they hold already.
func (m *Manager) committed(ctx context.Context) int64 {
	var sum int64
	sbs, _, err := m.store.ListSandboxes(ctx, store.SandboxFilter{Owner: store.AnyOwner, Node: m.cfg.Node}, store.Page{})
	if err != nil {
		return 0
	}
	for _, sb := range sbs {
		if !sb.State.Live() {
			continue
		}
		if !persistsRoot(sb) {
			sum += m.diskCap(sb) - allocated(m.scratch.Image(sb.ID))
		}
		for _, vm := range sb.Spec.Volumes {
			if vm.Owned {
				sum += sb.Spec.VolumeSize - allocated(m.volumes.Image(vm.VolumeID))
			}
		}
	}
	return max(sum, 0)
}

// allocated is the disk a (sparse) file takes.
func allocated(path string) int64 {
	var st unix.Stat_t
	if unix.Stat(path, &st) != nil {
		return 0
	}
	return st.Blocks * 512
}

// sandboxNeed is what a new sandbox of spec may grow to.
func (m *Manager) sandboxNeed(sp *sandbox.Spec) int64 {
	var need int64
	if !specPersistsRoot(sp) {
		if b := sp.Resources.DiskBytes; b != 0 {
			need += b
		} else {
			need += m.diskDefault()
		}
	}
	for _, vm := range sp.Volumes {
		if vm.Owned {
			need += sp.VolumeSize
		}
	}
	return need
}

// ensureReserve makes the reserve file when there is room for it.
func (m *Manager) ensureReserve() {
	path := filepath.Join(m.cfg.DataDir, reserveName)
	if _, err := os.Stat(path); err == nil {
		return
	}
	if _, free, err := fsSpace(m.cfg.DataDir); err != nil || free < m.lowWater()+2*reserveBytes {
		return
	}
	f, err := os.OpenFile(path+".tmp", os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return
	}
	err = unix.Fallocate(int(f.Fd()), 0, 0, reserveBytes)
	f.Close()
	if err == nil {
		err = os.Rename(path+".tmp", path)
	}
	if err != nil {
		os.Remove(path + ".tmp")
	}
}

// releaseReserveIfFull frees the reserve when the host filesystem is
// nearly full, so that a delete can be recorded.
func (m *Manager) releaseReserveIfFull() {
	_, free, err := fsSpace(m.cfg.DataDir)
	if err != nil || free >= 2*reserveBytes {
		return
	}
	if err := os.Remove(filepath.Join(m.cfg.DataDir, reserveName)); err == nil {
		m.log.Warn("the filesystem under the data dir is full: released the reserve so that deletes can be recorded",
			"free", humanBytes(free))
	} else if !errors.Is(err, os.ErrNotExist) {
		m.log.Warn("releasing the reserve", "err", err)
	}
}

// watchReadOnly records, once per occurrence, that a running sandbox's
// workspace volume or writable layer went read-only (the kernel remounts
// ext4 so after an I/O error: the host disk under the pool filled, say);
// inspect shows it (read_only) and doctor reports it; a stop/start mounts
// it read-write again.
func (m *Manager) watchReadOnly(ctx context.Context, live []*sandbox.Sandbox) {
	for _, sb := range live {
		if sb.State != sandbox.StateRunning && sb.State != sandbox.StatePaused {
			continue
		}
		check := func(what string, ro bool) {
			key := sb.ID + "/" + what
			m.mu.Lock()
			seen := m.readOnly[key]
			if ro {
				m.readOnly[key] = true
			} else {
				delete(m.readOnly, key)
			}
			m.mu.Unlock()
			if ro && !seen {
				m.log.Warn("filesystem went read-only", "sandbox", sb.ID, "what", what)
				m.event(ctx, &sandbox.Event{SandboxID: sb.ID, Type: "storage", Actor: actorReconciler,
					Cause: sandbox.CauseReconciler, Outcome: "read_only",
					Message: what + " is read-only (the kernel remounted it after an I/O error); stop and start the sandbox to mount it again"})
			}
		}
		if !persistsRoot(sb) && m.scratch.Mounted(sb.ID) {
			u, err := m.scratch.Usage(sb.ID)
			check("the writable root layer", err == nil && u.ReadOnly)
		}
		for _, vm := range sb.Spec.Volumes {
			if vm.Owned && m.volumes.Mounted(vm.VolumeID) {
				u, err := m.volumes.Usage(vm.VolumeID)
				check("volume "+vm.VolumeID, err == nil && u.ReadOnly)
			}
		}
	}
}
