package agentd

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/berth-sh/berth/internal/agent/rootfs"
	"github.com/berth-sh/berth/internal/agent/wire"
	"github.com/berth-sh/berth/internal/errdefs"
)

// Bounds of watches. inotify's limits (max_user_instances and
// max_user_watches) are per host uid: on runc every sandbox has its own
// host uid range (hostids), so one sandbox cannot use up another's, but the
// agent still caps what one client can make it hold. (Variables so that
// tests can lower them.)
var (
	maxWatchRequests   = 16    // watches open at once per agent (one inotify instance each)
	maxWatchesPerAgent = 16384 // inotify watches (directories) over all of them
	maxWatchesPerReq   = 8192  // directories one recursive watch may cover
	watchQueueLen      = 1024  // events queued for a slow client before overflow
)

// watchEvents is the mask of what a watch reports.
const watchEvents = unix.IN_CREATE | unix.IN_CLOSE_WRITE | unix.IN_DELETE | unix.IN_MOVED_FROM | unix.IN_MOVED_TO |
	unix.IN_DELETE_SELF | unix.IN_MOVE_SELF | unix.IN_ONLYDIR

// watchBudget is the agent-wide count of requests and watches.
type watchBudget struct {
	mu       sync.Mutex
	requests int
	watches  int
}

func (b *watchBudget) take(requests, watches int) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch {
	case b.requests+requests > maxWatchRequests:
		return errdefs.Exhausted("the agent already serves %d watches", maxWatchRequests)
	case b.watches+watches > maxWatchesPerAgent:
		return errdefs.Exhausted("the agent already holds %d directory watches", maxWatchesPerAgent)
	}
	b.requests += requests
	b.watches += watches
	return nil
}

func (b *watchBudget) give(requests, watches int) {
	b.mu.Lock()
	b.requests -= requests
	b.watches -= watches
	b.mu.Unlock()
}

func (b *watchBudget) held() (int, int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.requests, b.watches
}

// watcher is one watch request's inotify instance.
type watcher struct {
	s         *server
	f         *os.File // the inotify fd, non-blocking: Close ends a Read
	fd        int
	recursive bool
	dirs      map[int32]string // watch descriptor → sandbox path of its directory
	watches   int              // taken from the budget

	mu       sync.Mutex
	queue    []wire.WatchEvent
	overflow bool
	wake     chan struct{}
}

// handleWatch streams WatchEvents of the directory Path until the client
// closes the connection (which it detects by reading it) or an error.
func (s *server) handleWatch(ctx context.Context, cn *conn) error {
	clean, rel, err := rootfs.CleanPath(cn.req.Path)
	if err != nil {
		return err
	}
	if err := s.watchBudget.take(1, 0); err != nil {
		return err
	}
	defer s.watchBudget.give(1, 0)
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if err != nil {
		if err == unix.EMFILE {
			return errdefs.Exhausted("watch %s: inotify instances exhausted", clean)
		}
		return rootfs.PathErr("watch", clean, err)
	}
	w := &watcher{s: s, f: os.NewFile(uintptr(fd), "inotify"), fd: fd, recursive: cn.req.Recursive,
		dirs: map[int32]string{}, wake: make(chan struct{}, 1)}
	defer func() {
		w.f.Close()
		s.watchBudget.give(0, w.watches)
	}()
	dfd, err := s.root.Open(rel, unix.O_RDONLY|unix.O_DIRECTORY)
	if err != nil {
		return rootfs.PathErr("watch", clean, err)
	}
	err = w.addTree(dfd, clean, 0, nil)
	unix.Close(dfd)
	if err != nil {
		return err
	}
	// Ready: the client may start changing files.
	if err := cn.fw.Send(wire.FrameEnd, nil); err != nil {
		return err
	}
	// The client sends nothing more; its read returns when it goes, and
	// that ends the reader and the writer below.
	gone := make(chan struct{})
	go func() {
		cn.fr.Next()
		close(gone)
		w.f.Close()
	}()
	readErr := make(chan error, 1)
	go func() { readErr <- w.read() }()
	for {
		select {
		case <-gone:
			<-readErr
			return nil
		case <-ctx.Done():
			w.f.Close()
			<-readErr
			return nil
		case err := <-readErr:
			if err == nil { // the watched directory went away
				w.flush(cn)
				return cn.fw.Send(wire.FrameEnd, nil)
			}
			select {
			case <-gone:
				return nil
			default:
			}
			return rootfs.PathErr("watch", clean, err)
		case <-w.wake:
			if err := w.flush(cn); err != nil {
				w.f.Close()
				<-readErr
				return err
			}
		}
	}
}

// addTree watches the directory dfd (at sandbox path p) and, when
// recursive, every directory below it, within the budgets. With found
// not nil, every entry below p is appended to it as created: the
// directory is new, and what was made in it before its watch was added
// (mkdir -p a/b/c; echo > a/b/c/f) has no inotify event of its own. An
// entry made between the watch and the scan is reported twice.
func (w *watcher) addTree(dfd int, p string, depth int, found *[]wire.WatchEvent) error {
	if err := w.add(dfd, p); err != nil {
		return err
	}
	if !w.recursive {
		return nil
	}
	if depth >= rootfs.MaxTreeDepth {
		return errdefs.TooLarge("watch %s: tree deeper than %d levels", p, rootfs.MaxTreeDepth)
	}
	names, err := rootfs.ReadDirNames(dfd, wire.MaxListEntries)
	if err != nil {
		return rootfs.PathErr("watch", p, err)
	}
	for _, n := range names {
		cfd, err := unix.Openat(dfd, n, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if found != nil {
			*found = append(*found, wire.WatchEvent{Type: wire.WatchCreate, Path: path.Join(p, n), IsDir: err == nil})
		}
		if err != nil {
			continue // not a directory (or a symlink, or gone)
		}
		err = w.addTree(cfd, path.Join(p, n), depth+1, found)
		unix.Close(cfd)
		if err != nil {
			return err
		}
	}
	return nil
}

// add watches one directory through its fd, so the path is never looked
// up again outside the root.
func (w *watcher) add(dfd int, p string) error {
	if w.watches >= maxWatchesPerReq {
		return errdefs.TooLarge("watch: more than %d directories to watch", maxWatchesPerReq)
	}
	if err := w.s.watchBudget.take(0, 1); err != nil {
		return err
	}
	wd, err := unix.InotifyAddWatch(w.fd, "/proc/self/fd/"+itoa(dfd), watchEvents)
	if err != nil {
		w.s.watchBudget.give(0, 1)
		if err == unix.ENOSPC {
			return errdefs.Exhausted("watch %s: the kernel's inotify watches are exhausted", p)
		}
		return rootfs.PathErr("watch", p, err)
	}
	if _, dup := w.dirs[int32(wd)]; dup {
		w.s.watchBudget.give(0, 1) // the same directory again (a bind mount)
	} else {
		w.watches++
	}
	w.dirs[int32(wd)] = p
	return nil
}

func itoa(n int) string {
	var b [20]byte
	i := len(b)
	for {
		i--
		b[i] = byte('0' + n%10)
		n /= 10
		if n == 0 {
			return string(b[i:])
		}
	}
}

// push queues events; past a full queue they are dropped and the overflow
// marked, reported to the client once it catches up.
func (w *watcher) push(evs ...wire.WatchEvent) {
	w.mu.Lock()
	for _, ev := range evs {
		if len(w.queue) >= watchQueueLen {
			w.overflow = true
			break
		}
		w.queue = append(w.queue, ev)
	}
	w.mu.Unlock()
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// flush sends the queued events.
func (w *watcher) flush(cn *conn) error {
	w.mu.Lock()
	q, over := w.queue, w.overflow
	w.queue, w.overflow = nil, false
	w.mu.Unlock()
	for _, ev := range q {
		b, err := json.Marshal(ev)
		if err != nil {
			return err
		}
		if err := cn.fw.Write(wire.FrameResult, b); err != nil {
			return err
		}
	}
	if over {
		b, _ := json.Marshal(wire.WatchEvent{Type: wire.WatchOverflow})
		if err := cn.fw.Write(wire.FrameResult, b); err != nil {
			return err
		}
	}
	return cn.fw.Flush()
}

// read turns inotify events into queued WatchEvents until the fd is
// closed (an error) or the watched directory goes (nil).
func (w *watcher) read() error {
	buf := make([]byte, 64<<10)
	for {
		n, err := w.f.Read(buf)
		if err != nil {
			return err
		}
		if done := w.parse(buf[:n]); done {
			return nil
		}
	}
}

// parse handles one read's worth of events; it reports whether the watch
// is over. A move out (IN_MOVED_FROM) and in (IN_MOVED_TO) with the same
// cookie in one read are a rename; a move out alone is a remove, a move in
// alone a create.
func (w *watcher) parse(b []byte) (done bool) {
	type moved struct {
		cookie uint32
		ev     wire.WatchEvent
	}
	var from *moved
	flushFrom := func() {
		if from != nil {
			from.ev.Type = wire.WatchRemove
			w.push(from.ev)
			from = nil
		}
	}
	for len(b) >= unix.SizeofInotifyEvent {
		raw := (*unix.InotifyEvent)(unsafe.Pointer(&b[0]))
		end := unix.SizeofInotifyEvent + int(raw.Len)
		if end > len(b) {
			break
		}
		name := string(b[unix.SizeofInotifyEvent:end])
		for len(name) > 0 && name[len(name)-1] == 0 {
			name = name[:len(name)-1]
		}
		b = b[end:]
		mask := raw.Mask
		if mask&unix.IN_Q_OVERFLOW != 0 {
			w.mu.Lock()
			w.overflow = true
			w.mu.Unlock()
			continue
		}
		dir, ok := w.dirs[raw.Wd]
		if mask&unix.IN_IGNORED != 0 {
			delete(w.dirs, raw.Wd)
			if ok && len(w.dirs) == 0 {
				flushFrom()
				return true
			}
			continue
		}
		if !ok {
			continue
		}
		if mask&(unix.IN_DELETE_SELF|unix.IN_MOVE_SELF) != 0 {
			continue // its parent reports it; IN_IGNORED follows
		}
		p := path.Join(dir, name)
		isDir := mask&unix.IN_ISDIR != 0
		ev := wire.WatchEvent{Path: p, IsDir: isDir}
		switch {
		case mask&unix.IN_MOVED_FROM != 0:
			flushFrom()
			from = &moved{cookie: raw.Cookie, ev: ev}
			continue
		case mask&unix.IN_MOVED_TO != 0:
			if from != nil && from.cookie == raw.Cookie {
				ev.Type, ev.OldPath = wire.WatchRename, from.ev.Path
				from = nil
				w.renamed(ev.OldPath, p)
			} else {
				flushFrom()
				ev.Type = wire.WatchCreate
			}
		case mask&unix.IN_CREATE != 0:
			flushFrom()
			ev.Type = wire.WatchCreate
		case mask&unix.IN_CLOSE_WRITE != 0:
			flushFrom()
			ev.Type = wire.WatchWrite
		case mask&unix.IN_DELETE != 0:
			flushFrom()
			ev.Type = wire.WatchRemove
		default:
			continue
		}
		if isDir && w.recursive && (ev.Type == wire.WatchCreate) {
			// The new directory's own event goes out with what the scan
			// found in it, once its watch is in place: a client that
			// acts on the event acts on a watched directory.
			w.push(append([]wire.WatchEvent{ev}, w.addNew(p)...)...)
			continue
		}
		w.push(ev)
	}
	flushFrom()
	return false
}

// renamed updates the paths of watched directories under a renamed one.
func (w *watcher) renamed(oldp, newp string) {
	for wd, d := range w.dirs {
		if d == oldp {
			w.dirs[wd] = newp
		} else if len(d) > len(oldp) && d[:len(oldp)+1] == oldp+"/" {
			w.dirs[wd] = newp + d[len(oldp):]
		}
	}
}

// addNew watches a directory that appeared under a recursive watch (and
// what is already in it, which it reports as created: a scan on add).
// Past a budget it reports an overflow: events under it are lost, the
// client must rescan.
func (w *watcher) addNew(p string) (found []wire.WatchEvent) {
	_, rel, err := rootfs.CleanPath(p)
	if err != nil {
		return nil
	}
	dfd, err := w.s.root.Open(rel, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW)
	if err != nil {
		return nil
	}
	defer unix.Close(dfd)
	if err := w.addTree(dfd, p, 0, &found); err != nil {
		var de *errdefs.Error
		if errors.As(err, &de) {
			w.mu.Lock()
			w.overflow = true
			w.mu.Unlock()
		}
	}
	return found
}
