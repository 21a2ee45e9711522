package agent

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"time"

	"github.com/berth-sh/berth/internal/agent/wire"

	"github.com/berth-sh/berth/internal/errdefs"
)

// Client talks to one sandbox's agent. It holds no connection: every call
// dials the socket afresh, so it survives agent and daemon restarts alike.
// It is safe for concurrent use.
//
// The agent runs inside the sandbox and is not trusted: frames and header
// sizes are capped, JSON results are bounded, and streams go straight to
// the caller's writers without being buffered whole.
type Client struct {
	socket string
	dial   func(ctx context.Context) (net.Conn, error)
	// idle, when positive, ends any operation but exec whose connection
	// moves no byte either way for that long: the daemon's own deadline
	// on file transfers, whatever the agent does. (An exec may be silent
	// for as long as its command runs; its deadline is its timeout,
	// which the daemon enforces above the client.)
	idle time.Duration
}

// SetIdleTimeout sets the client's idle deadline (see Client.idle).
func (c *Client) SetIdleTimeout(d time.Duration) { c.idle = d }

// idleConn pushes its deadline forward on every read and write.
type idleConn struct {
	net.Conn
	idle time.Duration
}

func (c idleConn) Read(p []byte) (int, error) {
	c.Conn.SetDeadline(time.Now().Add(c.idle))
	return c.Conn.Read(p)
}

func (c idleConn) Write(p []byte) (int, error) {
	c.Conn.SetDeadline(time.Now().Add(c.idle))
	return c.Conn.Write(p)
}

// NewClient returns a client for the agent listening on socketPath, for
// agents whose socket path nothing untrusted can change (tests, the
// daemon's own quarantine reader). Sandboxes' agents are reached with
// NewClientDialer and a SocketDialer.
func NewClient(socketPath string) *Client {
	c := &Client{socket: socketPath}
	c.dial = func(ctx context.Context) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", c.socket)
	}
	return c
}

// NewClientDialer returns a client that opens every connection with dial.
func NewClientDialer(dial func(ctx context.Context) (net.Conn, error)) *Client {
	return &Client{dial: dial}
}

// Info describes a running agent.
type Info struct {
	Version string
	PID     int
	Uptime  time.Duration
	Boot    string // identifies the agent's lifetime; "" from older agents
}

// ExecRequest describes a process to run.
type ExecRequest struct {
	Argv []string
	Env  []string // the whole environment; the daemon composes it
	Dir  string   // working directory; "" is "/"
	User string   // "uid", "uid:gid", "name" or "name:group"; "" is root
	TTY  bool
	// Rows and Cols size the terminal under TTY (24x80 when zero).
	Rows, Cols uint16
	// Timeout kills the process group with SIGKILL; zero means none.
	Timeout time.Duration
}

// ExecIO connects a process's stdio.
type ExecIO struct {
	// Stdin is copied to the process; nil means no stdin (closed at
	// once). Exec does not wait for a Read of Stdin that is in progress
	// when the process exits; that goroutine ends when the Read returns.
	Stdin io.Reader
	// Stdout and Stderr receive output as produced; nil discards it.
	// Under TTY everything arrives on Stdout.
	Stdout, Stderr io.Writer
	// Resize carries terminal size changes (TTY only).
	Resize <-chan Resize
}

// readBuf sizes a connection's read buffer. Most operations read a
// few small frames (an exec of a short command: its exit), and every
// connection's buffer is allocated and zeroed anew, so it is kept
// small: a frame larger than what is buffered is read straight into
// the frame reader's own buffer, not copied through this one.
const readBuf = 8 << 10

// clientConn is one operation's connection.
type clientConn struct {
	ctx  context.Context
	conn net.Conn
	br   *bufio.Reader // under fr: what a dial's raw bytes are read from
	fr   *wire.FrameReader
	fw   *wire.FrameWriter
	stop func() bool
}

// streamOp reports whether op may be silent for as long as a process
// runs (its callers bound it with their context instead).
func streamOp(op string) bool {
	switch op {
	case wire.OpExec, wire.OpWatch, wire.OpProcAttach, wire.OpProcWait, wire.OpProcStdin:
		return true
	}
	return false
}

func (c *Client) open(ctx context.Context, req wire.Request) (*clientConn, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	conn, err := c.dial(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, &errdefs.Error{Category: errdefs.ErrUnavailable, Msg: "sandbox agent unreachable", Err: err}
	}
	if c.idle > 0 && !streamOp(req.Op) {
		conn = idleConn{Conn: conn, idle: c.idle}
	}
	br := bufio.NewReaderSize(conn, readBuf)
	cc := &clientConn{ctx: ctx, conn: conn, br: br, fr: wire.NewFrameReader(br), fw: wire.NewFrameWriter(conn)}
	// Cancelling ctx closes the connection, which unblocks every read and
	// write and tells the agent to give up (and to kill an exec).
	cc.stop = context.AfterFunc(ctx, func() { conn.Close() })
	req.V = wire.ProtocolVersion
	b, err := json.Marshal(req)
	if err != nil {
		cc.close()
		return nil, errdefs.Invalid("encode request: %v", err)
	}
	if len(b) >= wire.MaxHeaderBytes {
		cc.close()
		return nil, errdefs.TooLarge("request header exceeds %d bytes", wire.MaxHeaderBytes)
	}
	b = append(b, '\n')
	if _, err := conn.Write(b); err != nil {
		cc.close()
		return nil, cc.ioErr(err)
	}
	return cc, nil
}

func (cc *clientConn) close() {
	cc.stop()
	cc.conn.Close()
}

// ioErr classifies a failure of the connection: the caller's cancellation,
// the agent breaking the protocol (internal), or the agent being gone.
func (cc *clientConn) ioErr(err error) error {
	if cerr := cc.ctx.Err(); cerr != nil {
		return cerr
	}
	if errors.Is(err, wire.ErrProtocol) {
		return err
	}
	return &errdefs.Error{Category: errdefs.ErrUnavailable, Msg: "sandbox agent connection lost", Err: err}
}

// next reads a frame, turning error frames into errors.
func (cc *clientConn) next() (wire.FrameType, []byte, error) {
	t, p, err := cc.fr.Next()
	if err != nil {
		return 0, nil, cc.ioErr(err)
	}
	if t == wire.FrameError {
		var we wire.Error
		if len(p) > 64<<10 || json.Unmarshal(p, &we) != nil {
			return 0, nil, wire.ProtocolErrorf("malformed error frame")
		}
		return t, nil, wire.ErrorFromWire(we)
	}
	return t, p, nil
}

// expect reads the next frame and requires type want.
func (cc *clientConn) expect(want wire.FrameType) ([]byte, error) {
	t, p, err := cc.next()
	if err != nil {
		return nil, err
	}
	if t != want {
		return nil, wire.ProtocolErrorf("got a %s frame, want %s", t, want)
	}
	return p, nil
}

func (cc *clientConn) result(v any) error {
	p, err := cc.expect(wire.FrameResult)
	if err != nil {
		return err
	}
	if len(p) > 64<<10 {
		return wire.ProtocolErrorf("result of %d bytes", len(p))
	}
	if err := json.Unmarshal(p, v); err != nil {
		return wire.ProtocolErrorf("malformed result: %v", err)
	}
	return nil
}

// Ping checks that the agent answers.
func (c *Client) Ping(ctx context.Context) (Info, error) {
	cc, err := c.open(ctx, wire.Request{Op: wire.OpPing})
	if err != nil {
		return Info{}, err
	}
	defer cc.close()
	var r wire.PingResult
	if err := cc.result(&r); err != nil {
		return Info{}, err
	}
	if len(r.Boot) > 64 {
		return Info{}, wire.ProtocolErrorf("boot id of %d bytes", len(r.Boot))
	}
	return Info{Version: r.Version, PID: r.PID, Uptime: time.Duration(r.UptimeNS), Boot: r.Boot}, nil
}

// Quiesce asks an agent that made its own listening socket (gVisor) to
// close it before a checkpoint; SigRelisten opens it again.
func (c *Client) Quiesce(ctx context.Context) error {
	return c.simple(ctx, wire.Request{Op: wire.OpQuiesce})
}

// Exec runs a process and streams its stdio until it exits. Cancelling ctx
// closes the connection, on which the agent kills the process group.
// OOMKilled is left false: the daemon knows it from the cgroup.
func (c *Client) Exec(ctx context.Context, req ExecRequest, eio ExecIO) (Exit, error) {
	if len(req.Argv) == 0 {
		return Exit{}, errdefs.Invalid("exec: empty argv")
	}
	spec := &wire.ExecSpec{
		Argv: req.Argv, Env: req.Env, Dir: req.Dir, User: req.User,
		TTY: req.TTY, Rows: req.Rows, Cols: req.Cols,
	}
	if req.Timeout > 0 {
		spec.TimeoutMS = max(1, req.Timeout.Milliseconds())
	}
	cc, err := c.open(ctx, wire.Request{Op: wire.OpExec, Exec: spec})
	if err != nil {
		return Exit{}, err
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	defer func() {
		close(done)
		cc.close() // unblocks the pumps' writes
		wg.Wait()
	}()

	// Send errors are not reported here: an agent that refuses the
	// request answers with an error frame and closes, and reading that
	// answer below tells more than the broken pipe.
	if eio.Stdin == nil {
		cc.fw.Send(wire.FrameStdinEOF, nil)
	} else {
		go pumpStdin(eio.Stdin, cc.fw)
	}
	if eio.Resize != nil {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case rs, ok := <-eio.Resize:
					if !ok {
						return
					}
					if cc.fw.SendJSON(wire.FrameResize, rs) != nil {
						return
					}
				case <-done:
					return
				}
			}
		}()
	}

	stdout, stderr := eio.Stdout, eio.Stderr
	if stdout == nil {
		stdout = io.Discard
	}
	if stderr == nil {
		stderr = io.Discard
	}
	for {
		t, p, err := cc.next()
		if err != nil {
			return Exit{}, err
		}
		switch t {
		case wire.FrameStdout, wire.FrameStderr:
			w := stdout
			if t == wire.FrameStderr {
				w = stderr
			}
			if _, err := w.Write(p); err != nil {
				// Whoever wanted the output is gone: closing the
				// connection (deferred) kills the process.
				return Exit{}, fmt.Errorf("exec: write output: %w", err)
			}
		case wire.FrameExit:
			return decodeExit(p)
		default:
			return Exit{}, wire.ProtocolErrorf("unexpected %s frame during exec", t)
		}
	}
}

// pumpStdin copies r to stdin frames and ends them with stdin-EOF (also
// when r fails: the process sees the end of its input either way).
func pumpStdin(r io.Reader, fw *wire.FrameWriter) {
	if err := pumpInput(r, fw); err != nil && err != errSend {
		fw.Send(wire.FrameStdinEOF, nil)
	}
}

// errSend: a frame could not be sent (the connection is gone).
var errSend = errors.New("agent: send failed")

// pumpInput sends r's bytes as stdin frames until r fails, and returns
// r's error (io.EOF at its end) or errSend. A TermInput's size changes
// go as resize frames, in order with its bytes.
func pumpInput(r io.Reader, fw *wire.FrameWriter) error {
	buf := make([]byte, wire.DataChunk)
	oi, ordered := r.(orderedInput)
	if c, ok := r.(interface{ CloseRead() }); ok {
		defer c.CloseRead()
	}
	for {
		var (
			n   int
			rs  *Resize
			err error
		)
		if ordered {
			n, rs, err = oi.Next(buf)
		} else {
			n, err = r.Read(buf)
		}
		if rs != nil && fw.SendJSON(wire.FrameResize, rs) != nil {
			return errSend
		}
		if n > 0 && fw.Send(wire.FrameStdin, buf[:n]) != nil {
			return errSend
		}
		if err != nil {
			return err
		}
	}
}

// Stat describes path; a symlink is described, not followed.
func (c *Client) Stat(ctx context.Context, path string) (FileInfo, error) {
	cc, err := c.open(ctx, wire.Request{Op: wire.OpStat, Path: path})
	if err != nil {
		return FileInfo{}, err
	}
	defer cc.close()
	var fi FileInfo
	err = cc.result(&fi)
	return fi, err
}

// List returns the entries of a directory, sorted by name.
func (c *Client) List(ctx context.Context, path string) ([]FileInfo, error) {
	cc, err := c.open(ctx, wire.Request{Op: wire.OpList, Path: path})
	if err != nil {
		return nil, err
	}
	defer cc.close()
	var out []FileInfo
	total := 0
	for {
		t, p, err := cc.next()
		if err != nil {
			return nil, err
		}
		switch t {
		case wire.FrameEnd:
			return out, nil
		case wire.FrameResult:
			total += len(p)
			if len(out) >= wire.MaxListEntries || len(p) > wire.MaxEntryJSON || total > wire.MaxListBytes {
				return nil, wire.ProtocolErrorf("list answer over its caps")
			}
			var fi FileInfo
			if err := json.Unmarshal(p, &fi); err != nil {
				return nil, wire.ProtocolErrorf("malformed list entry: %v", err)
			}
			out = append(out, fi)
		default:
			return nil, wire.ProtocolErrorf("unexpected %s frame in a list", t)
		}
	}
}

// Mkdir creates a directory (mode 0755 when zero); with parents, missing
// parents too, and an existing directory is no error.
func (c *Client) Mkdir(ctx context.Context, path string, mode os.FileMode, parents bool) error {
	return c.simple(ctx, wire.Request{Op: wire.OpMkdir, Path: path, Mode: unixMode(mode), Parents: parents})
}

// MkdirAs is Mkdir with what it makes (the directory and the parents it
// creates) given to owner, a user the agent resolves in the sandbox; ""
// is root, as Mkdir.
func (c *Client) MkdirAs(ctx context.Context, path string, mode os.FileMode, parents bool, owner string) error {
	return c.simple(ctx, wire.Request{Op: wire.OpMkdir, Path: path, Mode: unixMode(mode), Parents: parents, Owner: owner})
}

// MkdirOwned makes path (and its parents) if missing and gives it to
// owner, a user the agent resolves in the sandbox ("uid[:gid]" or a name).
func (c *Client) MkdirOwned(ctx context.Context, path, owner string) error {
	return c.simple(ctx, wire.Request{Op: wire.OpMkdir, Path: path, Parents: true, Owner: owner})
}

// Remove deletes a file, symlink or directory; a non-empty directory only
// when recursive. Removing "/" is refused.
func (c *Client) Remove(ctx context.Context, path string, recursive bool) error {
	return c.simple(ctx, wire.Request{Op: wire.OpRemove, Path: path, Recursive: recursive})
}

// Move renames src to dst inside the sandbox by rename(2)'s rules (see
// rootfs.Root.Move); with noReplace an existing dst is a conflict.
func (c *Client) Move(ctx context.Context, src, dst string, noReplace bool) error {
	return c.simple(ctx, wire.Request{Op: wire.OpMove, Path: src, Dest: dst, NoReplace: noReplace})
}

func (c *Client) simple(ctx context.Context, req wire.Request) error {
	cc, err := c.open(ctx, req)
	if err != nil {
		return err
	}
	defer cc.close()
	_, err = cc.expect(wire.FrameEnd)
	return err
}

// unixMode converts Go's permission, setuid, setgid and sticky bits to the
// wire's unix bits.
func unixMode(m os.FileMode) uint32 {
	u := uint32(m.Perm())
	if m&os.ModeSetuid != 0 {
		u |= 0o4000
	}
	if m&os.ModeSetgid != 0 {
		u |= 0o2000
	}
	if m&os.ModeSticky != 0 {
		u |= 0o1000
	}
	return u
}

// ReadFile copies a regular file to w and returns its info (from when it
// was opened).
func (c *Client) ReadFile(ctx context.Context, path string, w io.Writer) (FileInfo, error) {
	cc, err := c.open(ctx, wire.Request{Op: wire.OpReadFile, Path: path})
	if err != nil {
		return FileInfo{}, err
	}
	defer cc.close()
	var fi FileInfo
	if err := cc.result(&fi); err != nil {
		return FileInfo{}, err
	}
	return fi, cc.readData(w)
}

// readData copies data frames to w up to the end frame.
func (cc *clientConn) readData(w io.Writer) error {
	for {
		t, p, err := cc.next()
		if err != nil {
			return err
		}
		switch t {
		case wire.FrameEnd:
			return nil
		case wire.FrameData:
			if _, err := w.Write(p); err != nil {
				return fmt.Errorf("write: %w", err)
			}
		default:
			return wire.ProtocolErrorf("unexpected %s frame in a data stream", t)
		}
	}
}

// sendData copies r to data frames and an end frame. A failed send is not
// returned: the agent has answered (an error, say too_large) and closed,
// and the answer tells more than the broken pipe. A failure of r is.
func (cc *clientConn) sendData(r io.Reader) (sendErr error, readErr error) {
	dw := wire.DataWriter{FW: cc.fw}
	buf := make([]byte, wire.DataChunk)
	for {
		n, err := r.Read(buf)
		if n > 0 {
			if _, werr := dw.Write(buf[:n]); werr != nil {
				return werr, nil
			}
			if werr := cc.fw.Flush(); werr != nil {
				return werr, nil
			}
		}
		if err == io.EOF {
			return cc.fw.Send(wire.FrameEnd, nil), nil
		}
		if err != nil {
			return nil, err
		}
	}
}

// WriteFile replaces path with the bytes of r, atomically: the agent
// writes a temporary file beside it and renames it over the target, so a
// failed or too large (too_large) upload leaves the old file as it was.
// mode zero keeps an existing file's mode, or 0644.
func (c *Client) WriteFile(ctx context.Context, path string, mode os.FileMode, r io.Reader) (FileInfo, error) {
	return c.WriteFileAs(ctx, path, mode, r, Ownership{})
}

// Ownership says who owns what a write creates: Owner, a user of the
// sandbox ("uid[:gid]" or a name its /etc/passwd resolves; "" is the
// agent's, root); with Preserve (tar only), each entry's archive owner.
//
// Xattrs (WriteFileAs only) are user-namespace extended attributes
// ("user.x") the new file gets, as a write's description of the file
// rather than its owner; an agent too old to set them is an error.
type Ownership struct {
	Owner    string
	Preserve bool
	Xattrs   map[string]string
}

// WriteFileAs is WriteFile with the file owned as o says.
func (c *Client) WriteFileAs(ctx context.Context, path string, mode os.FileMode, r io.Reader, o Ownership) (FileInfo, error) {
	cc, err := c.open(ctx, wire.Request{Op: wire.OpWriteFile, Path: path, Mode: unixMode(mode), Owner: o.Owner, Xattrs: o.Xattrs})
	if err != nil {
		return FileInfo{}, err
	}
	defer cc.close()
	sendErr, readErr := cc.sendData(r)
	if readErr != nil {
		return FileInfo{}, fmt.Errorf("write %s: read upload: %w", path, readErr)
	}
	var fi FileInfo
	if err := cc.result(&fi); err != nil {
		if sendErr != nil && errors.Is(err, errdefs.ErrUnavailable) {
			return FileInfo{}, cc.ioErr(sendErr)
		}
		return FileInfo{}, err
	}
	for k, v := range o.Xattrs {
		if got, ok := fi.Xattrs[k]; !ok || got != v {
			return fi, errdefs.Unavailable("write %s: the sandbox's agent did not set xattr %s (it predates xattrs, or the file system has none)", path, k)
		}
	}
	return fi, nil
}

// ReadTar writes a tar archive of path (a file or a directory tree;
// symlinks archived as symlinks) to w.
func (c *Client) ReadTar(ctx context.Context, path string, w io.Writer) error {
	cc, err := c.open(ctx, wire.Request{Op: wire.OpReadTar, Path: path})
	if err != nil {
		return err
	}
	defer cc.close()
	return cc.readData(w)
}

// WriteTar extracts the tar archive r into the existing directory dir. The
// archive is untrusted: entries that are absolute, have ".." components,
// would land outside dir, link outside it, or are devices or FIFOs fail
// the call with an invalid_argument error (entries before it stay).
func (c *Client) WriteTar(ctx context.Context, dir string, r io.Reader) error {
	return c.WriteTarAs(ctx, dir, r, Ownership{})
}

// WriteTarAs is WriteTar with what it creates owned as o says.
func (c *Client) WriteTarAs(ctx context.Context, dir string, r io.Reader, o Ownership) error {
	return c.writeTar(ctx, wire.Request{Op: wire.OpWriteTar, Path: dir, Owner: o.Owner, PreserveOwner: o.Preserve}, r)
}

func (c *Client) writeTar(ctx context.Context, req wire.Request, r io.Reader) error {
	cc, err := c.open(ctx, req)
	if err != nil {
		return err
	}
	defer cc.close()
	sendErr, readErr := cc.sendData(r)
	if readErr != nil {
		return fmt.Errorf("extract into %s: read upload: %w", req.Path, readErr)
	}
	if _, err := cc.expect(wire.FrameEnd); err != nil {
		if sendErr != nil && errors.Is(err, errdefs.ErrUnavailable) {
			return cc.ioErr(sendErr)
		}
		return err
	}
	return nil
}

// Shutdown asks the agent to send sig ("" is SIGTERM) to every process of
// the sandbox and to answer once they are gone or grace has passed; it
// returns how many were left. The caller bounds it with ctx and kills the
// sandbox whatever the answer: the agent is the sandbox's, and its reply
// only ever shortens a stop.
func (c *Client) Shutdown(ctx context.Context, sig string, grace time.Duration) (remaining int, err error) {
	cc, err := c.open(ctx, wire.Request{Op: wire.OpShutdown,
		Shutdown: &wire.ShutdownRequest{Signal: sig, GraceMS: grace.Milliseconds()}})
	if err != nil {
		return 0, err
	}
	defer cc.close()
	var res wire.ShutdownResult
	if err := cc.result(&res); err != nil {
		return 0, err
	}
	// A count, only ever logged; a negative one is the agent's lie.
	return max(res.Remaining, 0), nil
}
