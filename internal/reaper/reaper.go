// Package reaper makes the daemon the reaper of the processes its
// children leave behind, without taking exit statuses from the code that
// waits for its own children.
//
// The runtimes start a container's init (runc) or a sandbox's gVisor
// processes (runsc) and exit; the kernel hands those orphans to the
// nearest child subreaper, the daemon. Nobody in the daemon waits for
// them, so each one that ends would stay a zombie until the daemon does.
// A reaper that calls wait4(-1) would take the statuses that exec.Cmd.Wait
// (go-runc, mkfs, nsenter, ...) is about to collect, as containerd's shim
// avoids by routing every command through its own monitor. This package
// tells the two kinds apart instead: Go starts every child with a pidfd
// (CLONE_PIDFD, atomically at the fork) and keeps it open until its Wait
// has reaped the child, so a zombie child of the daemon with no pidfd in
// the daemon's file table is one no Go code will ever wait for, and is
// reaped here.
package reaper

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// sweepEvery is the backstop between sweeps when no SIGCHLD comes (an
// orphan whose pidfd was released without a wait is reaped then).
const sweepEvery = 10 * time.Second

// sweepGap is the least time between two sweeps a SIGCHLD asks for: a
// burst of creates ends hundreds of runtime processes a second, and each
// sweep lists the daemon's children and its file table (and holds off
// forks meanwhile), so the signals of a burst are taken together. An
// orphan waits at most this much longer to be reaped.
const sweepGap = 100 * time.Millisecond

// Reaper reaps the adopted children of this process; see the package doc.
type Reaper struct {
	log    *slog.Logger
	mu     sync.Mutex
	reaped int
	stop   chan struct{}
	done   chan struct{}
}

// Start makes this process a child subreaper and starts the reaper. It
// fails if Go does not start children with pidfds here (the reaper could
// not tell adopted orphans from children an exec.Cmd waits for).
func Start(log *slog.Logger) (*Reaper, error) {
	if err := goUsesPidfd(); err != nil {
		return nil, fmt.Errorf("reaper: pidfds unavailable, cannot tell adopted children apart: %w", err)
	}
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		return nil, fmt.Errorf("reaper: becoming a child subreaper: %w", err)
	}
	r := &Reaper{log: log, stop: make(chan struct{}), done: make(chan struct{})}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, unix.SIGCHLD)
	go func() {
		defer close(r.done)
		defer signal.Stop(sig)
		t := time.NewTicker(sweepEvery)
		defer t.Stop()
		for {
			r.Sweep()
			select {
			case <-r.stop:
				return
			case <-time.After(sweepGap):
			}
			select {
			case <-r.stop:
				return
			case <-sig:
			case <-t.C:
			}
		}
	}()
	return r, nil
}

// Close stops the reaper. The process stays a subreaper: orphans adopted
// from here on are reaped by whoever reaps this process's leftovers.
func (r *Reaper) Close() {
	select {
	case <-r.stop:
	default:
		close(r.stop)
	}
	<-r.done
}

// Reaped returns how many orphans the reaper has reaped.
func (r *Reaper) Reaped() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.reaped
}

// Sweep reaps every zombie child of this process that no pidfd of this
// process refers to, and returns how many it reaped.
func (r *Reaper) Sweep() int {
	if !zombiePending() {
		return 0
	}
	// No fork while the sweep decides: a new child's pid cannot then be
	// the reused pid of a zombie seen a moment earlier.
	syscall.ForkLock.Lock()
	defer syscall.ForkLock.Unlock()
	zombies, err := zombieChildren(os.Getpid())
	if err != nil {
		r.log.Warn("reaper: listing children", "err", err)
		return 0
	}
	if len(zombies) == 0 {
		return 0
	}
	// After the zombies were listed: a child Go waits for has its pidfd
	// open from its fork until its Wait reaped it, so it is seen here.
	owned, err := pidfdTargets()
	if err != nil {
		r.log.Warn("reaper: listing pidfds", "err", err)
		return 0
	}
	n := 0
	for _, pid := range zombies {
		if owned[pid] {
			continue
		}
		var ws unix.WaitStatus
		got, err := unix.Wait4(pid, &ws, unix.WNOHANG, nil)
		if err != nil || got != pid {
			continue
		}
		n++
		r.log.Debug("reaped an adopted process", "pid", pid, "status", ws.ExitStatus(), "signal", ws.Signal())
	}
	r.mu.Lock()
	r.reaped += n
	r.mu.Unlock()
	return n
}

// zombiePending reports whether any child of this process has ended and
// waits to be reaped, without reaping it (waitid's WNOWAIT): the cheap
// question before a sweep's listing, which most SIGCHLDs (a child an
// exec.Cmd waits for, reaped already) answer no to.
func zombiePending() bool {
	var info unix.Siginfo
	for {
		err := unix.Waitid(unix.P_ALL, 0, &info, unix.WEXITED|unix.WNOHANG|unix.WNOWAIT, nil)
		switch {
		case errors.Is(err, unix.EINTR):
			continue
		case err != nil:
			return false // ECHILD: no children at all
		}
		// With WNOHANG and no child waitable, Linux answers an all-zero
		// siginfo; a waitable child gives SIGCHLD.
		return info.Signo == int32(unix.SIGCHLD)
	}
}

// zombieChildren returns the children of process self (any of its
// threads) that are zombies.
func zombieChildren(self int) ([]int, error) {
	pids, err := children(self)
	if err != nil {
		return nil, err
	}
	var out []int
	for _, pid := range pids {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
		if err != nil {
			continue // gone already
		}
		if state, ppid, ok := parseStat(b); ok && state == 'Z' && ppid == self {
			out = append(out, pid)
		}
	}
	return out, nil
}

// children lists the children of process self: from each thread's
// children file when the kernel has them (CONFIG_PROC_CHILDREN), else by
// a scan of /proc.
func children(self int) ([]int, error) {
	tasks, err := filepath.Glob("/proc/" + strconv.Itoa(self) + "/task/*/children")
	if err == nil && len(tasks) > 0 {
		var out []int
		for _, f := range tasks {
			b, err := os.ReadFile(f)
			if err != nil {
				continue // the thread ended
			}
			for _, s := range strings.Fields(string(b)) {
				if pid, err := strconv.Atoi(s); err == nil {
					out = append(out, pid)
				}
			}
		}
		return out, nil
	}
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil, err
	}
	var out []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		if _, ppid, ok := parseStat(b); ok && ppid == self {
			out = append(out, pid)
		}
	}
	return out, nil
}

// parseStat returns the state and parent pid from the text of
// /proc/<pid>/stat: "pid (comm) S ppid ...", where comm may hold spaces
// and parentheses (the last ')' ends it).
func parseStat(b []byte) (state byte, ppid int, ok bool) {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, 0, false
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 2 || len(f[0]) != 1 {
		return 0, 0, false
	}
	ppid, err := strconv.Atoi(f[1])
	if err != nil {
		return 0, 0, false
	}
	return f[0][0], ppid, true
}

// pidfdTargets returns the pids that pidfds open in this process refer to.
func pidfdTargets() (map[int]bool, error) {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return nil, err
	}
	out := make(map[int]bool)
	for _, e := range ents {
		link, err := os.Readlink("/proc/self/fd/" + e.Name())
		if err != nil || !isPidfdLink(link) {
			continue
		}
		if pid := fdinfoPid("/proc/self/fdinfo/" + e.Name()); pid > 0 {
			out[pid] = true
		}
	}
	return out, nil
}

// isPidfdLink reports whether an fd's /proc link names a pidfd:
// "anon_inode:[pidfd]" (kernels before 6.9) or "pidfd:[ino]" (pidfs).
func isPidfdLink(link string) bool {
	return link == "anon_inode:[pidfd]" || strings.HasPrefix(link, "pidfd:")
}

// fdinfoPid reads the "Pid:" line of a pidfd's fdinfo (-1 once the
// process was reaped, 0 if unknown).
func fdinfoPid(path string) int {
	f, err := os.Open(path)
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "Pid:"); ok {
			pid, _ := strconv.Atoi(strings.TrimSpace(v))
			return pid
		}
	}
	return 0
}

// goUsesPidfd checks that the os package starts children with pidfds
// here. It makes the checks the os package makes before it does
// (os/pidfd_linux.go, checkPidfd): pidfd_open of this process,
// waitid(P_PIDFD) answering ECHILD, pidfd_send_signal of signal 0.
func goUsesPidfd() error {
	fd, err := unix.PidfdOpen(os.Getpid(), 0)
	if err != nil {
		return fmt.Errorf("pidfd_open: %w", err)
	}
	defer unix.Close(fd)
	for {
		err = unix.Waitid(unix.P_PIDFD, fd, nil, unix.WEXITED|unix.WNOHANG, nil)
		if err != unix.EINTR {
			break
		}
	}
	if !errors.Is(err, unix.ECHILD) {
		return fmt.Errorf("waitid(P_PIDFD): %v", err)
	}
	if err := unix.PidfdSendSignal(fd, 0, nil, 0); err != nil {
		return fmt.Errorf("pidfd_send_signal: %w", err)
	}
	return nil
}
