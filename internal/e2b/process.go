package e2b

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"strconv"
	"sync"
	"time"

	"connectrpc.com/connect"

	"github.com/berth-sh/berth/internal/access"

	pb "github.com/berth-sh/berth/internal/e2b/envdpb/process"
	"github.com/berth-sh/berth/internal/engine"
	"github.com/berth-sh/berth/internal/engine/procs"
	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/internal/sandbox"
)

// keepAlive is how often a process stream sends a keepalive event (the
// SDK asks for one within 50 s).
const keepAlive = 20 * time.Second

// processService is envd's process.Process over berth's background
// processes: every started command is one (so it can be listed,
// connected to, fed stdin and killed), its pid the real one inside the
// sandbox.
type processService struct{ d *Door }

func (s *processService) m() Engine { return s.d.cfg.Manager }

// eventSender serializes a stream's sends (output of two pipes and the
// keepalive ticker).
type eventSender struct {
	mu   sync.Mutex
	send func(*pb.ProcessEvent) error
}

func (e *eventSender) event(ev *pb.ProcessEvent) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.send(ev)
}

type dataWriter struct {
	e      *eventSender
	stderr bool
	pty    bool
}

func (w dataWriter) Write(p []byte) (int, error) {
	b := bytes.Clone(p)
	data := &pb.ProcessEvent_DataEvent{}
	switch {
	case w.pty:
		data.Output = &pb.ProcessEvent_DataEvent_Pty{Pty: b}
	case w.stderr:
		data.Output = &pb.ProcessEvent_DataEvent_Stderr{Stderr: b}
	default:
		data.Output = &pb.ProcessEvent_DataEvent_Stdout{Stdout: b}
	}
	if err := w.e.event(&pb.ProcessEvent{Event: &pb.ProcessEvent_Data{Data: data}}); err != nil {
		return 0, err
	}
	return len(p), nil
}

// follow streams process id's output (its ring, then live) as data
// events until it ends, then its end event.
func (s *processService) follow(ctx context.Context, sandboxID, id string, tty bool, e *eventSender) error {
	actx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		t := time.NewTicker(keepAlive)
		defer t.Stop()
		for {
			select {
			case <-actx.Done():
				return
			case <-t.C:
				if e.event(&pb.ProcessEvent{Event: &pb.ProcessEvent_Keepalive{Keepalive: &pb.ProcessEvent_KeepAlive{}}}) != nil {
					cancel()
					return
				}
			}
		}
	}()
	aio := procs.AttachIO{Stdout: dataWriter{e: e, pty: tty}, Stderr: dataWriter{e: e, stderr: true, pty: tty}}
	ex, err := s.m().AttachProcess(actx, sandboxID, id, true, aio, principalOf(ctx).Actor)
	if (err != nil || ctx.Err() != nil) && s.d.sandboxGone(ctx, sandboxID) {
		// The sandbox was killed or stopped under the stream: its
		// connection is cut, not ended, as when E2B's VM goes with its
		// connections. The SDK then asks envd's health, which says the
		// sandbox is not running, and tells its caller the sandbox was
		// killed (a TimeoutError) instead of an error of the stream's.
		panic(http.ErrAbortHandler)
	}
	if ctx.Err() != nil {
		// The stream's token ended, or its caller hung up: the stream
		// ends, the process runs on.
		return streamEnd(ctx)
	}
	if err != nil {
		return connectError(err)
	}
	if ex == nil {
		return connect.NewError(connect.CodeUnavailable, errors.New("the process's output ended before its exit"))
	}
	end := &pb.ProcessEvent_EndEvent{ExitCode: int32(ex.Code), Exited: ex.Signal == "", Status: "exit status " + strconv.Itoa(ex.Code)}
	if ex.Signal != "" {
		end.Status = "signal: " + ex.Signal
	}
	return e.event(&pb.ProcessEvent{Event: &pb.ProcessEvent_End{End: end}})
}

// sandboxGone reports whether sandbox id is no more, or on its way out
// (deleting, stopping, stopped, failed): what a stream that ended under
// it ended for.
func (d *Door) sandboxGone(ctx context.Context, id string) bool {
	sb, err := d.cfg.Manager.Get(context.WithoutCancel(ctx), id)
	if err != nil {
		return errors.Is(err, errdefs.ErrNotFound)
	}
	switch sb.State {
	case sandbox.StateDeleting, sandbox.StateDeleted, sandbox.StateStopping, sandbox.StateStopped, sandbox.StateFailed:
		return true
	}
	return false
}

// streamEnd is what a stream whose context ended returns: the end of the
// token it was opened with (server.Bind's cause) as its caller's reason,
// deadline_exceeded at the caller's own Connect timeout, nothing when the
// caller hung up (no one is left to read it).
func streamEnd(ctx context.Context) error {
	c := context.Cause(ctx)
	switch {
	case c == nil || errors.Is(c, context.Canceled):
		return nil
	case errors.Is(c, context.DeadlineExceeded):
		return connect.NewError(connect.CodeDeadlineExceeded, c)
	}
	return connectError(c)
}

func startEvent(pid int) *pb.ProcessEvent {
	return &pb.ProcessEvent{Event: &pb.ProcessEvent_Start{Start: &pb.ProcessEvent_StartEvent{Pid: uint32(pid)}}}
}

// envdStart is a process start as envd asks it: REST's request, and the
// home its user's commands get as HOME.
type envdStart struct {
	procs.StartRequest
	home string
}

// startRequest translates envd's start into REST's request.
func (s *processService) startRequest(ctx context.Context, req *connect.Request[pb.StartRequest]) (*envdStart, error) {
	named, err := userOf(req.Header())
	if err != nil {
		return nil, err
	}
	user := s.d.defaultUser(ctx, named)
	cfg := req.Msg.GetProcess()
	if cfg.GetCmd() == "" {
		return nil, errdefs.Invalid("process cmd is required")
	}
	start := &envdStart{StartRequest: procs.StartRequest{ExecRequest: engine.ExecRequest{Cmd: append([]string{cfg.GetCmd()}, cfg.GetArgs()...),
		Env: maps.Clone(cfg.GetEnvs()), User: named}, Tag: req.Msg.GetTag()}}
	if cfg.Cwd != nil {
		if start.Workdir, err = absPath(cfg.GetCwd(), user); err != nil {
			return nil, err
		}
	}
	if user != "" {
		start.home = homeOf(user)
	}
	return start, nil
}

func (s *processService) Start(ctx context.Context, req *connect.Request[pb.StartRequest], st *connect.ServerStream[pb.StartResponse]) error {
	sb := targetOf(ctx).Sandbox
	p := principalOf(ctx)
	tty := req.Msg.Pty != nil
	var (
		pr    procs.Process
		start *envdStart
	)
	// The start is the REST process start: the access layer's gate
	// decides, begins its record, has it translated (an untranslatable
	// start is recorded as REST's invalid one is), validates it with the
	// request type's one Validate (procs.StartRequest, as REST's) and
	// records its outcome, the same record whichever door it came through.
	err := s.d.auditedFrom(ctx, req.Peer().Addr, p, access.ProcessStart, sb, func() (access.Validator, error) {
		var err error
		start, err = s.startRequest(ctx, req)
		if err != nil {
			return nil, err
		}
		return start, nil
	}, func() error {
		exec := &start.ExecRequest
		if _, ok := exec.Env["HOME"]; !ok && start.home != "" {
			// envd's commands have their user's home as HOME, added
			// after the caller's request is judged.
			if exec.Env == nil {
				exec.Env = map[string]string{}
			}
			exec.Env["HOME"] = start.home
		}
		if tty {
			exec.TTY = true
			sz := req.Msg.GetPty().GetSize()
			exec.Rows, exec.Cols = clamp16(sz.GetRows()), clamp16(sz.GetCols())
		}
		var err error
		pr, err = s.m().StartProcess(ctx, sb, &start.StartRequest, p.Actor)
		return err
	})
	if err != nil {
		return connectError(err)
	}
	if !req.Msg.GetStdin() && !tty {
		// E2B closes a command's stdin unless asked to keep it.
		// A command already done has no stdin left to close.
		if err := s.m().ProcessStdin(ctx, sb, pr.ID, bytes.NewReader(nil), true, p.Actor); err != nil && !errors.Is(err, errdefs.ErrConflict) {
			return connectError(err)
		}
	}
	e := &eventSender{send: func(ev *pb.ProcessEvent) error { return st.Send(&pb.StartResponse{Event: ev}) }}
	if err := e.event(startEvent(pr.PID)); err != nil {
		return err
	}
	return s.follow(ctx, sb, pr.ID, tty, e)
}

func clamp16(v uint32) uint16 {
	if v > 0xffff {
		return 0xffff
	}
	return uint16(v)
}

// resolve finds the berth process a selector names: by pid among the
// running processes, or by tag.
func (s *processService) resolve(ctx context.Context, sel *pb.ProcessSelector) (procs.Process, error) {
	ps, err := s.m().ListProcesses(ctx, targetOf(ctx).Sandbox)
	if err != nil {
		return procs.Process{}, err
	}
	for _, p := range ps {
		if p.State != "running" {
			continue
		}
		switch v := sel.GetSelector().(type) {
		case *pb.ProcessSelector_Pid:
			if p.PID > 0 && uint32(p.PID) == v.Pid {
				return p, nil
			}
		case *pb.ProcessSelector_Tag:
			if p.Tag != "" && p.Tag == v.Tag {
				return p, nil
			}
		}
	}
	switch v := sel.GetSelector().(type) {
	case *pb.ProcessSelector_Pid:
		return procs.Process{}, errdefs.NotFound("process with pid %d not found", v.Pid)
	case *pb.ProcessSelector_Tag:
		return procs.Process{}, errdefs.NotFound("process with tag %q not found", v.Tag)
	}
	return procs.Process{}, errdefs.Invalid("a process selector (pid or tag) is required")
}

// resolving is the translation of a call that names a process by a
// selector (access.Translate): the process found, into *p, inside the
// gate, so a selector that names none is recorded as REST's call of an
// unknown process is.
func (s *processService) resolving(ctx context.Context, sel *pb.ProcessSelector, p *procs.Process) access.Translate {
	return func() (access.Validator, error) {
		found, err := s.resolve(ctx, sel)
		*p = found
		return nil, err
	}
}

func (s *processService) Connect(ctx context.Context, req *connect.Request[pb.ConnectRequest], st *connect.ServerStream[pb.ConnectResponse]) error {
	p, err := s.resolve(ctx, req.Msg.GetProcess())
	if err != nil {
		return connectError(err)
	}
	e := &eventSender{send: func(ev *pb.ProcessEvent) error { return st.Send(&pb.ConnectResponse{Event: ev}) }}
	if err := e.event(startEvent(p.PID)); err != nil {
		return err
	}
	return s.follow(ctx, targetOf(ctx).Sandbox, p.ID, p.TTY, e)
}

func (s *processService) List(ctx context.Context, _ *connect.Request[pb.ListRequest]) (*connect.Response[pb.ListResponse], error) {
	ps, err := s.m().ListProcesses(ctx, targetOf(ctx).Sandbox)
	if err != nil {
		return nil, connectError(err)
	}
	out := &pb.ListResponse{}
	for _, p := range ps {
		if p.State != "running" || len(p.Argv) == 0 {
			continue
		}
		info := &pb.ProcessInfo{Pid: uint32(p.PID), Config: &pb.ProcessConfig{Cmd: p.Argv[0], Args: p.Argv[1:]}}
		if p.Tag != "" {
			info.Tag = &p.Tag
		}
		out.Processes = append(out.Processes, info)
	}
	return connect.NewResponse(out), nil
}

func inputBytes(in *pb.ProcessInput) []byte {
	switch v := in.GetInput().(type) {
	case *pb.ProcessInput_Stdin:
		return v.Stdin
	case *pb.ProcessInput_Pty:
		return v.Pty
	}
	return nil
}

func (s *processService) SendInput(ctx context.Context, req *connect.Request[pb.SendInputRequest]) (*connect.Response[pb.SendInputResponse], error) {
	var p procs.Process
	if err := s.d.auditedFrom(ctx, req.Peer().Addr, principalOf(ctx), access.ProcessStdin, targetOf(ctx).Sandbox, s.resolving(ctx, req.Msg.GetProcess(), &p), func() error {
		return s.m().ProcessStdin(ctx, targetOf(ctx).Sandbox, p.ID, bytes.NewReader(inputBytes(req.Msg.GetInput())), false, principalOf(ctx).Actor)
	}); err != nil {
		return nil, connectError(err)
	}
	return connect.NewResponse(&pb.SendInputResponse{}), nil
}

func (s *processService) StreamInput(ctx context.Context, st *connect.ClientStream[pb.StreamInputRequest]) (*connect.Response[pb.StreamInputResponse], error) {
	var p *procs.Process
	for st.Receive() {
		switch ev := st.Msg().GetEvent().(type) {
		case *pb.StreamInputRequest_Start:
			// One record for the stream, as for REST's stdin stream.
			var found procs.Process
			if err := s.d.auditedFrom(ctx, st.Peer().Addr, principalOf(ctx), access.ProcessStdin, targetOf(ctx).Sandbox,
				s.resolving(ctx, ev.Start.GetProcess(), &found), func() error { return nil }); err != nil {
				return nil, connectError(err)
			}
			p = &found
		case *pb.StreamInputRequest_Data:
			if p == nil {
				return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("data before the start event"))
			}
			if err := s.m().ProcessStdin(ctx, targetOf(ctx).Sandbox, p.ID, bytes.NewReader(inputBytes(ev.Data.GetInput())), false, principalOf(ctx).Actor); err != nil {
				return nil, connectError(err)
			}
		}
	}
	if err := st.Err(); err != nil && !errors.Is(err, io.EOF) {
		return nil, err
	}
	return connect.NewResponse(&pb.StreamInputResponse{}), nil
}

func (s *processService) SendSignal(ctx context.Context, req *connect.Request[pb.SendSignalRequest]) (*connect.Response[pb.SendSignalResponse], error) {
	var p procs.Process
	sig, stop := "SIGTERM", false
	resolve := s.resolving(ctx, req.Msg.GetProcess(), &p)
	translate := func() (access.Validator, error) {
		if _, err := resolve(); err != nil {
			return nil, err
		}
		switch req.Msg.GetSignal() {
		case pb.Signal_SIGNAL_SIGKILL:
			sig, stop = "SIGKILL", true
		case pb.Signal_SIGNAL_SIGTERM:
		default:
			return nil, errdefs.Invalid("signal %v is not SIGTERM or SIGKILL", req.Msg.GetSignal())
		}
		return nil, nil
	}
	if err := s.d.auditedFrom(ctx, req.Peer().Addr, principalOf(ctx), access.ProcessSignal, targetOf(ctx).Sandbox, translate, func() error {
		return s.m().SignalProcess(ctx, targetOf(ctx).Sandbox, p.ID, sig, stop, principalOf(ctx).Actor)
	}); err != nil {
		return nil, connectError(err)
	}
	return connect.NewResponse(&pb.SendSignalResponse{}), nil
}

func (s *processService) CloseStdin(ctx context.Context, req *connect.Request[pb.CloseStdinRequest]) (*connect.Response[pb.CloseStdinResponse], error) {
	var p procs.Process
	if err := s.d.auditedFrom(ctx, req.Peer().Addr, principalOf(ctx), access.ProcessStdin, targetOf(ctx).Sandbox, s.resolving(ctx, req.Msg.GetProcess(), &p), func() error {
		return s.m().ProcessStdin(ctx, targetOf(ctx).Sandbox, p.ID, bytes.NewReader(nil), true, principalOf(ctx).Actor)
	}); err != nil {
		return nil, connectError(err)
	}
	return connect.NewResponse(&pb.CloseStdinResponse{}), nil
}

// Update resizes a running PTY. berth's background processes take a
// terminal size from an attached client only, so the door sets it on the
// terminal itself: `stty -F /dev/pts/N rows R cols C` (resizeScript) run in the
// sandbox as root (or the sandbox's default user, the owner of a
// terminal root cannot open) against the process's own terminal (TIOCSWINSZ, which
// also signals SIGWINCH to its foreground group). The pid is one the
// door resolved to a running PTY process of this sandbox; the command's
// only effect is inside the sandbox.
func (s *processService) Update(ctx context.Context, req *connect.Request[pb.UpdateRequest]) (*connect.Response[pb.UpdateResponse], error) {
	p, err := s.resolve(ctx, req.Msg.GetProcess())
	if err != nil {
		return nil, connectError(err)
	}
	sz := req.Msg.GetPty().GetSize()
	if sz == nil {
		return connect.NewResponse(&pb.UpdateResponse{}), nil
	}
	if !p.TTY || p.PID <= 0 {
		return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("the process has no PTY to resize"))
	}
	rows, cols := clamp16(sz.GetRows()), clamp16(sz.GetCols())
	if rows == 0 || cols == 0 {
		return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("rows and cols must be positive"))
	}
	// As root, else as the sandbox's default user (the terminal's owner
	// when root may not open it).
	var (
		msg limitedBuffer
		ex  engine.Exit
	)
	for _, user := range []string{"root", ""} {
		msg.Reset()
		ex, err = s.m().Exec(ctx, targetOf(ctx).Sandbox, &engine.ExecRequest{
			Cmd:  []string{"sh", "-c", resizeScript, "sh", strconv.Itoa(p.PID), strconv.Itoa(int(rows)), strconv.Itoa(int(cols))},
			User: user, Timeout: 10 * time.Second,
		}, engine.ExecIO{Stdout: &msg, Stderr: &msg}, principalOf(ctx).Actor)
		if err != nil {
			return nil, connectError(err)
		}
		if ex.Code == 0 {
			break
		}
	}
	if ex.Code != 0 {
		return nil, connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf("resizing the PTY: stty exited %d: %s", ex.Code, msg.String()))
	}
	return connect.NewResponse(&pb.UpdateResponse{}), nil
}

// resizeScript sets the size of process $1's terminal to $2 rows and $3
// columns. The terminal is found from /proc/$1/stat's tty_nr (readable by
// anyone), not /proc/$1/fd/0: a process that changed user is not
// dumpable, and sandbox root has no CAP_SYS_PTRACE to open its fds.
const resizeScript = `t=$(sed 's/.*) //' /proc/"$1"/stat | cut -d' ' -f5) || exit 3
maj=$(( (t >> 8) & 0xfff )); min=$(( (t & 0xff) | ((t >> 12) & 0xfff00) ))
[ "$maj" -ge 136 ] && [ "$maj" -le 143 ] || { echo "process $1 has no pseudo-terminal" >&2; exit 3; }
exec stty -F /dev/pts/$(( (maj - 136) * 256 + min )) rows "$2" cols "$3"`

// limitedBuffer keeps the first 1 KiB written to it (a message shown to
// the caller) and drops the rest.
type limitedBuffer struct{ bytes.Buffer }

func (b *limitedBuffer) Write(p []byte) (int, error) {
	if room := 1024 - b.Len(); room > 0 {
		b.Buffer.Write(p[:min(len(p), room)])
	}
	return len(p), nil
}
