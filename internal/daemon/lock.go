package daemon

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// lockName is the file in the data dir whose exclusive flock a daemon
// holds for its life. The kernel drops the lock when the process ends,
// however it ends, so a crash never leaves the data dir locked.
const lockName = "daemon.lock"

// ErrDataDirInUse is returned by Open when another daemon holds the data
// dir's lock.
var ErrDataDirInUse = errors.New("data dir in use")

// lockDataDir takes the data dir's exclusive lock and writes this
// process's pid into the lock file, for the message that refuses a second
// daemon. Two daemons on one data dir would each take the other's
// sandboxes, mounts and store rows for leftovers of a crash.
func lockDataDir(dataDir string) (*os.File, error) {
	path := filepath.Join(dataDir, lockName)
	// O_CLOEXEC (Go's default): the runtimes and container inits the
	// daemon starts must not inherit the lock and hold it past its end.
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("data dir lock: %w", err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, fmt.Errorf("%w: %s is locked by another berth daemon (%s); stop it first", ErrDataDirInUse, dataDir, lockHolder(path))
		}
		return nil, fmt.Errorf("data dir lock %s: %w", path, err)
	}
	if err := f.Truncate(0); err == nil {
		_, err = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
		if err != nil {
			f.Close()
			return nil, fmt.Errorf("data dir lock %s: %w", path, err)
		}
	} else {
		f.Close()
		return nil, fmt.Errorf("data dir lock %s: %w", path, err)
	}
	return f, nil
}

// lockHolder names the process that holds the lock at path: the pid
// the kernel reports for it in /proc/locks, else the one its holder
// wrote into the file.
func lockHolder(path string) string {
	if pid := flockOwner(path); pid > 0 {
		return "pid " + strconv.Itoa(pid)
	}
	b, err := os.ReadFile(path)
	if pid, perr := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && perr == nil && pid > 0 {
		return "pid " + strconv.Itoa(pid)
	}
	return "pid unknown"
}

// flockOwner returns the pid of the process holding a FLOCK on path, from
// /proc/locks (matched by device and inode), or 0.
func flockOwner(path string) int {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return 0
	}
	b, err := os.ReadFile("/proc/locks")
	if err != nil {
		return 0
	}
	return parseLocks(string(b), unix.Major(st.Dev), unix.Minor(st.Dev), st.Ino)
}

// parseLocks finds, in the text of /proc/locks, the pid holding a FLOCK
// on the file with device major:minor and inode ino. Lines look like
// "1: FLOCK  ADVISORY  WRITE 1234 08:01:5678 0 EOF" (device numbers in
// hex); blocked waiters ("1: -> FLOCK ...") are skipped.
func parseLocks(text string, major, minor uint32, ino uint64) int {
	for line := range strings.SplitSeq(text, "\n") {
		f := strings.Fields(line)
		if len(f) < 6 || f[1] != "FLOCK" {
			continue
		}
		id := strings.Split(f[5], ":")
		if len(id) != 3 {
			continue
		}
		maj, err1 := strconv.ParseUint(id[0], 16, 32)
		mnr, err2 := strconv.ParseUint(id[1], 16, 32)
		in, err3 := strconv.ParseUint(id[2], 10, 64)
		if err1 != nil || err2 != nil || err3 != nil || uint32(maj) != major || uint32(mnr) != minor || in != ino {
			continue
		}
		if pid, err := strconv.Atoi(f[4]); err == nil && pid > 0 {
			return pid
		}
	}
	return 0
}
