package egress

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"runtime"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/berth-sh/berth/internal/errdefs"
)

// PortError categorises a failed dial of a sandbox's port: nothing
// listening (refused, or the agent's unreachable) is 502 unreachable;
// anything else (the agent or the namespace gone) 503 unavailable.
func PortError(id string, port int, err error) error {
	if errors.Is(err, errdefs.ErrUnreachable) || errors.Is(err, syscall.ECONNREFUSED) {
		return &errdefs.Error{Category: errdefs.ErrUnreachable,
			Msg: fmt.Sprintf("sandbox %s port %d: nothing listens there", id, port), Err: err}
	}
	return errdefs.Unavailable("sandbox %s port %d: %v", id, port, err)
}

// DialInNetns dials addr from inside the network namespace of pid. The
// socket is created while this OS thread is in that namespace and keeps
// it; the thread then returns to its own (or is discarded if it cannot).
func DialInNetns(ctx context.Context, pid int, addr string) (net.Conn, error) {
	type result struct {
		c   net.Conn
		err error
	}
	ch := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		self, err := os.Open("/proc/thread-self/ns/net")
		if err != nil {
			runtime.UnlockOSThread()
			ch <- result{nil, err}
			return
		}
		defer self.Close()
		target, err := os.Open(fmt.Sprintf("/proc/%d/ns/net", pid))
		if err != nil {
			runtime.UnlockOSThread()
			ch <- result{nil, err}
			return
		}
		defer target.Close()
		if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
			runtime.UnlockOSThread()
			ch <- result{nil, err}
			return
		}
		d := net.Dialer{Timeout: 5 * time.Second}
		c, err := d.DialContext(ctx, "tcp", addr)
		if unix.Setns(int(self.Fd()), unix.CLONE_NEWNET) == nil {
			runtime.UnlockOSThread()
		} // else: the locked thread exits with this goroutine
		ch <- result{c, err}
	}()
	r := <-ch
	return r.c, r.err
}
