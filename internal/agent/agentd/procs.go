package agentd

import (
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// procTable starts exec'd processes and collects their exit statuses.
//
// In reaper mode (PID 1 or a subreaper) one goroutine calls wait4(-1) for
// every child of the process, its own and the orphans reparented to it, and
// hands the statuses of exec'd processes to their waiters. It cannot race
// a start: fork and registration happen under mu, and the reaper dispatches
// under mu too, so a status reaped before the registration is delivered
// right after it, never lost; statuses of pids nobody registered are
// orphans' and are dropped. exec.Cmd.Wait is never used then, since the
// reaper would steal its status.
//
// Otherwise (tests, an agent that is not PID 1) each process is waited for
// by its own wait4(pid) goroutine and other children of the process are
// left alone.
type procTable struct {
	reap bool

	mu    sync.Mutex
	live  map[int]chan unix.WaitStatus // pid (= its process group) → waiter
	quit  chan struct{}
	wg    sync.WaitGroup
	count chan struct{} // signalled when live shrinks
}

func newProcTable(reap bool) *procTable {
	t := &procTable{
		reap:  reap,
		live:  make(map[int]chan unix.WaitStatus),
		quit:  make(chan struct{}),
		count: make(chan struct{}, 1),
	}
	if reap {
		// Notify before the first fork so that no SIGCHLD is missed.
		sigc := make(chan os.Signal, 1)
		signal.Notify(sigc, unix.SIGCHLD)
		t.wg.Add(1)
		go t.reapLoop(sigc)
	}
	return t
}

// start forks and execs; the returned channel receives the exit status.
// The process leads its own process group (its own session under a TTY),
// so pid is also the group to signal.
func (t *procTable) start(argv0 string, argv []string, attr *syscall.ProcAttr) (int, <-chan unix.WaitStatus, error) {
	ch := make(chan unix.WaitStatus, 1)
	t.mu.Lock()
	pid, err := syscall.ForkExec(argv0, argv, attr)
	if err != nil {
		t.mu.Unlock()
		return 0, nil, err
	}
	t.live[pid] = ch
	t.mu.Unlock()
	if !t.reap {
		t.wg.Add(1)
		go func() {
			defer t.wg.Done()
			var ws unix.WaitStatus
			for {
				_, err := unix.Wait4(pid, &ws, 0, nil)
				if err == unix.EINTR {
					continue
				}
				if err != nil { // cannot happen for our own child; do not hang
					ws = unix.WaitStatus(0xff << 8)
				}
				break
			}
			t.finish(pid, ws)
		}()
	}
	return pid, ch, nil
}

func (t *procTable) finish(pid int, ws unix.WaitStatus) {
	t.mu.Lock()
	ch, ok := t.live[pid]
	if ok {
		delete(t.live, pid)
	}
	t.mu.Unlock()
	if ok {
		ch <- ws
		select {
		case t.count <- struct{}{}:
		default:
		}
	}
}

func (t *procTable) reapLoop(sigc chan os.Signal) {
	defer t.wg.Done()
	defer signal.Stop(sigc)
	// SIGCHLDs coalesce and may be missed around Notify; the tick bounds
	// how long a zombie can wait in that case.
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		t.reapAll()
		select {
		case <-sigc:
		case <-tick.C:
		case <-t.quit:
			return
		}
	}
}

func (t *procTable) reapAll() {
	for {
		var ws unix.WaitStatus
		pid, err := unix.Wait4(-1, &ws, unix.WNOHANG, nil)
		if err == unix.EINTR {
			continue
		}
		if err != nil || pid <= 0 {
			return
		}
		if ws.Exited() || ws.Signaled() {
			t.finish(pid, ws)
		}
	}
}

// signalAll sends sig to the process group of every running process.
func (t *procTable) signalAll(sig unix.Signal) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for pid := range t.live {
		unix.Kill(-pid, sig)
	}
}

// running returns the number of exec'd processes still running.
func (t *procTable) running() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.live)
}

// hasChildren reports whether the process has any child left, exec'd or
// reparented, without reaping it.
func (t *procTable) hasChildren() bool {
	var info unix.Siginfo
	err := unix.Waitid(unix.P_ALL, 0, &info, unix.WEXITED|unix.WNOHANG|unix.WNOWAIT, nil)
	return err != unix.ECHILD
}

// stop ends the reaper and waits for the per-process waiters; the caller
// makes sure every process is dead or about to be.
func (t *procTable) stop() {
	close(t.quit)
	t.wg.Wait()
}
