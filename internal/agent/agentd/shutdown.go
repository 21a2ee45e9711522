package agentd

import (
	"bytes"
	"os"
	"strconv"
	"time"

	"golang.org/x/sys/unix"

	"github.com/berth-sh/berth/internal/agent/wire"
	"github.com/berth-sh/berth/internal/errdefs"
)

// handleShutdown is the graceful part of a stop (wire.OpShutdown): every
// background process is marked never to restart and its group signalled;
// as PID 1 the agent then signals every other process of its pid
// namespace (kill(-1) spares PID 1 itself). It answers once they are gone
// or the grace has passed. Nothing here is trusted by the daemon, which
// kills the sandbox after its own deadline anyway; the agent itself is not
// signalled and keeps serving.
func (s *server) handleShutdown(cn *conn) error {
	rq := cn.req.Shutdown
	if rq == nil {
		return errdefs.Invalid("shutdown without its signal and grace")
	}
	if rq.GraceMS < 0 || rq.GraceMS > wire.MaxShutdownGraceMS {
		return errdefs.Invalid("shutdown grace must be 0..%d ms", wire.MaxShutdownGraceMS)
	}
	name := rq.Signal
	if name == "" {
		name = "SIGTERM"
	}
	sig := parseSignal(name)
	if n, err := strconv.Atoi(name); err == nil && n >= 1 && n <= 64 {
		sig = unix.Signal(n) // an image's STOPSIGNAL may be a number
	}
	if sig == 0 {
		return errdefs.Invalid("unknown signal %q", name)
	}
	for _, pid := range s.bg.stopAll() {
		unix.Kill(-pid, sig)
	}
	all := s.cfg.reap && os.Getpid() == 1
	if all {
		unix.Kill(-1, sig)
	}
	deadline := time.Now().Add(time.Duration(rq.GraceMS) * time.Millisecond)
	for {
		n := s.bg.running()
		if all {
			n = otherProcesses()
		}
		if n == 0 || !time.Now().Before(deadline) {
			s.log.Info("shutdown", "signal", name, "grace_ms", rq.GraceMS, "remaining", n)
			return cn.fw.SendJSON(wire.FrameResult, wire.ShutdownResult{Remaining: n})
		}
		time.Sleep(min(20*time.Millisecond, time.Until(deadline)))
	}
}

// stopAll marks every process of the table never to restart (one waiting
// out a backoff ends now) and returns the pids of those running.
func (b *bgTable) stopAll() []int {
	b.mu.Lock()
	defer b.mu.Unlock()
	var pids []int
	for _, p := range b.procs {
		p.mu.Lock()
		if !p.final {
			p.stop = true
			select {
			case p.wake <- struct{}{}:
			default:
			}
			if p.pid > 0 {
				pids = append(pids, p.pid)
			}
		}
		p.mu.Unlock()
	}
	return pids
}

// running counts the table's processes not yet ended for good.
func (b *bgTable) running() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	n := 0
	for _, p := range b.procs {
		p.mu.Lock()
		if !p.final {
			n++
		}
		p.mu.Unlock()
	}
	return n
}

// otherProcesses counts the processes of the pid namespace other than the
// agent and zombies (the reaper collects those).
func otherProcesses() int {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return 1 // unknown: not gone; the grace decides
	}
	self := os.Getpid()
	n := 0
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self {
			continue
		}
		st, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue // gone meanwhile
		}
		// pid (comm) S ...: the state follows the last ')'.
		if i := bytes.LastIndexByte(st, ')'); i >= 0 && i+2 < len(st) && st[i+2] == 'Z' {
			continue
		}
		n++
	}
	return n
}
