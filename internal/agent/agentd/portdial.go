package agentd

import (
	"context"
	"errors"
	"io"
	"net"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/berth-sh/berth/internal/agent/wire"

	"github.com/berth-sh/berth/internal/errdefs"
)

// The dial operation: the daemon's way into a sandbox whose network it
// cannot enter (gVisor with --network none keeps its network stack inside
// the Sentry; there is no host network namespace to join).
//
//	client → agent: {"v":1,"op":"dial","port":8000}
//	agent → client: a result frame {"addr":"127.0.0.1:8000"}, or an error
//	                frame (unreachable: nothing answers on the port;
//	                invalid_argument: a port outside 1..65535)
//
// After the result frame the connection carries raw bytes both ways,
// spliced by the agent with a TCP connection to the sandbox's loopback
// (127.0.0.1, else ::1). Either side's EOF or error closes both. Each
// direction uses one fixed buffer; at most maxDials run at once.

const (
	// dialTimeout bounds the agent's connect to the sandbox's port.
	dialTimeout = 5 * time.Second
	// maxDials bounds the dial connections an agent splices at once.
	maxDials = 256
	// spliceBuf is the buffer of each direction of a splice.
	spliceBuf = 32 << 10
)

// dialSlots counts the dials being spliced.
var dialSlots = make(chan struct{}, maxDials)

// handleDial connects to the requested loopback port and splices.
func (s *server) handleDial(ctx context.Context, cn *conn) error {
	port := cn.req.Port
	if port < 1 || port > 65535 {
		return errdefs.Invalid("port %d out of range 1..65535", port)
	}
	select {
	case dialSlots <- struct{}{}:
		defer func() { <-dialSlots }()
	default:
		return errdefs.Exhausted("%d port connections already open", maxDials)
	}
	target, err := dialLoopback(ctx, port)
	if err != nil {
		return err
	}
	defer target.Close()
	if err := cn.fw.SendJSON(wire.FrameResult, wire.DialResult{Addr: target.RemoteAddr().String()}); err != nil {
		return nil // the client is gone
	}
	splice(cn.c, cn.br, target)
	return nil
}

// dialLoopback connects to port on 127.0.0.1, then on ::1.
func dialLoopback(ctx context.Context, port int) (net.Conn, error) {
	d := net.Dialer{Timeout: dialTimeout}
	var errs []error
	for _, host := range []string{"127.0.0.1", "::1"} {
		c, err := d.DialContext(ctx, "tcp", net.JoinHostPort(host, strconv.Itoa(port)))
		if err == nil {
			return c, nil
		}
		errs = append(errs, err)
	}
	why := "connection refused"
	for _, err := range errs {
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			why = "connect timed out"
		} else if !errors.Is(err, syscall.ECONNREFUSED) {
			why = err.Error()
		}
	}
	return nil, errdefs.Unreachable("nothing answers on port %d in the sandbox (127.0.0.1 and ::1: %s)", port, why)
}

// splice copies bytes both ways between the client's connection (read
// through br, which may hold bytes already received) and target, until
// either side ends; then it closes both.
func splice(c net.Conn, br io.Reader, target net.Conn) {
	var once sync.Once
	closeBoth := func() {
		once.Do(func() {
			c.Close()
			target.Close()
		})
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		io.CopyBuffer(writerOnly{target}, br, make([]byte, spliceBuf))
		closeBoth()
	}()
	io.CopyBuffer(writerOnly{c}, target, make([]byte, spliceBuf))
	closeBoth()
	wg.Wait()
}

// writerOnly hides ReaderFrom, so that io.CopyBuffer uses its fixed
// buffer rather than whatever the destination would allocate.
type writerOnly struct{ io.Writer }
