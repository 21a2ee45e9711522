package mcp

import (
	"context"
	"time"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/client"
)

// ClientProcesses is Processes over the daemon's process API
// (/v1/sandboxes/{id}/processes), through the session's own client, so a
// tool call is authorized as the REST call it makes.
type ClientProcesses struct{ C *client.Client }

var _ Processes = ClientProcesses{}

// killWait bounds how long KillProcess waits for a killed process's end.
const killWait = 10 * time.Second

// StartBackground starts cmd detached: it outlives the tool call and the
// session, and belongs to its sandbox's lifecycle.
func (p ClientProcesses) StartBackground(ctx context.Context, sandboxID string, cmd []string, env map[string]string, workdir string) (ProcessInfo, error) {
	pr, err := p.C.StartProcess(ctx, sandboxID, api.StartProcessRequest{ExecRequest: api.ExecRequest{Cmd: cmd, Env: env, Workdir: workdir}})
	if err != nil {
		return ProcessInfo{}, err
	}
	return processInfo(pr), nil
}

// ListProcesses lists the sandbox's running and recently ended processes.
func (p ClientProcesses) ListProcesses(ctx context.Context, sandboxID string) ([]ProcessInfo, error) {
	ps, err := p.C.Processes(ctx, sandboxID)
	if err != nil {
		return nil, err
	}
	out := make([]ProcessInfo, 0, len(ps))
	for _, pr := range ps {
		out = append(out, processInfo(pr))
	}
	return out, nil
}

// KillProcess sends signal (default SIGTERM) to the process's group, or
// kills it (SIGKILL, and its restart supervision ends) when signal is
// "KILL"/"SIGKILL", and returns the process as it then reads.
func (p ClientProcesses) KillProcess(ctx context.Context, sandboxID, processID, signal string) (ProcessInfo, error) {
	var err error
	switch signal {
	case "KILL", "SIGKILL":
		if err = p.C.KillProcess(ctx, sandboxID, processID); err == nil {
			// A kill is not refused by the process: wait (boundedly) so
			// the answer shows it ended.
			wctx, cancel := context.WithTimeout(ctx, killWait)
			_, err = p.C.WaitProcess(wctx, sandboxID, processID)
			cancel()
		}
	default:
		err = p.C.SignalProcess(ctx, sandboxID, processID, signal)
	}
	if err != nil {
		return ProcessInfo{}, err
	}
	pr, err := p.C.Process(ctx, sandboxID, processID)
	if err != nil {
		return ProcessInfo{}, err
	}
	return processInfo(pr), nil
}

func processInfo(pr api.Process) ProcessInfo {
	pi := ProcessInfo{ID: pr.ID, Cmd: pr.Argv, State: pr.State, PID: pr.PID}
	if pr.Exit != nil {
		code := pr.Exit.Code
		pi.ExitCode = &code
	}
	return pi
}
