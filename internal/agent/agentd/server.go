package agentd

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/berth-sh/berth/internal/agent/rootfs"

	"github.com/berth-sh/berth/internal/agent/wire"

	"golang.org/x/sys/unix"

	"github.com/berth-sh/berth/internal/errdefs"
)

// Config configures the agent's server.
type Config struct {
	// Socket is the path of the unix socket to listen on. A stale socket
	// file is removed first; the socket is made mode 0600.
	Socket string
	// ListenFD, if positive, is an inherited listening socket to serve on
	// instead of creating Socket: the daemon binds the socket before the
	// sandbox starts, so it can connect without waiting for the agent.
	ListenFD int
	// TCP, if set, serves on this TCP listener (mutual TLS: package
	// agenttls) instead of a unix socket: the agent of a pod reached
	// across a network. Socket and ListenFD are then unused.
	TCP net.Listener
	// Root is the directory every path of a file operation resolves
	// inside: "/" in a sandbox, a temporary directory in tests. Exec's
	// working directory is not resolved in it.
	Root string
	// Logger receives the agent's logs; nil discards them.
	Logger *slog.Logger
	// MaxFileBytes caps one WriteFile and the bytes of one WriteTar.
	// Zero means 1 GiB.
	MaxFileBytes int64
	// IDs, when set, shifts the owners that stat, list, read_file and
	// read_tar report (idshift.go): the daemon's quarantine reader.
	IDs *IDShift
	// ManageHosts keeps /etc/hosts naming localhost and the hostname
	// (hosts.go): the sandbox's PID 1 only, never a test's agent.
	ManageHosts bool
	// SudoUser, if set, serves sudo (sudo.go) to root and this user of
	// the sandbox (a name or uid); SudoHelper is the argv prefix that
	// runs the agent's binary (its helper verb is appended).
	SudoUser   string
	SudoHelper []string

	// reap makes the server the reaper of every child of the process
	// (wait4(-1)); set by Main for PID 1 or a subreaper only, because it
	// steals the exit status of any child that anything else started.
	reap bool
}

const defaultMaxFileBytes = 1 << 30

// headerTimeout bounds how long a connection may take to send its header.
const headerTimeout = 10 * time.Second

type server struct {
	cfg   Config
	log   *slog.Logger
	root  *rootfs.Root
	procs *procTable
	bg    *bgTable // background processes (procs_bg.go)
	start time.Time
	execs atomic.Int32 // exec handlers running

	watchBudget watchBudget // watch.go

	hostsMu   sync.Mutex // hosts.go
	hostsName string     // the hostname /etc/hosts was last written for

	lnMu sync.Mutex
	ln   *net.UnixListener
	// sudoLn is the sudo socket's listener (sudo.go); nil without sudo.
	sudoLn *net.UnixListener
	// resumed is non-nil while the listener is closed for a checkpoint
	// (hibernate.go); it is closed when the agent listens again.
	resumed chan struct{}

	wg     sync.WaitGroup // connection handlers and output drainers
	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	drains map[*os.File]struct{}
	closed bool
}

// Serve runs the agent's server on cfg.Socket until ctx is done. Then it
// closes every connection (which kills the processes of running execs) and
// returns nil once all of them are finished.
func Serve(ctx context.Context, cfg Config) error {
	s, err := newServer(cfg)
	if err != nil {
		return err
	}
	return s.serve(ctx)
}

func newServer(cfg Config) (*server, error) {
	if cfg.Socket == "" && cfg.ListenFD <= 0 && cfg.TCP == nil {
		return nil, errors.New("agent: no socket path")
	}
	if cfg.Root == "" {
		cfg.Root = "/"
	}
	if cfg.MaxFileBytes <= 0 {
		cfg.MaxFileBytes = defaultMaxFileBytes
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	root, err := rootfs.OpenRoot(cfg.Root)
	if err != nil {
		return nil, fmt.Errorf("agent: %w", err)
	}
	var ln *net.UnixListener
	if cfg.TCP != nil {
		// No unix socket: the TCP listener is served instead (serveTCP).
	} else if cfg.ListenFD > 0 {
		ln, err = inherited(cfg.ListenFD)
	} else {
		ln, err = listen(cfg.Socket)
	}
	if err != nil {
		root.Close()
		return nil, fmt.Errorf("agent: %w", err)
	}
	var sudoLn *net.UnixListener
	if cfg.SudoUser != "" {
		if len(cfg.SudoHelper) == 0 {
			cfg.SudoHelper = sudoHelperArgv()
		}
		if sudoLn, err = listenSudo(); err != nil {
			if ln != nil {
				ln.Close()
			}
			root.Close()
			return nil, fmt.Errorf("agent: %w", err)
		}
	}
	return &server{
		sudoLn: sudoLn,
		cfg:    cfg,
		log:    log,
		root:   root,
		procs:  newProcTable(cfg.reap),
		bg:     newBgTable(),
		start:  time.Now(),
		ln:     ln,
		conns:  make(map[net.Conn]struct{}),
		drains: make(map[*os.File]struct{}),
	}, nil
}

// inherited serves on a unix socket passed in as fd, bound by the daemon
// (its file belongs to the daemon and stays when the agent exits). The
// agent calls listen(2) on it itself, so that the credentials the kernel
// reports to every connecting daemon (SO_PEERCRED) are the agent's, in the
// sandbox's cgroup, rather than those of whoever bound it; listen on a
// socket that already listens only sets its backlog.
func inherited(fd int) (*net.UnixListener, error) {
	if err := unix.Listen(fd, unix.SOMAXCONN); err != nil {
		return nil, fmt.Errorf("fd %d: listen: %w", fd, err)
	}
	f := os.NewFile(uintptr(fd), "listener")
	if f == nil {
		return nil, fmt.Errorf("fd %d is not open", fd)
	}
	defer f.Close()
	l, err := net.FileListener(f)
	if err != nil {
		return nil, fmt.Errorf("fd %d: %w", fd, err)
	}
	ul, ok := l.(*net.UnixListener)
	if !ok {
		l.Close()
		return nil, fmt.Errorf("fd %d is not a unix socket listener", fd)
	}
	ul.SetUnlinkOnClose(false)
	return ul, nil
}

// listen replaces a stale socket file and listens, mode 0600.
func listen(path string) (*net.UnixListener, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, err
	}
	if fi, err := os.Lstat(path); err == nil {
		if fi.Mode()&os.ModeSocket == 0 {
			return nil, fmt.Errorf("%s exists and is not a socket", path)
		}
		if err := os.Remove(path); err != nil {
			return nil, err
		}
	}
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		return nil, err
	}
	if err := os.Chmod(path, 0o600); err != nil {
		ln.Close()
		return nil, err
	}
	ln.SetUnlinkOnClose(true)
	return ln, nil
}

func (s *server) serve(ctx context.Context) error {
	if s.cfg.TCP != nil {
		return s.serveTCP(ctx)
	}
	s.log.Info("agent listening", "socket", s.cfg.Socket, "root", s.cfg.Root, "pid", os.Getpid(), "reaper", s.cfg.reap)
	stop := context.AfterFunc(ctx, func() { s.listener().Close() })
	defer stop()
	s.watchHibernate(ctx)
	stopSudo := func() {}
	if s.sudoLn != nil {
		// Its own context: it ends with this loop, however the loop ends.
		sctx, cancel := context.WithCancel(ctx)
		stopSudo = cancel
		defer cancel()
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			s.serveSudo(sctx)
		}()
	}
	for {
		ln := s.listener()
		c, err := ln.AcceptUnix()
		if err != nil {
			if ctx.Err() == nil && errors.Is(err, net.ErrClosed) && s.awaitRelisten(ctx, ln) {
				continue
			}
			if ctx.Err() != nil || errors.Is(err, net.ErrClosed) {
				break
			}
			s.backoff(ctx, err)
			continue
		}
		if !s.serveConn(ctx, c) {
			break
		}
	}
	s.listener().Close()
	stopSudo()
	s.finish()
	return nil
}

// backoff waits a moment after a failed accept (EMFILE and friends)
// rather than spin.
func (s *server) backoff(ctx context.Context, err error) {
	s.log.Warn("accept", "err", err)
	select {
	case <-time.After(50 * time.Millisecond):
	case <-ctx.Done():
	}
}

// serveConn serves accepted connection c on its own goroutine; false (c
// closed) once the server is shutting down.
func (s *server) serveConn(ctx context.Context, c net.Conn) bool {
	if !s.track(c) {
		c.Close()
		return false
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		defer s.untrack(c)
		s.handle(ctx, c)
	}()
	return true
}

// finish ends every connection and process once nothing is accepted.
func (s *server) finish() {
	s.shutdown()
	s.wg.Wait()
	s.procs.stop()
	s.root.Close()
}

// serveTCP is serve over cfg.TCP: the same handlers behind the listener's
// own authentication (a TLS handshake runs, under the header deadline,
// at the first read). There is no quiesce and no relisten on TCP.
func (s *server) serveTCP(ctx context.Context) error {
	ln := s.cfg.TCP
	s.log.Info("agent listening", "tcp", ln.Addr().String(), "root", s.cfg.Root, "pid", os.Getpid(), "reaper", s.cfg.reap)
	stop := context.AfterFunc(ctx, func() { ln.Close() })
	defer stop()
	for {
		c, err := ln.Accept()
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, net.ErrClosed) {
				break
			}
			s.backoff(ctx, err)
			continue
		}
		if !s.serveConn(ctx, c) {
			break
		}
	}
	ln.Close()
	s.finish()
	return nil
}

// shutdown closes every connection and output drainer.
func (s *server) shutdown() {
	s.bg.shutdown()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	for c := range s.conns {
		c.Close()
	}
	for f := range s.drains {
		f.Close()
	}
}

func (s *server) track(c net.Conn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	s.conns[c] = struct{}{}
	return true
}

func (s *server) untrack(c net.Conn) {
	s.mu.Lock()
	delete(s.conns, c)
	s.mu.Unlock()
	c.Close()
}

// conn is one operation's connection.
type conn struct {
	c   net.Conn
	br  *bufio.Reader
	fr  *wire.FrameReader
	fw  *wire.FrameWriter
	req wire.Request
}

func (s *server) handle(ctx context.Context, c net.Conn) {
	begin := time.Now()
	cn := &conn{c: c, br: bufio.NewReaderSize(c, wire.MaxHeaderBytes), fw: wire.NewFrameWriter(c)}
	cn.fr = wire.NewFrameReader(cn.br)
	c.SetReadDeadline(begin.Add(headerTimeout))
	req, err := wire.ReadRequest(cn.br)
	if err != nil {
		if !errors.Is(err, io.EOF) {
			s.sendError(cn, err)
		}
		s.log.Debug("bad request", "err", err)
		return
	}
	c.SetReadDeadline(time.Time{})
	cn.req = req
	switch req.Op {
	case wire.OpPing:
		err = cn.fw.SendJSON(wire.FrameResult, wire.PingResult{Version: version(), PID: os.Getpid(), UptimeNS: int64(time.Since(s.start)), Boot: s.bg.boot})
	case wire.OpQuiesce:
		if s.cfg.ListenFD > 0 || s.cfg.TCP != nil {
			err = errdefs.Conflict("the agent serves on the daemon's socket or on TCP; there is nothing to quiesce")
			break
		}
		// Answer first: closing the listener does not end this
		// connection, but the daemon waits for the socket file to go.
		if err = cn.fw.Send(wire.FrameEnd, nil); err == nil {
			s.quiesce()
		}
	case wire.OpExec:
		err = s.handleExec(ctx, cn)
	case wire.OpStat:
		err = s.handleStat(cn)
	case wire.OpList:
		err = s.handleList(cn)
	case wire.OpMkdir:
		err = s.mkdir(req)
		if err == nil {
			err = cn.fw.Send(wire.FrameEnd, nil)
		}
	case wire.OpRemove:
		err = s.root.Remove(req.Path, req.Recursive)
		if err == nil {
			err = cn.fw.Send(wire.FrameEnd, nil)
		}
	case wire.OpReadFile:
		err = s.handleReadFile(cn)
	case wire.OpWriteFile:
		err = s.handleWriteFile(cn)
	case wire.OpReadTar:
		err = s.handleReadTar(cn)
	case wire.OpWriteTar:
		err = s.handleWriteTar(cn)
	case wire.OpDial:
		err = s.handleDial(ctx, cn)
	case wire.OpMove:
		err = s.handleMove(cn)
	case wire.OpWatch:
		err = s.handleWatch(ctx, cn)
	case wire.OpProcStart:
		err = s.handleProcStart(cn)
	case wire.OpProcList:
		err = s.handleProcList(cn)
	case wire.OpProcAttach:
		err = s.handleProcAttach(ctx, cn)
	case wire.OpProcStdin:
		err = s.handleProcStdin(cn)
	case wire.OpProcSignal:
		err = s.handleProcSignal(cn)
	case wire.OpProcWait:
		err = s.handleProcWait(ctx, cn)
	case wire.OpSecretFiles:
		err = s.handleSecretFiles(cn)
	case wire.OpShutdown:
		err = s.handleShutdown(cn)
	default:
		err = errdefs.Invalid("unknown op %q", req.Op)
	}
	if err != nil {
		s.sendError(cn, err)
	}
	lvl := slog.LevelDebug
	if err != nil && wire.CodeOf(err) == wire.CodeInternal {
		lvl = slog.LevelWarn
	}
	s.log.Log(ctx, lvl, "op", "op", req.Op, "path", req.Path, "dur", time.Since(begin), "err", err)
}

// sendError sends err as an error frame: the user-safe message of a
// categorised error, the whole text of any other (the agent's internals are
// the sandbox's own, there is nothing of the host's in them).
func (s *server) sendError(cn *conn, err error) {
	we := wire.Error{Code: wire.CodeOf(err), Message: err.Error()}
	var de *errdefs.Error
	if errors.As(err, &de) {
		we.Message = de.Msg
	}
	if len(we.Message) > 4096 {
		we.Message = we.Message[:4096]
	}
	cn.fw.SendJSON(wire.FrameError, we)
}

// drain hands an exec's output that outlived its process (a background
// child still holding the pipe) to a goroutine that discards it until EOF,
// so the child is not killed by SIGPIPE. It ends with the server.
func (s *server) drain(f *os.File) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		f.Close()
		return
	}
	s.drains[f] = struct{}{}
	s.wg.Add(1)
	s.mu.Unlock()
	go func() {
		defer s.wg.Done()
		f.SetReadDeadline(time.Time{})
		io.Copy(io.Discard, f)
		s.mu.Lock()
		delete(s.drains, f)
		s.mu.Unlock()
		f.Close()
	}()
}

func version() string {
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" {
		return bi.Main.Version
	}
	return "devel"
}
