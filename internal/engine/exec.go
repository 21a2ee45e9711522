package engine

import (
	"context"
	"fmt"
	"io"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/berth-sh/berth/internal/agent"
	"github.com/berth-sh/berth/internal/agent/sudo"
	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/internal/sandbox"
)

// ExecIO carries an exec's streams. Stdin nil means no input.
type ExecIO struct {
	Stdin          io.Reader
	Stdout, Stderr io.Writer
	Resize         <-chan Resize
}

// Limits on an exec request.
const (
	maxArgs      = 4096
	maxArgBytes  = 256 << 10
	maxExecStdin = 64 << 20
)

// Exec runs a command in a running sandbox, streaming its output, and
// returns how it ended. Cancelling ctx kills the command.
func (m *Engine) Exec(ctx context.Context, ref string, req *ExecRequest, eio ExecIO, actor string) (Exit, error) {
	sb, err := m.local(ctx, ref)
	if err != nil {
		return Exit{}, err
	}
	begin := time.Now()
	exit, err := m.execIn(ctx, sb, req, eio, actor)
	m.cfg.Metrics.ExecDone(execOutcome(exit, err), time.Since(begin))
	return exit, err
}

// Validate checks an exec request before it reaches the agent: the one
// set of rules every door's exec and process start meets (REST and its
// WebSocket at the edge through input.Validate, the E2B door, MCP
// through REST, background processes through StartRequest.Validate).
func (req *ExecRequest) Validate() error {
	if len(req.Cmd) == 0 || req.Cmd[0] == "" {
		return errdefs.Invalid("cmd is required")
	}
	return req.CheckFields()
}

// CheckFields is Validate but for a missing command: a run's command may
// come from its template, after the edge has checked the rest.
func (req *ExecRequest) CheckFields() error {
	if len(req.Cmd) > maxArgs {
		return errdefs.Invalid("at most %d arguments", maxArgs)
	}
	n := 0
	for _, a := range req.Cmd {
		n += len(a)
		if strings.IndexByte(a, 0) >= 0 {
			return errdefs.Invalid("arguments must not contain NUL bytes")
		}
	}
	if n > maxArgBytes {
		return errdefs.TooLarge("arguments exceed %d bytes", maxArgBytes)
	}
	if len(req.Env) > sandbox.MaxEnv {
		return errdefs.Limit("max_env", sandbox.MaxEnv, "%d env variables given", len(req.Env))
	}
	for k, v := range req.Env {
		if k == "" || strings.Contains(k, "=") {
			return errdefs.Invalid("bad env name %q", k)
		}
		if err := sandbox.CheckText("env name", k); err != nil {
			return err
		}
		if err := sandbox.CheckEnvValue(k, v); err != nil {
			return err
		}
	}
	if req.Workdir != "" {
		if err := sandbox.CheckPath("workdir", req.Workdir); err != nil {
			return err
		}
	}
	if err := sandbox.CheckText("user", req.User); err != nil {
		return err
	}
	if req.Timeout < 0 || req.Timeout > sandbox.MaxTimeout {
		return errdefs.Invalid("timeout_seconds out of range")
	}
	if len(req.Stdin) > maxExecStdin {
		return errdefs.TooLarge("stdin exceeds %d bytes; stream it over the WebSocket instead", maxExecStdin)
	}
	return nil
}

func (m *Engine) execIn(ctx context.Context, sb *sandbox.Sandbox, req *ExecRequest, eio ExecIO, actor string) (Exit, error) {
	if err := req.Validate(); err != nil {
		return Exit{}, err
	}
	sb, err := m.readyForUse(ctx, sb, "exec", actor)
	if err != nil {
		return Exit{}, err
	}
	m.touch(sb.ID)
	defer m.touch(sb.ID)
	areq, err := m.agentExecRequest(ctx, sb, req)
	if err != nil {
		return Exit{}, err
	}
	stdin := eio.Stdin
	if stdin == nil && len(req.Stdin) > 0 {
		stdin = strings.NewReader(string(req.Stdin))
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	release := m.live.get(sb.ID).trackExec(cancel)
	defer release()

	// The timeout is the daemon's, not only the agent's: if the agent has
	// not reported the end of the command shortly after it, the exec ends
	// here (closing the connection, on which a working agent kills the
	// process group) and an agent that does not answer is dealt with from
	// the host.
	var overdue atomic.Bool
	begin := time.Now()
	if areq.Timeout > 0 {
		t := time.AfterFunc(areq.Timeout+execOverdue, func() { overdue.Store(true); cancel() })
		defer t.Stop()
	}
	oomBefore, _ := m.node.OOMKills(sb)
	aexit, err := m.node.Agent(sb).Exec(ctx, areq, agent.ExecIO{
		Stdin: stdin, Stdout: orDiscard(eio.Stdout), Stderr: orDiscard(eio.Stderr), Resize: agentResizes(ctx, eio.Resize),
	})
	exit := exitOf(aexit)
	if err != nil && overdue.Load() {
		m.agentOverdue(sb, "an exec")
		m.eventAsync(&sandbox.Event{SandboxID: sb.ID, Type: "exec", Actor: actor, Cause: sandbox.CauseUser,
			Outcome: "timeout", Message: fmt.Sprintf("%s timed out; the agent did not end it", req.Cmd[0])})
		return Exit{Code: 128 + 9, Signal: "SIGKILL", TimedOut: true,
			Duration: time.Since(begin).Truncate(time.Microsecond)}, nil
	}
	if err != nil {
		if cur, gerr := m.store.GetSandbox(context.WithoutCancel(ctx), owner(ctx), sb.ID); gerr == nil && cur.State != sandbox.StateRunning {
			return exit, errdefs.Conflict("sandbox %s is %s (%s); the command was stopped", sb.ID, cur.State, cur.Reason)
		}
		return exit, err
	}
	if exit.Signal == "SIGKILL" && !exit.TimedOut {
		if oomAfter, err := m.node.OOMKills(sb); err == nil && oomAfter > oomBefore {
			exit.OOMKilled = true
		}
	}
	m.eventAsync(&sandbox.Event{SandboxID: sb.ID, Type: "exec", Actor: actor, Cause: sandbox.CauseUser,
		Outcome: "ok", Message: fmt.Sprintf("%s exited %d", req.Cmd[0], exit.Code)})
	return exit, nil
}

// agentExecRequest composes what the agent runs for req in sb: the
// environment layered over the template's and the sandbox's, and the
// working directory's defaults. Background processes use it too.
func (m *Engine) agentExecRequest(ctx context.Context, sb *sandbox.Sandbox, req *ExecRequest) (agent.ExecRequest, error) {
	tplEnv := sb.Spec.TemplateEnv
	if tplEnv == nil && !sb.Spec.HostUsr && len(sb.Spec.Layers) == 0 { // records from before it was kept
		if tpl, err := m.store.ResolveTemplate(ctx, sb.Tenant, sb.Spec.Template); err == nil {
			tplEnv = tpl.Config.Env
		}
	}
	extra, err := m.withSecretEnv(ctx, sb, req.Env)
	if err != nil {
		return agent.ExecRequest{}, err
	}
	areq := agent.ExecRequest{
		Argv:    req.Cmd,
		Env:     composeEnv(tplEnv, sb, extra),
		Dir:     req.Workdir,
		User:    req.User,
		TTY:     req.TTY,
		Rows:    req.Rows,
		Cols:    req.Cols,
		Timeout: req.Timeout,
	}
	if areq.Dir == "" {
		areq.Dir = sb.Spec.Workdir
	}
	if areq.User == "" {
		areq.User = sb.Spec.User
	}
	if areq.Dir == "" {
		areq.Dir = "/"
	}
	return areq, nil
}

// composeEnv layers the environment: berth's defaults, the template's, the
// sandbox's, then the request's.
func composeEnv(tplEnv []string, sb *sandbox.Sandbox, extra map[string]string) []string {
	env := map[string]string{
		"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
		"HOME": "/root",
	}
	for _, kv := range tplEnv {
		if k, v, ok := strings.Cut(kv, "="); ok {
			env[k] = v
		}
	}
	maps.Copy(env, sb.Spec.Env)
	maps.Copy(env, extra)
	if sb.Spec.Sudo && !slices.Contains(filepath.SplitList(env["PATH"]), sudo.Dir) {
		// Before the image's own sudo, which cannot work in a sandbox.
		env["PATH"] = sudo.Dir + ":" + env["PATH"]
	}
	env["BERTH_SANDBOX_ID"] = sb.ID
	keys := slices.Sorted(maps.Keys(env))
	out := make([]string, 0, len(keys))
	for _, k := range keys {
		out = append(out, k+"="+env[k])
	}
	return out
}

func orDiscard(w io.Writer) io.Writer {
	if w == nil {
		return io.Discard
	}
	return w
}

// execOverdue is how long past its timeout the daemon waits for the agent
// to report the end of a command before it ends the exec itself.
const execOverdue = 500 * time.Millisecond

// agentOverdue handles an agent that let a deadline pass: if it does not
// answer a ping either, it is hung or not the agent at all, and the
// sandbox's processes are ended from outside (the backend's KillAll); the
// reconciler then finds the sandbox dead and handles it by its lifecycle.
// It runs in the background, cancelled at Close.
func (m *Engine) agentOverdue(sb *sandbox.Sandbox, what string) {
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		ctx, cancel := context.WithTimeout(m.bg, 2*time.Second)
		_, err := m.node.Agent(sb).Ping(ctx)
		cancel()
		if err == nil {
			m.log.Warn("agent let a deadline pass but answers", "sandbox", sb.ID, "what", what)
			return
		}
		if m.bg.Err() != nil {
			return // shutting down: the next start looks at it again
		}
		m.log.Warn("agent unresponsive past a deadline: ending the sandbox's processes", "sandbox", sb.ID, "what", what, "err", err)
		m.event(context.Background(), &sandbox.Event{SandboxID: sb.ID, Type: "security", Actor: "daemon",
			Cause: sandbox.CauseReconciler, Outcome: "killed",
			Message: fmt.Sprintf("the agent did not end %s at its deadline and does not answer: processes ended from the host", what)})
		done := m.auditSystem(context.Background(), sb, "watchdog", "kill")
		err = m.node.KillAll(context.Background(), sb)
		done(err)
		if err != nil {
			m.log.Error("killing an unresponsive sandbox", "sandbox", sb.ID, "err", err)
		}
		m.wakeReconciler()
	}()
}
