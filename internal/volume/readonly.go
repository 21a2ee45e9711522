package volume

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
)

// ReadOnlyState says how a mounted filesystem is read-only.
type ReadOnlyState int

const (
	Writable ReadOnlyState = iota
	// MountedReadOnly: the superblock is read-only (a remount, or ext4's
	// errors=remount-ro on kernels that set the flag): a remount
	// read-write may bring it back.
	MountedReadOnly
	// EmergencyReadOnly: ext4 stopped all writes after an error (its
	// journal aborted: the host filesystem under the image filled, say)
	// without marking the superblock read-only, so statfs says writable.
	// A remount does not lift it; only a fresh mount (a stop and start of
	// the sandbox) does, once there is room.
	EmergencyReadOnly
)

// ReadOnlyFS reports whether the filesystem mounted at mp takes no
// writes. Kernels since 6.x (ext4's EXT4_FLAGS_EMERGENCY_RO) no longer
// set the read-only flag that statfs reports when ext4 gives up after an
// I/O error; ext4 lists that state as emergency_ro among the options in
// /proc/fs/ext4/<device>/options, which is read here. Only host-owned
// paths are read (/proc, /sys); nothing in the filesystem is followed.
func ReadOnlyFS(mp string) (ReadOnlyState, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(mp, &st); err != nil {
		return Writable, err
	}
	return readOnlyFS(mp, &st)
}

// readOnlyFS is ReadOnlyFS of the filesystem at mp whose statfs is st.
func readOnlyFS(mp string, st *unix.Statfs_t) (ReadOnlyState, error) {
	if st.Flags&unix.ST_RDONLY != 0 {
		return MountedReadOnly, nil
	}
	if st.Type != unix.EXT4_SUPER_MAGIC {
		return Writable, nil
	}
	var s unix.Stat_t
	if err := unix.Stat(mp, &s); err != nil {
		return Writable, err
	}
	dev, err := blockName(s.Dev)
	if err != nil {
		return Writable, err
	}
	opts, err := os.ReadFile(filepath.Join("/proc/fs/ext4", dev, "options"))
	if err != nil {
		blockNames.Delete(s.Dev)
		return Writable, err
	}
	if emergencyRO(string(opts)) {
		return EmergencyReadOnly, nil
	}
	return Writable, nil
}

// loopMajor is the block major of loop devices, whose minors name them
// for as long as the host runs (loopN), unlike the dynamic minors of
// block major 259 (partitions, NVMe), which are given out again.
const loopMajor = 7

// blockNames caches the kernel's name of each loop device seen (dev →
// loopN): the reconciler's tick asks it of every running sandbox's
// writable layer and volumes, and a create's answer of the new sandbox's,
// and resolving /sys/dev/block/M:m is a walk of several symlinks each
// time. At most one entry per loop device of the host.
var blockNames sync.Map

// blockName is the kernel's name of block device dev (its directory in
// /sys/block and /proc/fs/ext4).
func blockName(dev uint64) (string, error) {
	if v, ok := blockNames.Load(dev); ok {
		return v.(string), nil
	}
	p, err := filepath.EvalSymlinks(fmt.Sprintf("/sys/dev/block/%d:%d", unix.Major(dev), unix.Minor(dev)))
	if err != nil {
		return "", err
	}
	name := filepath.Base(p)
	if unix.Major(dev) == loopMajor {
		blockNames.Store(dev, name)
	}
	return name, nil
}

// emergencyRO reports whether an ext4 options file (one option a line)
// lists emergency_ro.
func emergencyRO(opts string) bool {
	for _, o := range strings.Fields(opts) {
		if o == "emergency_ro" {
			return true
		}
	}
	return false
}
