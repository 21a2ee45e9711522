package agent

import (
	"bufio"
	"context"
	"fmt"
	"net"

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

// DialPort connects to a TCP port on the sandbox's loopback through the
// agent. The returned connection carries the bytes of that TCP
// connection; closing it closes both. ctx bounds the connect only, as
// with net.Dialer: once connected, the connection lives until closed.
// A port nothing listens on is errdefs.ErrUnreachable.
func (c *Client) DialPort(ctx context.Context, port int) (net.Conn, error) {
	if port < 1 || port > 65535 {
		return nil, errdefs.Invalid("port %d out of range 1..65535", port)
	}
	cc, err := c.open(ctx, wire.Request{Op: wire.OpDial, Port: port})
	if err != nil {
		return nil, err
	}
	var r wire.DialResult
	if err := cc.result(&r); err != nil {
		cc.close()
		return nil, err
	}
	if !cc.stop() {
		cc.conn.Close()
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		return nil, fmt.Errorf("agent dial: connection closed")
	}
	return &dialedConn{Conn: cc.conn, r: cc.br}, nil
}

// dialedConn is the agent connection after a dial's result frame: reads
// drain what the frame reader had buffered first.
type dialedConn struct {
	net.Conn
	r *bufio.Reader
}

func (d *dialedConn) Read(p []byte) (int, error) { return d.r.Read(p) }
