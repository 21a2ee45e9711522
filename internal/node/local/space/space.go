// Package space is the local backend's admission against the host's disk
// and its reserve for a full one, apart from the sandboxes it serves: it
// knows two filesystems (the one under the data dir, the storage pool's)
// and a low-water mark, nothing of records or sandboxes.
//
// Volumes and writable layers are sparse images: they take host
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

package space

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/internal/sandbox"
)

// Space admits objects against the host filesystem under DataDir and the
// pool's, keeping LowWater (0: 1 GiB or 5%) free and a reserve file.
type Space struct {
	DataDir, PoolRoot string
	LowWater          int64
	Log               *slog.Logger
}

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
func (s *Space) lowWater() int64 {
	if s.LowWater > 0 {
		return s.LowWater
	}
	total, _, err := fsSpace(s.DataDir)
	if err != nil {
		return 0
	}
	return defaultLowWater(total)
}

// Admit refuses (507) making objects that may grow to need bytes, for
// what (e.g. "a sandbox with a 10 GiB disk"), when they cannot fit.
func (s *Space) Admit(need int64, what string, committed func() int64) error {
	_, hostFree, err := fsSpace(s.DataDir)
	if err != nil {
		return fmt.Errorf("capacity: %w", err)
	}
	low := s.lowWater()
	// The reserve is the daemon's, not free space to give away.
	if _, err := os.Stat(filepath.Join(s.DataDir, reserveName)); err != nil {
		low += reserveBytes
	}
	if hostFree-need < low {
		// What the others may still grow to is read (a store list) only
		// for the answer, never on the create path that fits.
		return errdefs.InsufficientStorage("%s needs up to %s, but the filesystem under the data dir %s has %s free and "+
			"%s must stay free (--disk-low-water); existing sandboxes and volumes may still grow by up to %s",
			what, sandbox.FormatBytes(need), s.DataDir, sandbox.FormatBytes(hostFree), sandbox.FormatBytes(low), sandbox.FormatBytes(committed()))
	}
	if s.PoolRoot != s.DataDir {
		if _, poolFree, err := fsSpace(s.PoolRoot); err == nil && need > poolFree {
			return errdefs.InsufficientStorage("%s needs up to %s, but the storage pool has %s free",
				what, sandbox.FormatBytes(need), sandbox.FormatBytes(poolFree))
		}
	}
	return nil
}

// Allocated is the disk a (sparse) file takes.
func Allocated(path string) int64 {
	var st unix.Stat_t
	if unix.Stat(path, &st) != nil {
		return 0
	}
	return st.Blocks * 512
}

// EnsureReserve makes the reserve file when there is room for it.
func (s *Space) EnsureReserve() {
	path := filepath.Join(s.DataDir, reserveName)
	if _, err := os.Stat(path); err == nil {
		return
	}
	if _, free, err := fsSpace(s.DataDir); err != nil || free < s.lowWater()+2*reserveBytes {
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

// ReleaseReserve frees the reserve when the host filesystem is nearly
// full, so that a delete can be recorded.
func (s *Space) ReleaseReserve() {
	_, free, err := fsSpace(s.DataDir)
	if err != nil || free >= 2*reserveBytes {
		return
	}
	if err := os.Remove(filepath.Join(s.DataDir, reserveName)); err == nil {
		s.Log.Warn("the filesystem under the data dir is full: released the reserve so that deletes can be recorded",
			"free", sandbox.FormatBytes(free))
	} else if !errors.Is(err, os.ErrNotExist) {
		s.Log.Warn("releasing the reserve", "err", err)
	}
}
