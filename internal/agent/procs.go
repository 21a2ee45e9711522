package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"io"

	"github.com/berth-sh/berth/internal/agent/wire"
	"github.com/berth-sh/berth/internal/errdefs"
)

// Background processes (see wire's package doc). Everything the agent
// answers is bounded here: the number of entries of a list, the size of
// each, tags, states and signal names.
type (
	ProcInfo     = wire.ProcInfo
	ProcRequest  = wire.ProcRequest
	ProcListHead = wire.ProcListHead
)

// StartProc starts a background process; it outlives this call. Tag,
// Restart and MaxRestarts of pr are used.
func (c *Client) StartProc(ctx context.Context, req ExecRequest, pr ProcRequest) (ProcInfo, error) {
	if len(req.Argv) == 0 {
		return ProcInfo{}, errdefs.Invalid("exec: empty argv")
	}
	spec := &wire.ExecSpec{Argv: req.Argv, Env: req.Env, Dir: req.Dir, User: req.User, TTY: req.TTY, Rows: req.Rows, Cols: req.Cols}
	cc, err := c.open(ctx, wire.Request{Op: wire.OpProcStart, Exec: spec, Proc: &wire.ProcRequest{Tag: pr.Tag, Restart: pr.Restart, MaxRestarts: pr.MaxRestarts}})
	if err != nil {
		return ProcInfo{}, err
	}
	defer cc.close()
	var in ProcInfo
	if err := cc.result(&in); err != nil {
		return ProcInfo{}, err
	}
	return sanitizeProc(in)
}

// sanitizeProc bounds what an agent reports of a process.
func sanitizeProc(in ProcInfo) (ProcInfo, error) {
	if in.ID == "" || len(in.ID) > 20 || len(in.Tag) > wire.MaxTagBytes || len(in.Argv) > wire.ProcInfoArgs {
		return ProcInfo{}, wire.ProtocolErrorf("malformed process info")
	}
	for _, a := range in.Argv {
		if len(a) > wire.ProcInfoArg {
			return ProcInfo{}, wire.ProtocolErrorf("malformed process info")
		}
	}
	switch in.State {
	case wire.ProcRunning, wire.ProcRestarting, wire.ProcExited, wire.ProcKilled:
	default:
		return ProcInfo{}, wire.ProtocolErrorf("process state %.32q", in.State)
	}
	switch in.Restart {
	case "", wire.RestartNever, wire.RestartAlways, wire.RestartOnFailure:
	default:
		return ProcInfo{}, wire.ProtocolErrorf("restart policy %.32q", in.Restart)
	}
	if in.Exit != nil {
		ex := sanitizeExit(*in.Exit)
		in.Exit = &ex
	}
	return in, nil
}

func sanitizeExit(ex Exit) Exit {
	ex.OOMKilled = false
	if len(ex.Signal) > 32 {
		ex.Signal = ex.Signal[:32]
	}
	return ex
}

// ListProcs lists the agent's background processes, running and ended,
// and the agent's boot id.
func (c *Client) ListProcs(ctx context.Context) (string, []ProcInfo, error) {
	cc, err := c.open(ctx, wire.Request{Op: wire.OpProcList})
	if err != nil {
		return "", nil, err
	}
	defer cc.close()
	var head ProcListHead
	if err := cc.result(&head); err != nil {
		return "", nil, err
	}
	if len(head.Boot) > 64 || head.Count < 0 || head.Count > wire.MaxProcs+wire.MaxProcExits {
		return "", nil, wire.ProtocolErrorf("process list head over its caps")
	}
	out := make([]ProcInfo, 0, head.Count)
	for range head.Count {
		var in ProcInfo
		if err := cc.result(&in); err != nil {
			return "", nil, err
		}
		if in, err = sanitizeProc(in); err != nil {
			return "", nil, err
		}
		out = append(out, in)
	}
	if _, err := cc.expect(wire.FrameEnd); err != nil {
		return "", nil, err
	}
	return head.Boot, out, nil
}

// AttachIO is an attacher's side of a background process.
type AttachIO struct {
	// Stdin, if set, is copied to the process (closing it at EOF unless
	// KeepStdin).
	Stdin     io.Reader
	KeepStdin bool
	// Stdout and Stderr receive the replay and then the live output.
	Stdout, Stderr io.Writer
	// Gap is told of output lost before this attacher read it.
	Gap func(skipped int64)
	// Resize and Signal carry terminal sizes and signals.
	Resize <-chan Resize
	Signal <-chan string
}

// AttachProc replays process ref's output ring and, with follow, streams
// its output until it ends. It returns the exit if the process has ended
// (nil otherwise: without follow, the replay of a running process).
func (c *Client) AttachProc(ctx context.Context, ref string, follow bool, aio AttachIO) (*Exit, error) {
	cc, err := c.open(ctx, wire.Request{Op: wire.OpProcAttach, Proc: &wire.ProcRequest{ID: ref, Follow: follow}})
	if err != nil {
		return nil, err
	}
	done := make(chan struct{})
	defer func() {
		close(done)
		cc.close()
	}()
	if aio.Stdin != nil {
		go func() {
			if err := pumpInput(aio.Stdin, cc.fw); err != errSend && !aio.KeepStdin {
				cc.fw.Send(wire.FrameStdinEOF, nil)
			}
		}()
	}
	if aio.Resize != nil || aio.Signal != nil {
		go func() {
			for {
				select {
				case rs, ok := <-aio.Resize:
					if !ok {
						aio.Resize = nil
						continue
					}
					cc.fw.SendJSON(wire.FrameResize, rs)
				case sig, ok := <-aio.Signal:
					if !ok {
						aio.Signal = nil
						continue
					}
					cc.fw.SendJSON(wire.FrameSignal, wire.SignalMsg{Signal: sig})
				case <-done:
					return
				}
			}
		}()
	}
	stdout, stderr := orDiscard(aio.Stdout), orDiscard(aio.Stderr)
	for {
		t, p, err := cc.next()
		if err != nil {
			return nil, err
		}
		switch t {
		case wire.FrameStdout, wire.FrameStderr:
			w := stdout
			if t == wire.FrameStderr {
				w = stderr
			}
			if _, err := w.Write(p); err != nil {
				return nil, fmt.Errorf("attach: write output: %w", err)
			}
		case wire.FrameGap:
			var g wire.Gap
			if len(p) > 1<<10 || json.Unmarshal(p, &g) != nil || g.Skipped < 0 {
				return nil, wire.ProtocolErrorf("malformed gap frame")
			}
			if aio.Gap != nil {
				aio.Gap(g.Skipped)
			}
		case wire.FrameExit:
			ex, err := decodeExit(p)
			if err != nil {
				return nil, err
			}
			return &ex, nil
		case wire.FrameEnd:
			return nil, nil
		default:
			return nil, wire.ProtocolErrorf("unexpected %s frame while attached", t)
		}
	}
}

func decodeExit(p []byte) (Exit, error) {
	var ex Exit
	if len(p) > 64<<10 || json.Unmarshal(p, &ex) != nil {
		return Exit{}, wire.ProtocolErrorf("malformed exit frame")
	}
	return sanitizeExit(ex), nil
}

func orDiscard(w io.Writer) io.Writer {
	if w == nil {
		return io.Discard
	}
	return w
}

// ProcStdin copies r to process ref's stdin, then closes it if close.
func (c *Client) ProcStdin(ctx context.Context, ref string, r io.Reader, close bool) error {
	cc, err := c.open(ctx, wire.Request{Op: wire.OpProcStdin, Proc: &wire.ProcRequest{ID: ref}})
	if err != nil {
		return err
	}
	defer cc.close()
	buf := make([]byte, wire.DataChunk)
	var sendErr error
	for r != nil {
		n, rerr := r.Read(buf)
		if n > 0 {
			if sendErr = cc.fw.Send(wire.FrameStdin, buf[:n]); sendErr != nil {
				break
			}
		}
		if rerr == io.EOF {
			break
		}
		if rerr != nil {
			return fmt.Errorf("stdin: read: %w", rerr)
		}
	}
	if sendErr == nil {
		if close {
			cc.fw.Send(wire.FrameStdinEOF, nil)
		} else {
			cc.fw.Send(wire.FrameEnd, nil)
		}
	}
	_, err = cc.expect(wire.FrameEnd)
	return err
}

// SignalProc sends signal (a name, "" is SIGTERM) to process ref's group;
// with stop, a supervised process is not restarted after it.
func (c *Client) SignalProc(ctx context.Context, ref, signal string, stop bool) error {
	return c.simple(ctx, wire.Request{Op: wire.OpProcSignal, Proc: &wire.ProcRequest{ID: ref, Signal: signal, Stop: stop}})
}

// WaitProc waits until process ref has ended for good and returns its
// last exit. The agent decides when that is: callers bound it with ctx.
func (c *Client) WaitProc(ctx context.Context, ref string) (Exit, error) {
	cc, err := c.open(ctx, wire.Request{Op: wire.OpProcWait, Proc: &wire.ProcRequest{ID: ref}})
	if err != nil {
		return Exit{}, err
	}
	defer cc.close()
	p, err := cc.expect(wire.FrameExit)
	if err != nil {
		return Exit{}, err
	}
	return decodeExit(p)
}
