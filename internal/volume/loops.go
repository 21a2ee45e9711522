package volume

import (
	"os"
	"path/filepath"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
)

// Which loop device holds which image. The kernel only answers the other
// way round (each /sys/block/loopN/loop/backing_file names its file), so
// finding an image's device by asking it means reading every loop
// device's file: with a few hundred sandboxes, each with its own scratch
// device, that scan on every mount, unmount and detach poll took 40 % of
// the daemon's CPU under a burst of creates. Instead the devices this
// process binds are remembered, and each lookup reads one device's file
// to check the binding still holds. The first lookup scans every device
// once, for bindings made before this process started (a crashed
// daemon's); after it, every binding of a berth image is made here
// (attachLoop is the only binder, and the data dir's lock keeps out a
// second daemon).
var loops = &loopIndex{}

type loopIndex struct {
	mu      sync.Mutex
	scanned bool
	byFile  map[fileID]string // the image's device, as /dev/loopN
}

// fileID names a file by device and inode: a path can be replaced.
type fileID struct{ dev, ino uint64 }

func statID(st *unix.Stat_t) fileID { return fileID{uint64(st.Dev), st.Ino} }

// sysBlock is where the kernel lists block devices.
const sysBlock = "/sys/block"

// findLoop returns the loop device bound to file, if any. A file must
// never be bound twice: two filesystems on one image corrupt it. (A
// lazily unmounted filesystem keeps its device until its last user goes.)
func findLoop(file string) (string, bool) {
	var st unix.Stat_t
	if err := unix.Stat(file, &st); err != nil {
		return "", false
	}
	return loops.find(statID(&st))
}

func (x *loopIndex) find(id fileID) (string, bool) {
	x.mu.Lock()
	if !x.scanned {
		x.scanLocked()
	}
	dev, ok := x.byFile[id]
	x.mu.Unlock()
	if !ok {
		return "", false
	}
	if got, ok := backing(filepath.Base(dev)); ok && got == id {
		return dev, true
	}
	// Detached (an autoclear device let go as its filesystem went) or
	// bound to another file since: forget it, unless a new binding
	// replaced the entry meanwhile.
	x.mu.Lock()
	if x.byFile[id] == dev {
		delete(x.byFile, id)
	}
	x.mu.Unlock()
	return "", false
}

// bound records that back (an open image) is now bound to dev.
func (x *loopIndex) bound(back *os.File, dev string) {
	var st unix.Stat_t
	if err := unix.Fstat(int(back.Fd()), &st); err != nil {
		return // the next lookup of it finds nothing: attachLoop's caller mounts what it got
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.byFile == nil {
		x.byFile = map[fileID]string{}
	}
	x.byFile[statID(&st)] = dev
}

// scanLocked reads every loop device's backing file once.
func (x *loopIndex) scanLocked() {
	if x.byFile == nil {
		x.byFile = map[fileID]string{}
	}
	devs, _ := filepath.Glob(filepath.Join(sysBlock, "loop*"))
	for _, d := range devs {
		name := filepath.Base(d)
		if id, ok := backing(name); ok {
			x.byFile[id] = "/dev/" + name
		}
	}
	x.scanned = true
}

// backing returns the file loop device name (loopN) is bound to. A file
// deleted since it was bound (its lazily unmounted filesystem still
// alive) is no file: a new file at the same path is not it, and must not
// be handed that filesystem.
func backing(name string) (fileID, bool) {
	b, err := os.ReadFile(filepath.Join(sysBlock, name, "loop", "backing_file"))
	if err != nil {
		return fileID{}, false // not bound
	}
	path := strings.TrimSpace(string(b))
	if strings.HasSuffix(path, " (deleted)") {
		return fileID{}, false
	}
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return fileID{}, false
	}
	return statID(&st), true
}
