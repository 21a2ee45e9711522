package agentd

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/berth-sh/berth/internal/agent/rootfs"

	"github.com/berth-sh/berth/internal/agent/wire"

	"golang.org/x/sys/unix"

	"github.com/berth-sh/berth/internal/errdefs"
)

const (
	defaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
	// After the process exits its output is read on while more arrives
	// within outputGrace of the last read, for at most outputLinger: a
	// background child that keeps the pipe open must not hold the exec.
	outputGrace  = 100 * time.Millisecond
	outputLinger = 2 * time.Second
	// maxArgs caps argv and env entries.
	maxArgs = 1 << 16
)

// handleExec runs one process. Before the process starts, failures come
// back as an error frame; after, the frames are stdout/stderr as produced
// and one exit frame.
func (s *server) handleExec(ctx context.Context, cn *conn) error {
	s.execs.Add(1)
	defer s.execs.Add(-1)
	spec := cn.req.Exec
	eio, pid, done, err := s.spawn(spec)
	if err != nil {
		return s.execFailed(cn, spec, err)
	}
	defer eio.closeParent()
	begin := time.Now()
	log := s.log.With("pid", pid, "argv0", spec.Argv[0])
	log.Debug("exec started")

	// Output: one copier per stream, each blocking on the connection when
	// the client reads slowly, so the process blocks on its full pipe.
	var exitedAt atomic.Int64
	var copiers sync.WaitGroup
	outs := eio.outputs()
	cut := make([]bool, len(outs))
	for i, o := range outs {
		copiers.Add(1)
		go func() {
			defer copiers.Done()
			cut[i] = copyOutput(o.f, o.t, cn.fw, &exitedAt)
		}()
	}

	// Input: stdin, resize and signal frames. It ends when the client
	// goes away (or breaks the protocol), which kills the process group.
	inputDone := make(chan error, 1)
	go func() { inputDone <- execInput(cn.fr, eio, pid) }()

	var timeout <-chan time.Time
	if spec.TimeoutMS > 0 {
		t := time.NewTimer(time.Duration(spec.TimeoutMS) * time.Millisecond)
		defer t.Stop()
		timeout = t.C
	}
	var ws unix.WaitStatus
	timedOut, inputEnded := false, false
	ctxDone := ctx.Done()
wait:
	for {
		select {
		case ws = <-done:
			break wait
		case <-timeout:
			timedOut, timeout = true, nil
			unix.Kill(-pid, unix.SIGKILL)
		case err := <-inputDone:
			inputEnded = true
			inputDone = nil
			log.Debug("exec client gone; killing process group", "err", err)
			unix.Kill(-pid, unix.SIGKILL)
		case <-ctxDone:
			ctxDone = nil
			unix.Kill(-pid, unix.SIGKILL)
		}
	}
	dur := time.Since(begin)
	now := time.Now()
	exitedAt.Store(now.UnixNano())
	for _, o := range outs {
		o.f.SetReadDeadline(now.Add(outputGrace))
	}
	copiers.Wait()

	exit := wire.Exit{TimedOut: timedOut, DurationMS: float64(dur.Microseconds()) / 1000}
	switch {
	case ws.Signaled():
		exit.Code = 128 + int(ws.Signal())
		exit.Signal = unix.SignalName(ws.Signal())
	default:
		exit.Code = ws.ExitStatus()
	}
	log.Debug("exec exited", "code", exit.Code, "signal", exit.Signal, "timed_out", timedOut, "dur", dur)
	err = cn.fw.SendJSON(wire.FrameExit, exit)

	// Stop the input goroutine: it may sit in a read of the connection or
	// a write to a stdin nobody reads.
	eio.stopInput()
	cn.c.SetReadDeadline(time.Now())
	if !inputEnded {
		<-inputDone
	}
	for i, o := range outs {
		if cut[i] {
			// A background child still holds the output: discard it
			// rather than have the child die of SIGPIPE.
			eio.forget(o.f)
			s.drain(o.f)
		}
	}
	return err
}

// spawn checks spec and starts its process with its stdio (pipes, or a
// PTY). A failure to find or execute the command is a *commandError.
func (s *server) spawn(spec *wire.ExecSpec) (*execIO, int, <-chan unix.WaitStatus, error) {
	s.syncHosts() // a renamed sandbox (a warm-pool claim) gets its new name in /etc/hosts
	if spec == nil || len(spec.Argv) == 0 || spec.Argv[0] == "" {
		return nil, 0, nil, errdefs.Invalid("exec: empty argv")
	}
	if len(spec.Argv) > maxArgs || len(spec.Env) > maxArgs {
		return nil, 0, nil, errdefs.Invalid("exec: too many arguments or environment entries")
	}
	for _, a := range append(append([]string{spec.Dir, spec.User}, spec.Argv...), spec.Env...) {
		if strings.IndexByte(a, 0) >= 0 {
			return nil, 0, nil, errdefs.Invalid("exec: NUL byte in argv, env, dir or user")
		}
	}
	dir := spec.Dir
	if dir == "" {
		dir = "/"
	}
	if !filepath.IsAbs(dir) {
		return nil, 0, nil, errdefs.Invalid("exec: working directory %q is not absolute", dir)
	}
	cred, err := s.root.ResolveUser(spec.User)
	if err != nil {
		return nil, 0, nil, err
	}
	if st, err := os.Stat(dir); err != nil {
		return nil, 0, nil, rootfs.PathErr("exec: working directory", dir, underlyingErrno(err))
	} else if !st.IsDir() {
		return nil, 0, nil, errdefs.Invalid("exec: working directory %s is not a directory", dir)
	}
	if spec.TTY && !hasEnv(spec.Env, "TERM") {
		spec.Env = append(spec.Env[:len(spec.Env):len(spec.Env)], "TERM="+defaultTerm)
	}
	argv0, err := lookPath(spec.Argv[0], spec.Env, dir)
	if err != nil {
		return nil, 0, nil, &commandError{err}
	}
	eio, err := newExecIO(spec)
	if err != nil {
		return nil, 0, nil, err
	}
	sys := &syscall.SysProcAttr{Credential: cred}
	if spec.TTY {
		sys.Setsid, sys.Setctty, sys.Ctty = true, true, 0
	} else {
		sys.Setpgid = true
	}
	attr := &syscall.ProcAttr{Dir: dir, Env: spec.Env, Files: eio.childFds(), Sys: sys}
	pid, done, err := s.procs.start(argv0, spec.Argv, attr)
	eio.closeChild()
	if err != nil {
		eio.closeParent()
		return nil, 0, nil, &commandError{execErr(spec.Argv[0], err)}
	}
	return eio, pid, done, nil
}

// commandError is a failure to find or execute the command itself, which
// a shell reports as exit 127 or 126 (commandExit).
type commandError struct{ error }

func (e *commandError) Unwrap() error { return e.error }

// defaultTerm is TERM under a TTY when the caller sets none.
const defaultTerm = "xterm-256color"

func hasEnv(env []string, key string) bool {
	for _, kv := range env {
		if k, _, ok := strings.Cut(kv, "="); ok && k == key {
			return true
		}
	}
	return false
}

// commandExit maps a failure to find or execute the command to the exit
// code a shell gives it: 127 for a command that does not exist, 126 for
// one that cannot be executed. ok is false for any other failure.
func commandExit(err error) (code int, ok bool) {
	var ce *commandError
	if !errors.As(err, &ce) {
		return 0, false
	}
	switch {
	case errors.Is(err, errdefs.ErrNotFound):
		return 127, true
	case errors.Is(err, errdefs.ErrPermission), errors.Is(err, errdefs.ErrInvalid):
		return 126, true
	}
	return 0, false
}

// execFailed answers an exec whose command could not be started: like a
// shell, with the reason on stderr (stdout under a TTY) and exit 127 or
// 126; any other failure is returned as the error frame.
func (s *server) execFailed(cn *conn, spec *wire.ExecSpec, err error) error {
	code, ok := commandExit(err)
	if !ok {
		return err
	}
	msg := err.Error()
	var de *errdefs.Error
	if errors.As(err, &de) {
		msg = de.Msg
	}
	t := wire.FrameStderr
	if spec.TTY {
		t = wire.FrameStdout
	}
	if werr := cn.fw.Write(t, []byte("berth: "+msg+"\n")); werr != nil {
		return werr
	}
	return cn.fw.SendJSON(wire.FrameExit, wire.Exit{Code: code})
}

// underlyingErrno digs the errno out of an *os.PathError.
func underlyingErrno(err error) error {
	var errno syscall.Errno
	if errors.As(err, &errno) {
		return errno
	}
	return err
}

// execErr maps a fork/exec failure to a category.
func execErr(argv0 string, err error) error {
	var errno syscall.Errno
	if !errors.As(err, &errno) {
		return errdefs.Invalid("exec %s: %v", argv0, err)
	}
	switch errno {
	case unix.ENOENT:
		return errdefs.NotFound("exec %s: no such file or directory (or its interpreter is missing)", argv0)
	case unix.EACCES, unix.EPERM:
		return errdefs.Permission("exec %s: %s", argv0, errno)
	case unix.ENOEXEC:
		return errdefs.Invalid("exec %s: not an executable format", argv0)
	case unix.E2BIG:
		return errdefs.TooLarge("exec %s: argument list too long", argv0)
	}
	return rootfs.PathErr("exec", argv0, errno)
}

// lookPath finds file in the PATH of the process's environment (not the
// agent's), resolving relative entries against the working directory.
func lookPath(file string, env []string, dir string) (string, error) {
	if strings.Contains(file, "/") {
		return file, nil // execve reports what is wrong with it
	}
	pathEnv := defaultPath
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok {
			pathEnv = v
		}
	}
	denied := false
	for _, d := range filepath.SplitList(pathEnv) {
		if d == "" {
			d = "."
		}
		p := filepath.Join(d, file)
		abs := p
		if !filepath.IsAbs(abs) {
			abs = filepath.Join(dir, abs)
			p = "./" + p // keep it a path for execve after the chdir
		}
		st, err := os.Stat(abs)
		if err != nil || !st.Mode().IsRegular() {
			continue
		}
		if st.Mode()&0o111 == 0 {
			denied = true
			continue
		}
		return p, nil
	}
	if denied {
		return "", errdefs.Permission("exec %s: permission denied", file)
	}
	return "", errdefs.NotFound("exec %s: executable file not found in $PATH", file)
}

// execIO holds the process's stdio: pipes, or a PTY.
type execIO struct {
	tty      bool
	ptmx     *os.File // parent side of the PTY; stdin and stdout under TTY
	stdinW   *os.File
	stdoutR  *os.File
	stderrR  *os.File
	child    []*os.File
	mu       sync.Mutex // guards stdinW against close during writes
	stdinEOF bool
}

type output struct {
	f *os.File
	t wire.FrameType
}

func newExecIO(spec *wire.ExecSpec) (*execIO, error) {
	e := &execIO{tty: spec.TTY}
	if spec.TTY {
		ptmx, pts, err := openPTY()
		if err != nil {
			return nil, errdefs.Permission("exec: open pty: %v", err)
		}
		rows, cols := spec.Rows, spec.Cols
		if rows == 0 || cols == 0 {
			rows, cols = 24, 80
		}
		if err := setWinsize(ptmx, rows, cols); err != nil {
			ptmx.Close()
			pts.Close()
			return nil, rootfs.PathErr("exec: resize pty", "", err)
		}
		e.ptmx = ptmx
		e.child = []*os.File{pts, pts, pts}
		return e, nil
	}
	var err error
	var inR, outW, errW *os.File
	defer func() {
		if err != nil {
			e.closeParent()
			e.closeChild()
		}
	}()
	if inR, e.stdinW, err = os.Pipe(); err != nil {
		return nil, err
	}
	e.child = append(e.child, inR)
	if e.stdoutR, outW, err = os.Pipe(); err != nil {
		return nil, err
	}
	e.child = append(e.child, outW)
	if e.stderrR, errW, err = os.Pipe(); err != nil {
		return nil, err
	}
	e.child = append(e.child, errW)
	return e, nil
}

// childFds returns the child's stdio fds. Fd puts them in blocking mode,
// which is what the child expects.
func (e *execIO) childFds() []uintptr {
	fds := make([]uintptr, len(e.child))
	for i, f := range e.child {
		fds[i] = f.Fd()
	}
	return fds
}

func (e *execIO) closeChild() {
	seen := map[*os.File]bool{}
	for _, f := range e.child {
		if f != nil && !seen[f] {
			seen[f] = true
			f.Close()
		}
	}
	e.child = nil
}

func (e *execIO) outputs() []output {
	if e.tty {
		return []output{{e.ptmx, wire.FrameStdout}}
	}
	return []output{{e.stdoutR, wire.FrameStdout}, {e.stderrR, wire.FrameStderr}}
}

// forget drops f from what closeParent closes (it was handed off).
func (e *execIO) forget(f *os.File) {
	e.mu.Lock()
	defer e.mu.Unlock()
	switch f {
	case e.ptmx:
		e.ptmx = nil
	case e.stdoutR:
		e.stdoutR = nil
	case e.stderrR:
		e.stderrR = nil
	}
}

func (e *execIO) closeStdin() {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.stdinW != nil {
		e.stdinW.Close()
	}
	e.stdinEOF = true
}

// stopInput ends stdin for good and unblocks a write in progress.
func (e *execIO) stopInput() {
	e.closeStdin()
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.ptmx != nil {
		e.ptmx.SetWriteDeadline(time.Now())
	}
}

func (e *execIO) closeParent() {
	e.closeStdin()
	for _, f := range []*os.File{e.ptmx, e.stdoutR, e.stderrR} {
		if f != nil {
			f.Close()
		}
	}
}

// writeStdin writes client input to the process. A write error (the
// process closed its stdin or exited) drops further input.
func (e *execIO) writeStdin(p []byte) {
	e.mu.Lock()
	w, eof := e.stdinW, e.stdinEOF
	if e.tty {
		w = e.ptmx
	}
	e.mu.Unlock()
	if eof || w == nil {
		return
	}
	// Unlocked: the write may block on a full pipe; closeStdin unblocks
	// it by closing the file.
	if _, err := w.Write(p); err != nil {
		e.closeStdin()
	}
}

// execInput applies the client's frames until the connection ends. Under
// a TTY, stdin EOF is ignored: the terminal has no EOF of its own.
func execInput(fr *wire.FrameReader, e *execIO, pid int) error {
	for {
		t, p, err := fr.Next()
		if err != nil {
			return err
		}
		switch t {
		case wire.FrameStdin:
			e.writeStdin(p)
		case wire.FrameStdinEOF:
			if !e.tty {
				e.closeStdin()
			}
		case wire.FrameResize:
			var rs wire.Resize
			if json.Unmarshal(p, &rs) != nil || rs.Rows == 0 || rs.Cols == 0 {
				continue // a bad resize is not worth killing the process for
			}
			if e.tty {
				setWinsize(e.ptmx, rs.Rows, rs.Cols)
			}
		case wire.FrameSignal:
			var sm wire.SignalMsg
			if json.Unmarshal(p, &sm) != nil {
				continue
			}
			if sig := parseSignal(sm.Signal); sig != 0 {
				unix.Kill(-pid, sig)
			}
		default:
			return wire.ProtocolErrorf("unexpected %s frame during exec", t)
		}
	}
}

func parseSignal(name string) unix.Signal {
	name = strings.ToUpper(name)
	if !strings.HasPrefix(name, "SIG") {
		name = "SIG" + name
	}
	return unix.SignalNum(name)
}

// copyOutput sends what f produces as frames of type t until EOF. After
// the process exits (exitedAt set, and a read deadline set by the caller)
// it reads on only while output keeps coming, see outputGrace. It reports
// whether it stopped with the stream still open (a background child holds
// it).
func copyOutput(f *os.File, t wire.FrameType, fw *wire.FrameWriter, exitedAt *atomic.Int64) (cut bool) {
	buf := make([]byte, wire.DataChunk)
	for {
		n, err := f.Read(buf)
		if n > 0 {
			if fw.Send(t, buf[:n]) != nil {
				return false
			}
		}
		if err != nil {
			if !errors.Is(err, os.ErrDeadlineExceeded) {
				return false // EOF, or EIO from a PTY whose every slave is closed
			}
			ex := exitedAt.Load()
			// What the process left in the pipe is always sent, however
			// slow the client, but not an endless stream from a child.
			if pending(f) > 0 && time.Since(time.Unix(0, ex)) < 5*outputLinger {
				f.SetReadDeadline(time.Now().Add(outputGrace))
				continue
			}
			return true
		}
		if ex := exitedAt.Load(); ex != 0 {
			d := time.Now().Add(outputGrace)
			if limit := time.Unix(0, ex).Add(outputLinger); d.After(limit) {
				d = limit
			}
			f.SetReadDeadline(d)
		}
	}
}

// pending returns how many bytes f has ready to read.
func pending(f *os.File) int {
	rc, err := f.SyscallConn()
	if err != nil {
		return 0
	}
	n := 0
	rc.Control(func(fd uintptr) {
		n, _ = unix.IoctlGetInt(int(fd), unix.TIOCINQ)
	})
	return n
}

// openPTY opens a PTY pair: the parent side non-blocking (so reads take
// deadlines), the child side by TIOCGPTPEER, without a path lookup in /dev.
func openPTY() (ptmx, pts *os.File, err error) {
	mfd, err := unix.Open("/dev/ptmx", unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if err != nil {
		return nil, nil, err
	}
	var unlock int32
	if err := unix.IoctlSetPointerInt(mfd, unix.TIOCSPTLCK, int(unlock)); err != nil {
		unix.Close(mfd)
		return nil, nil, err
	}
	sfd, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(mfd), unix.TIOCGPTPEER, uintptr(unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC))
	if errno != 0 {
		unix.Close(mfd)
		return nil, nil, errno
	}
	return os.NewFile(uintptr(mfd), "ptmx"), os.NewFile(sfd, "pts"), nil
}

func setWinsize(f *os.File, rows, cols uint16) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	ws := unix.Winsize{Row: rows, Col: cols}
	var ierr error
	if err := rc.Control(func(fd uintptr) {
		ierr = unix.IoctlSetWinsize(int(fd), unix.TIOCSWINSZ, &ws)
	}); err != nil {
		return err
	}
	return ierr
}
