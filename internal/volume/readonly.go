package volume

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

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
	dev, err := filepath.EvalSymlinks(fmt.Sprintf("/sys/dev/block/%d:%d", unix.Major(s.Dev), unix.Minor(s.Dev)))
	if err != nil {
		return Writable, err
	}
	opts, err := os.ReadFile(filepath.Join("/proc/fs/ext4", filepath.Base(dev), "options"))
	if err != nil {
		return Writable, err
	}
	if emergencyRO(string(opts)) {
		return EmergencyReadOnly, nil
	}
	return Writable, nil
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
