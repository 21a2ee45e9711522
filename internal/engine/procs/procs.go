// Package procs is sandboxes' background processes over the engine's
// core: started through the agent, they outlive the client that started
// them; they can be listed, attached to (the agent's output ring, then
// live), fed stdin, signalled and waited for. It also runs templates'
// supervised services when a sandbox becomes running.
//
// The agent's process table dies with the agent (stop, failure, a host
// reboot); what the engine last saw of it is kept, bounded, in the
// sandbox's live object, so that processes of an earlier boot are reported
// as "stopped" instead of vanishing. Process ids of the API are the
// agent's prefixed by its boot (BOOT-N), so an id never names a process of
// another boot. Before a running sandbox stops (the engine's Stopping
// hook) the end of each process's output is read from the agent (8 KiB a
// stream, 64 KiB a sandbox, the newest processes' first; at most 2 s, the
// daemon's bound): logs and attach by the id of a process of an ended
// boot replay it (a gap first for what is gone), while the sandbox is
// stopped and after its next start, without starting anything. A crash
// or a host reboot leaves no time to read it: such a process's output is
// gone, and logs says so. The tails live in memory, as the table does; a
// daemon restart forgets them.
//
// Templates' services: the core's Features.Running hook (every transition
// to running) starts TemplateConfig.Service (internal/store/service.go; set
// by a template file's service, or berth template import|build --service
// CMD or --service-from-image; a build keeps its base's service unless
// given one, and refuses a bad one before any step runs:
// TestTemplateBuildService) as the process
// tagged service unless one runs already; its restart policy is the
// agent's. A service
// with a ready port makes create and start wait (engine.awaitService,
// after the lock is released) until that port accepts a connection, at
// most store.ServiceReadyWait (30 s), so the service is usable when they
// return. Every agent call but attach and wait has its own 30 s timeout;
// those two are bounded by the caller's context and end when the sandbox
// stops.
//
// Supervised processes: a background process started with a restart
// policy (always or on-failure) is recorded in the store
// (store.SupervisedProcess, table supervised_processes): its request as
// given (command, its own env, workdir, user, tag, policy, ready port)
// and the agent boot and process number of its current run. The agent
// restarts it by its policy while the agent lives; the Running hook
// starts it again, after the template's service, whenever the agent's
// boot is not the one of its run: a start after a stop, the restart of a
// persistent sandbox whose processes a host reboot took (reconcile), or
// a port request that wakes a stopped auto_resume sandbox. An unpause, a
// hibernated sandbox's wake (the checkpoint holds the processes), a
// handover and a daemon restart (the sandbox runs on) keep the boot, and
// nothing is started twice; the hook runs one at a time per sandbox.
// Each start composes the environment anew: the request's env (stored as
// a sandbox's Spec.Env is: give credentials as secrets, which are
// references, never stored with the process) with the sandbox's secrets
// as they are now. Its run of the earlier boot stays listed as
// "stopped". A process without a policy does not come back, nor does an
// on-failure one that had ended in success before a stop (the Stopping
// hook sees it in the agent's table and removes its record). Killing a
// supervised process (kill, the API's .../kill: a stop) removes its
// record, also when it had ended for good; a signal that is not a kill
// leaves it to its policy. The records go with the sandbox's delete; a
// sandbox keeps at most store.MaxSupervised.
//
// Ready ports: a process may name a ready_port, a TCP port it listens
// on. Its start answers once the port accepts, at most
// store.ServiceReadyWait (30 s, the daemon's bound, never the
// sandbox's; a port that never opens fails nothing), and a start of the
// sandbox, or a port request that wakes it, waits for the ready ports of
// its template's service and of its supervised processes
// (engine.awaitService) before it answers or dials. The ready port
// belongs to the process rather than to the sandbox: a user's processes
// start after the create, so a create could only wait out the bound for
// a port nothing has been asked to open, while the process's start and
// every later start or wake are exactly the moments something is about
// to listen on it.
package procs

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/berth-sh/berth/internal/agent"
	"github.com/berth-sh/berth/internal/agent/wire"
	"github.com/berth-sh/berth/internal/engine"
	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/internal/sandbox"
	"github.com/berth-sh/berth/internal/store"
)

// StateStopped is a process that ended with its sandbox's stop (its agent
// is gone; its output with it).
const StateStopped = "stopped"

// Limits.
const (
	// agentTimeout bounds every call to the agent but attach and wait,
	// which the caller's context bounds.
	agentTimeout = 30 * time.Second
	// maxLost is how many processes of earlier boots are remembered.
	maxLost    = 32
	bootPrefix = 6
	// tailBytes is the output of each stream of a process kept from
	// its sandbox's stop; tailTotal caps what a sandbox keeps in all
	// (the oldest processes' tails go first); tailWait bounds the
	// reading at the stop (the daemon's bound: a stalling agent only
	// loses its tails).
	tailBytes = 8 << 10
	tailTotal = 64 << 10
	tailWait  = 2 * time.Second
)

// Procs runs background processes.
type Procs struct{ e engine.Host }

// New returns background processes over e.
func New(e engine.Host) *Procs {
	m := &Procs{e: e}
	e.Hooks().OnRunning(m.Running)   // a template's service starts with its sandbox
	e.Hooks().OnStopping(m.Stopping) // its processes' output is kept before a stop
	return m
}

// StartRequest is a background process to start.
type StartRequest struct {
	engine.ExecRequest
	Tag         string
	Restart     string // never (""), always, on-failure
	MaxRestarts int
	// ReadyPort, when set, is a TCP port the process listens on: the
	// start answers once it accepts (at most store.ServiceReadyWait), and
	// so does a port request that wakes the sandbox, for a supervised one.
	ReadyPort int
}

// Process describes a background process.
type Process struct {
	ID       string
	Tag      string
	Argv     []string
	TTY      bool
	PID      int
	Started  time.Time
	State    string // running, restarting, exited, killed, stopped
	Exit     *engine.Exit
	Restart  string
	Restarts int
	Reason   string // why a stopped process ended

	tail *tail // its output kept from the sandbox's stop, or nil
}

// tail is the end of a process's output, read at its sandbox's stop.
type tail struct {
	stdout, stderr []byte
	cut            int64 // bytes of output before them that are gone
}

func (t *tail) size() int {
	if t == nil {
		return 0
	}
	return len(t.stdout) + len(t.stderr)
}

// tailWriter keeps the last max bytes written to it.
type tailWriter struct {
	buf []byte
	max int
	cut int64
}

func (w *tailWriter) Write(b []byte) (int, error) {
	n := len(b)
	if len(b) > w.max {
		w.cut += int64(len(b) - w.max)
		b = b[len(b)-w.max:]
	}
	if over := len(w.buf) + len(b) - w.max; over > 0 {
		w.cut += int64(over)
		w.buf = append(w.buf[:0], w.buf[over:]...)
	}
	w.buf = append(w.buf, b...)
	return n, nil
}

// AttachIO is an attacher's side (see agent.AttachIO).
type AttachIO struct {
	Stdin          io.Reader
	KeepStdin      bool
	Stdout, Stderr io.Writer
	Gap            func(skipped int64)
	Resize         <-chan engine.Resize
	Signal         <-chan string
}

type recKey struct{}

// record is what the engine last saw of a sandbox's processes.
type record struct {
	// restoring serializes the Running hook's starts of one sandbox, so
	// that two transitions to running in a row start a supervised
	// process once.
	restoring sync.Mutex

	mu   sync.Mutex
	boot string
	cur  []Process // of boot, as last listed or started
	lost []Process // of earlier boots, newest last
}

func (p *Procs) record(id string) *record {
	return p.e.LiveValue(id, recKey{}, func() any { return &record{} }).(*record)
}

// sync records boot's processes; those of an earlier boot that had not
// ended become stopped.
func (r *record) sync(boot string, ps []Process) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.newBootLocked(boot)
	r.cur = ps
}

func (r *record) newBootLocked(boot string) {
	if r.boot == boot || boot == "" {
		return
	}
	if r.boot != "" {
		for _, p := range r.cur {
			if p.State == wire.ProcRunning || p.State == wire.ProcRestarting {
				p.State, p.PID = StateStopped, 0
				p.Reason = "ended by the sandbox's stop"
			}
			r.lost = append(r.lost, p)
		}
		if len(r.lost) > maxLost {
			r.lost = slices.Clone(r.lost[len(r.lost)-maxLost:])
		}
	}
	r.boot, r.cur = boot, nil
}

// stopped records boot's processes, with their tails, as the sandbox's
// stop found them, keeping at most tailTotal bytes of tails (the newest).
func (r *record) stopped(boot string, ps []Process) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.newBootLocked(boot)
	r.cur = ps
	all := len(r.lost) + len(r.cur)
	at := func(i int) *Process {
		if i < len(r.lost) {
			return &r.lost[i]
		}
		return &r.cur[i-len(r.lost)]
	}
	total := 0
	for i := all - 1; i >= 0; i-- {
		pr := at(i)
		if total+pr.tail.size() > tailTotal {
			pr.tail = nil
			continue
		}
		total += pr.tail.size()
	}
}

// kept returns process id if its output was kept at a stop (so it is of
// a boot that ended).
func (r *record) kept(id string) (Process, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, ps := range [][]Process{r.lost, r.cur} {
		for _, pr := range ps {
			if pr.ID == id && pr.tail != nil {
				return pr, true
			}
		}
	}
	return Process{}, false
}

func (r *record) add(boot string, pr Process) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.newBootLocked(boot)
	r.cur = append(r.cur, pr)
	if len(r.cur) > wire.MaxProcs+wire.MaxProcExits {
		r.cur = slices.Clone(r.cur[1:])
	}
}

// snapshot returns every known process, the state of those not ended
// overlaid with over (the sandbox is not running) when it is not "".
func (r *record) snapshot(over, reason string) []Process {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := append(slices.Clone(r.lost), r.cur...)
	if over != "" {
		for i := range out {
			if out[i].State == wire.ProcRunning || out[i].State == wire.ProcRestarting {
				out[i].State, out[i].Reason = over, reason
				if over == StateStopped {
					out[i].PID = 0
				}
			}
		}
	}
	return out
}

// ended records the exit of process id (of the current boot) as seen by
// a wait or an attach, so that a stop after it does not call it stopped.
func (r *record) ended(id string, ex engine.Exit) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for i := range r.cur {
		if r.cur[i].ID == id || (r.cur[i].Tag == id && (r.cur[i].State == wire.ProcRunning || r.cur[i].State == wire.ProcRestarting)) {
			r.cur[i].State, r.cur[i].PID, r.cur[i].Exit = wire.ProcExited, 0, &ex
			if ex.Signal != "" {
				r.cur[i].State = wire.ProcKilled
			}
			return
		}
	}
}

func (r *record) findLost(id string) (Process, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, p := range r.lost {
		if p.ID == id {
			return p, true
		}
	}
	if r.boot != "" && !strings.HasPrefix(id, r.boot[:bootPrefix]+"-") {
		for _, p := range r.cur {
			if p.ID == id {
				return p, true
			}
		}
	}
	return Process{}, false
}

func processOf(boot string, in agent.ProcInfo) Process {
	pr := Process{ID: apiID(boot, in.ID), Tag: in.Tag, Argv: in.Argv, TTY: in.TTY, PID: in.PID,
		Started: in.Started, State: in.State, Restart: in.Restart, Restarts: in.Restarts}
	if in.Exit != nil {
		ex := exitOf(*in.Exit)
		pr.Exit = &ex
	}
	return pr
}

func exitOf(e agent.Exit) engine.Exit {
	return engine.Exit{Code: e.Code, Signal: e.Signal, TimedOut: e.TimedOut,
		Duration: time.Duration(e.DurationMS*1000) * time.Microsecond}
}

// curID is the API id of agent reference aref (a number, or a tag).
func curID(boot, aref string) string {
	if isDigits(aref) {
		return apiID(boot, aref)
	}
	return aref
}

func apiID(boot, id string) string {
	if len(boot) < bootPrefix {
		return id
	}
	return boot[:bootPrefix] + "-" + id
}

var pidRE = regexp.MustCompile(`^([0-9a-f]{6})-([0-9]+)$`)

// Validate checks a start request before it reaches the agent: the one
// set of rules of a process start, whichever door it came through (REST
// at the edge through input.Validate, the E2B door, MCP through REST).
func (req *StartRequest) Validate() error {
	if err := req.ExecRequest.Validate(); err != nil {
		return err
	}
	if req.Timeout != 0 {
		return errdefs.Invalid("a background process has no timeout; kill it")
	}
	if len(req.Stdin) > 0 {
		return errdefs.Invalid("a background process takes stdin through its stdin call")
	}
	if req.Tag != "" {
		if len(req.Tag) > wire.MaxTagBytes || !tagRE.MatchString(req.Tag) {
			return errdefs.Invalid("tag must be a letter then letters, digits, '_', '.' or '-', at most %d bytes", wire.MaxTagBytes)
		}
		if pidRE.MatchString(req.Tag) {
			return errdefs.Invalid("tag %q has the form of a process id", req.Tag)
		}
	}
	switch req.Restart {
	case "", wire.RestartNever, wire.RestartAlways, wire.RestartOnFailure:
	default:
		return errdefs.Invalid("restart policy %q: want never, always or on-failure", req.Restart)
	}
	if req.MaxRestarts < 0 || req.MaxRestarts > wire.MaxRestarts {
		return errdefs.Invalid("max_restarts must be 0..%d", wire.MaxRestarts)
	}
	if req.ReadyPort < 0 || req.ReadyPort > 65535 {
		return errdefs.Invalid("ready_port %d out of range", req.ReadyPort)
	}
	return nil
}

// supervised reports whether a process of restart policy restart is
// recorded to be started again at every boot.
func supervised(restart string) bool {
	return restart == wire.RestartAlways || restart == wire.RestartOnFailure
}

var tagRE = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9_.-]*$`)

// ValidRef checks a process reference of a request: an id or a tag.
func ValidRef(ref string) error {
	if ref == "" || len(ref) > wire.MaxTagBytes || (!tagRE.MatchString(ref) && !pidRE.MatchString(ref) && !isDigits(ref)) {
		return errdefs.Invalid("%q is neither a process id nor a tag", ref)
	}
	return nil
}

func isDigits(s string) bool {
	for _, c := range s {
		if c < '0' || c > '9' {
			return false
		}
	}
	return s != ""
}

// ready returns sandbox ref ready for use (auto-resumed if it may be) and
// its agent's boot.
func (p *Procs) ready(ctx context.Context, ref, what, actor string) (*sandbox.Sandbox, *agent.Client, string, error) {
	sb, err := p.e.Local(ctx, ref)
	if err != nil {
		return nil, nil, "", err
	}
	if sb, err = p.e.ReadyForUse(ctx, sb, what, actor); err != nil {
		return nil, nil, "", err
	}
	p.e.Touched(sb.ID)
	c := p.e.Backend().Agent(sb)
	pctx, cancel := context.WithTimeout(ctx, agentTimeout)
	info, err := c.Ping(pctx)
	cancel()
	if err != nil {
		return nil, nil, "", err
	}
	if info.Boot == "" {
		return nil, nil, "", errdefs.Conflict("sandbox %s runs an agent without background processes; restart it", sb.ID)
	}
	return sb, c, info.Boot, nil
}

// agentRef turns the API's process reference into the agent's, or
// reports a process of an earlier boot.
func (p *Procs) agentRef(sb *sandbox.Sandbox, boot, ref string) (string, error) {
	if err := ValidRef(ref); err != nil {
		return "", err
	}
	m := pidRE.FindStringSubmatch(ref)
	if m == nil {
		return ref, nil // a tag, or the agent's own number
	}
	if m[1] == boot[:bootPrefix] {
		return m[2], nil
	}
	if pr, ok := p.record(sb.ID).findLost(ref); ok {
		return "", errdefs.Conflict("process %s %s; its output is gone", pr.ID, reasonOf(pr))
	}
	return "", errdefs.NotFound("no process %s in sandbox %s", ref, sb.ID)
}

func reasonOf(pr Process) string {
	if pr.State == StateStopped {
		return "ended with the sandbox's stop"
	}
	return "belongs to an earlier run of the sandbox"
}

// StartProcess starts a background process in sandbox ref.
func (p *Procs) StartProcess(ctx context.Context, ref string, req *StartRequest, actor string) (Process, error) {
	if err := req.Validate(); err != nil {
		return Process{}, err
	}
	sb, c, boot, err := p.ready(ctx, ref, "start a process in", actor)
	if err != nil {
		return Process{}, err
	}
	sup := supervised(req.Restart)
	if sup {
		sps, err := p.e.Store().ListProcesses(ctx, sb.ID)
		if err != nil {
			return Process{}, err
		}
		if len(sps) >= store.MaxSupervised {
			return Process{}, errdefs.Exhausted("sandbox %s has %d supervised processes, the most it may have; kill one first",
				sb.ID, len(sps))
		}
	}
	areq, err := p.e.AgentExecRequest(ctx, sb, &req.ExecRequest)
	if err != nil {
		return Process{}, err
	}
	actx, cancel := context.WithTimeout(ctx, agentTimeout)
	defer cancel()
	in, err := c.StartProc(actx, areq, agent.ProcRequest{Tag: req.Tag, Restart: req.Restart, MaxRestarts: req.MaxRestarts})
	if err != nil {
		return Process{}, err
	}
	pr := processOf(boot, in)
	p.record(sb.ID).add(boot, pr)
	if sup {
		// Recorded, it comes back at every boot; unrecorded, it would
		// not, so it does not run at all.
		sp := &store.SupervisedProcess{SandboxID: sb.ID, Key: pr.ID, Spec: specOf(req), Boot: boot, AgentID: in.ID,
			CreatedAt: p.e.Now()}
		if err := p.e.Store().PutProcess(context.WithoutCancel(ctx), sp); err != nil {
			kctx, kcancel := context.WithTimeout(context.WithoutCancel(ctx), agentTimeout)
			_ = c.SignalProc(kctx, in.ID, "SIGKILL", true)
			kcancel()
			return Process{}, fmt.Errorf("recording supervised process %s: %w", pr.ID, err)
		}
	}
	p.e.EventAsync(&sandbox.Event{SandboxID: sb.ID, Type: "process", Actor: actor, Cause: sandbox.CauseUser,
		Outcome: "ok", Message: fmt.Sprintf("started %s as process %s", req.Cmd[0], pr.ID)})
	if req.ReadyPort != 0 {
		// The daemon's bound; a port that never opens fails nothing.
		wctx, wcancel := context.WithTimeout(ctx, store.ServiceReadyWait)
		if err := p.e.AwaitPort(wctx, sb, req.ReadyPort); err != nil {
			p.e.Log().Warn("process ready port not listening in time", "sandbox", sb.ID, "process", pr.ID, "err", err)
		}
		wcancel()
	}
	return pr, nil
}

// specOf is what is recorded of a supervised process's request: the
// request's own env, never the composed one (secrets are resolved again
// at each start).
func specOf(req *StartRequest) store.ProcessSpec {
	return store.ProcessSpec{Cmd: slices.Clone(req.Cmd), Env: maps.Clone(req.Env), Workdir: req.Workdir, User: req.User,
		TTY: req.TTY, Rows: req.Rows, Cols: req.Cols, Tag: req.Tag, Restart: req.Restart, MaxRestarts: req.MaxRestarts,
		ReadyPort: req.ReadyPort}
}

// ListProcesses lists sandbox ref's background processes. A running sandbox's come
// from its agent; a paused, hibernated or stopped one's are what was last
// seen, those not ended shown as paused, hibernated or stopped.
func (p *Procs) ListProcesses(ctx context.Context, ref string) ([]Process, error) {
	sb, err := p.e.Local(ctx, ref)
	if err != nil {
		return nil, err
	}
	rec := p.record(sb.ID)
	switch {
	case sb.State == sandbox.StateRunning:
	case sb.State == sandbox.StatePaused, sb.State == sandbox.StateQuarantined:
		return rec.snapshot(string(sb.State), "the sandbox is "+string(sb.State)), nil
	case sb.State == sandbox.StateStopped && sb.Reason == engine.ReasonHibernated:
		// A wake restores the agent and its processes.
		return rec.snapshot("hibernated", "the sandbox is hibernated"), nil
	default:
		return rec.snapshot(StateStopped, "ended by the sandbox's "+string(sb.State)), nil
	}
	actx, cancel := context.WithTimeout(ctx, agentTimeout)
	defer cancel()
	boot, ins, err := p.e.Backend().Agent(sb).ListProcs(actx)
	if err != nil {
		return nil, err
	}
	ps := make([]Process, 0, len(ins))
	for _, in := range ins {
		ps = append(ps, processOf(boot, in))
	}
	rec.sync(boot, ps)
	return rec.snapshot("", ""), nil
}

// AttachProcess replays process pid's output and, with follow, streams it live
// until it ends; it returns the exit if the process has ended.
func (p *Procs) AttachProcess(ctx context.Context, ref, pid string, follow bool, aio AttachIO, actor string) (*engine.Exit, error) {
	if pidRE.MatchString(pid) {
		// A process of a sandbox not running: the output kept from its
		// stop, without starting anything.
		sb, err := p.e.Local(ctx, ref)
		if err != nil {
			return nil, err
		}
		if sb.State != sandbox.StateRunning {
			if pr, ok := p.record(sb.ID).kept(pid); ok {
				return pr.Exit, replayTail(pr.tail, aio)
			}
		}
	}
	sb, c, boot, err := p.ready(ctx, ref, "attach to a process in", actor)
	if err != nil {
		return nil, err
	}
	if m := pidRE.FindStringSubmatch(pid); m != nil && m[1] != boot[:bootPrefix] {
		// A process of an earlier boot.
		if pr, ok := p.record(sb.ID).kept(pid); ok {
			return pr.Exit, replayTail(pr.tail, aio)
		}
	}
	aref, err := p.agentRef(sb, boot, pid)
	if err != nil {
		return nil, err
	}
	var resize <-chan agent.Resize
	if aio.Resize != nil {
		ch := make(chan agent.Resize, 4)
		go func() {
			defer close(ch)
			for {
				select {
				case rs, ok := <-aio.Resize:
					if !ok {
						return
					}
					select {
					case ch <- agent.Resize{Rows: rs.Rows, Cols: rs.Cols}:
					default:
					}
				case <-ctx.Done():
					return
				}
			}
		}()
		resize = ch
	}
	ex, err := c.AttachProc(ctx, aref, follow, agent.AttachIO{Stdin: aio.Stdin, KeepStdin: aio.KeepStdin,
		Stdout: aio.Stdout, Stderr: aio.Stderr, Gap: aio.Gap, Resize: resize, Signal: aio.Signal})
	if err != nil {
		return nil, p.stoppedErr(ctx, sb, err)
	}
	if ex == nil {
		return nil, nil
	}
	e := exitOf(*ex)
	p.record(sb.ID).ended(curID(boot, aref), e)
	return &e, nil
}

// replayTail writes a kept tail to an attacher, its gap first.
func replayTail(t *tail, aio AttachIO) error {
	if t.cut > 0 && aio.Gap != nil {
		aio.Gap(t.cut)
	}
	if len(t.stdout) > 0 && aio.Stdout != nil {
		if _, err := aio.Stdout.Write(t.stdout); err != nil {
			return err
		}
	}
	if len(t.stderr) > 0 && aio.Stderr != nil {
		if _, err := aio.Stderr.Write(t.stderr); err != nil {
			return err
		}
	}
	return nil
}

// Stopping reads, before running sandbox sb stops, the end of every
// background process's output (tailBytes a stream) into the record, so
// that it stays readable (logs, attach by the process's id) after the
// stop and after the next start. It is the engine's Stopping hook; at
// most tailWait in all, after which the rest is not kept.
func (p *Procs) Stopping(parent context.Context, sb *sandbox.Sandbox) {
	ctx, cancel := context.WithTimeout(parent, tailWait)
	defer cancel()
	c := p.e.Backend().Agent(sb)
	boot, ins, err := c.ListProcs(ctx)
	if err != nil || boot == "" {
		return
	}
	ps := make([]Process, 0, len(ins))
	for _, in := range ins {
		pr := processOf(boot, in)
		if ctx.Err() == nil {
			out, errw := &tailWriter{max: tailBytes}, &tailWriter{max: tailBytes}
			var gap int64
			if _, err := c.AttachProc(ctx, in.ID, false, agent.AttachIO{Stdout: out, Stderr: errw,
				Gap: func(n int64) { gap += n }}); err == nil || out.buf != nil || errw.buf != nil {
				pr.tail = &tail{stdout: out.buf, stderr: errw.buf, cut: gap + out.cut + errw.cut}
			}
		}
		ps = append(ps, pr)
	}
	p.record(sb.ID).stopped(boot, ps)
	// An on-failure process that ended in success is done: it does not
	// come back at the next boot.
	sctx := context.WithoutCancel(parent) // the store's, not the agent's, time
	if sps, err := p.e.Store().ListProcesses(sctx, sb.ID); err == nil {
		for _, sp := range succeeded(sps, boot, ins) {
			if err := p.e.Store().DeleteProcess(sctx, sb.ID, sp.Key); err != nil {
				p.e.Log().Warn("supervised process: forgetting one that succeeded", "sandbox", sb.ID, "process", sp.Key, "err", err)
			}
		}
	}
}

// succeeded are the records of sps whose run in boot (as ins, the
// agent's table, shows it) has ended for good with exit code 0 under the
// on-failure policy.
func succeeded(sps []*store.SupervisedProcess, boot string, ins []agent.ProcInfo) []*store.SupervisedProcess {
	var out []*store.SupervisedProcess
	for _, sp := range sps {
		if sp.Boot != boot || sp.Spec.Restart != wire.RestartOnFailure {
			continue
		}
		for _, in := range ins {
			if in.ID == sp.AgentID && in.State == wire.ProcExited && in.Exit != nil && in.Exit.Code == 0 && in.Exit.Signal == "" {
				out = append(out, sp)
			}
		}
	}
	return out
}

// stoppedErr explains a lost agent connection by the sandbox's state.
func (p *Procs) stoppedErr(ctx context.Context, sb *sandbox.Sandbox, err error) error {
	if !errors.Is(err, errdefs.ErrUnavailable) {
		return err
	}
	if cur, gerr := p.e.Local(context.WithoutCancel(ctx), sb.ID); gerr == nil && cur.State != sandbox.StateRunning {
		return errdefs.Conflict("sandbox %s is %s; its processes went with it", sb.ID, cur.State)
	}
	return err
}

// ProcessStdin copies r to process pid's stdin, then closes it if close.
func (p *Procs) ProcessStdin(ctx context.Context, ref, pid string, r io.Reader, close bool, actor string) error {
	sb, c, boot, err := p.ready(ctx, ref, "write to a process in", actor)
	if err != nil {
		return err
	}
	aref, err := p.agentRef(sb, boot, pid)
	if err != nil {
		return err
	}
	return p.stoppedErr(ctx, sb, c.ProcStdin(ctx, aref, r, close))
}

// SignalProcess sends sig ("" is SIGTERM) to process pid's group; with stop a
// supervised process is not restarted (kill).
func (p *Procs) SignalProcess(ctx context.Context, ref, pid, sig string, stop bool, actor string) error {
	if len(sig) > 16 || (sig != "" && !sigRE.MatchString(sig)) {
		return errdefs.Invalid("bad signal %q", sig)
	}
	sb, c, boot, err := p.ready(ctx, ref, "signal a process in", actor)
	if err != nil {
		return err
	}
	aref, err := p.agentRef(sb, boot, pid)
	if err != nil {
		return err
	}
	actx, cancel := context.WithTimeout(ctx, agentTimeout)
	defer cancel()
	serr := c.SignalProc(actx, aref, sig, stop)
	if serr != nil && (!stop || !errors.Is(serr, errdefs.ErrConflict)) {
		return serr
	}
	if stop {
		// Killed, a supervised process is not started again; one that
		// had ended for good is forgotten all the same.
		n, err := p.forget(context.WithoutCancel(ctx), sb.ID, boot, aref)
		if err != nil {
			return err
		}
		if serr != nil && n == 0 {
			return serr
		}
	}
	p.e.EventAsync(&sandbox.Event{SandboxID: sb.ID, Type: "process", Actor: actor, Cause: sandbox.CauseUser,
		Outcome: "ok", Message: fmt.Sprintf("signal %s to process %s", cmp(sig, "SIGTERM"), pid)})
	return nil
}

var sigRE = regexp.MustCompile(`^(SIG)?[A-Z0-9+-]+$`)

// forget removes the supervised processes agent reference aref names in
// boot: the record of that run (an id), or the records with that tag.
// It returns how many it removed.
func (p *Procs) forget(ctx context.Context, id, boot, aref string) (int, error) {
	sps, err := p.e.Store().ListProcesses(ctx, id)
	if err != nil {
		return 0, err
	}
	gone := forgotten(sps, boot, aref)
	for _, sp := range gone {
		if err := p.e.Store().DeleteProcess(ctx, id, sp.Key); err != nil {
			return 0, err
		}
	}
	return len(gone), nil
}

// forgotten are the records of sps that a kill of agent reference aref
// (a process number of boot, or a tag) ends.
func forgotten(sps []*store.SupervisedProcess, boot, aref string) []*store.SupervisedProcess {
	var out []*store.SupervisedProcess
	for _, sp := range sps {
		if isDigits(aref) && sp.Boot == boot && sp.AgentID == aref || !isDigits(aref) && sp.Spec.Tag == aref {
			out = append(out, sp)
		}
	}
	return out
}

func cmp(a, b string) string {
	if a == "" {
		return b
	}
	return a
}

// WaitProcess waits until process pid has ended for good and returns its exit.
// The caller's context bounds it; a stop of the sandbox ends it too.
func (p *Procs) WaitProcess(ctx context.Context, ref, pid, actor string) (engine.Exit, error) {
	sb, c, boot, err := p.ready(ctx, ref, "wait for a process in", actor)
	if err != nil {
		return engine.Exit{}, err
	}
	aref, err := p.agentRef(sb, boot, pid)
	if err != nil {
		return engine.Exit{}, err
	}
	ex, err := c.WaitProc(ctx, aref)
	if err != nil {
		return engine.Exit{}, p.stoppedErr(ctx, sb, err)
	}
	p.record(sb.ID).ended(curID(boot, aref), exitOf(ex))
	return exitOf(ex), nil
}

// Running starts, when sb has just become running, its template's
// service unless it runs already (an unpause or a wake keeps it), then
// each of its supervised processes not yet started in the agent's
// current boot (a start after a stop, or a restart after a host reboot,
// is a new boot; an unpause, a hibernated sandbox's wake and a handover
// keep the boot and its processes). It is the engine's Running hook.
func (p *Procs) Running(ctx context.Context, sb *sandbox.Sandbox) {
	log := p.e.Log().With("sandbox", sb.ID)
	var svc *store.ServiceSpec
	if sb.Spec.Template != "" {
		if tpl, err := p.e.ResolveTemplate(ctx, sb.Tenant, sb.Spec.Template); err == nil {
			svc = tpl.Config.Service
		}
	}
	rec := p.record(sb.ID)
	rec.restoring.Lock()
	defer rec.restoring.Unlock()
	sps, err := p.e.Store().ListProcesses(ctx, sb.ID)
	if err != nil {
		log.Warn("supervised processes: listing", "err", err)
	}
	if svc == nil && len(sps) == 0 {
		return
	}
	c := p.e.Backend().Agent(sb)
	var boot string
	var ins []agent.ProcInfo
	// The agent answers once the sandbox is running; a few tries cover a
	// slow first accept.
	for try := 0; ; try++ {
		actx, cancel := context.WithTimeout(ctx, agentTimeout)
		boot, ins, err = c.ListProcs(actx)
		cancel()
		if err == nil || try == 10 || ctx.Err() != nil {
			break
		}
		select {
		case <-time.After(200 * time.Millisecond):
		case <-ctx.Done():
		}
	}
	if err != nil {
		log.Warn("background processes: agent unreachable", "err", err)
		return
	}
	if svc != nil {
		p.startService(ctx, sb, c, boot, ins, svc)
	}
	for _, sp := range sps {
		if sp.Boot != boot {
			p.restart(ctx, sb, c, boot, sp)
		}
	}
}

// startService starts template service svc in sb unless it runs.
func (p *Procs) startService(ctx context.Context, sb *sandbox.Sandbox, c *agent.Client, boot string, ins []agent.ProcInfo,
	svc *store.ServiceSpec) {
	log := p.e.Log().With("sandbox", sb.ID, "template", sb.Spec.Template)
	for _, in := range ins {
		if in.Tag == store.ServiceTag && (in.State == wire.ProcRunning || in.State == wire.ProcRestarting) {
			return
		}
	}
	restart := svc.Restart
	if restart == "" {
		restart = store.RestartOnFailure
	}
	req := &engine.ExecRequest{Cmd: svc.Cmd, Env: svc.Env, Workdir: svc.Dir, User: svc.User}
	if err := req.Validate(); err != nil {
		log.Warn("service: invalid", "err", err)
		return
	}
	areq, err := p.e.AgentExecRequest(ctx, sb, req)
	if err != nil {
		log.Warn("service: its environment", "err", err)
		p.e.EventAsync(&sandbox.Event{SandboxID: sb.ID, Type: "process", Actor: "daemon", Cause: sandbox.CauseReconciler,
			Outcome: "error", Message: "service did not start: " + err.Error()})
		return
	}
	actx, cancel := context.WithTimeout(ctx, agentTimeout)
	defer cancel()
	in, err := c.StartProc(actx, areq, agent.ProcRequest{Tag: store.ServiceTag, Restart: restart, MaxRestarts: svc.MaxRestarts})
	if err != nil {
		log.Warn("service: start", "err", err)
		p.e.EventAsync(&sandbox.Event{SandboxID: sb.ID, Type: "process", Actor: "daemon", Cause: sandbox.CauseReconciler,
			Outcome: "error", Message: "service did not start: " + err.Error()})
		return
	}
	pr := processOf(boot, in)
	p.record(sb.ID).add(boot, pr)
	p.e.EventAsync(&sandbox.Event{SandboxID: sb.ID, Type: "process", Actor: "daemon", Cause: sandbox.CauseReconciler,
		Outcome: "ok", Message: fmt.Sprintf("service %s started as process %s", svc.Cmd[0], pr.ID)})
}

// restart starts supervised process sp again in boot and records its
// new run. Its environment is composed anew: a secret revoked since is
// not given, one changed is given as it is now.
func (p *Procs) restart(ctx context.Context, sb *sandbox.Sandbox, c *agent.Client, boot string, sp *store.SupervisedProcess) {
	fail := func(err error) {
		p.e.Log().Warn("supervised process: start again", "sandbox", sb.ID, "process", sp.Key, "err", err)
		p.e.EventAsync(&sandbox.Event{SandboxID: sb.ID, Type: "process", Actor: "daemon", Cause: sandbox.CauseReconciler,
			Outcome: "error", Message: fmt.Sprintf("supervised process %s (%s) did not start again: %s", sp.Key,
				cmdName(sp.Spec.Cmd), errdefs.Message(err))})
	}
	req := &engine.ExecRequest{Cmd: sp.Spec.Cmd, Env: sp.Spec.Env, Workdir: sp.Spec.Workdir, User: sp.Spec.User,
		TTY: sp.Spec.TTY, Rows: sp.Spec.Rows, Cols: sp.Spec.Cols}
	if err := req.Validate(); err != nil {
		fail(err)
		return
	}
	areq, err := p.e.AgentExecRequest(ctx, sb, req)
	if err != nil {
		fail(err)
		return
	}
	actx, cancel := context.WithTimeout(ctx, agentTimeout)
	defer cancel()
	in, err := c.StartProc(actx, areq, agent.ProcRequest{Tag: sp.Spec.Tag, Restart: sp.Spec.Restart, MaxRestarts: sp.Spec.MaxRestarts})
	if err != nil {
		fail(err)
		return
	}
	pr := processOf(boot, in)
	p.record(sb.ID).add(boot, pr)
	next := *sp
	next.Boot, next.AgentID = boot, in.ID
	if err := p.e.Store().PutProcess(ctx, &next); err != nil {
		// The next transition to running would start a second one.
		p.e.Log().Warn("supervised process: recording its new run", "sandbox", sb.ID, "process", sp.Key, "err", err)
	}
	p.e.EventAsync(&sandbox.Event{SandboxID: sb.ID, Type: "process", Actor: "daemon", Cause: sandbox.CauseReconciler,
		Outcome: "ok", Message: fmt.Sprintf("supervised process %s (%s) started again as process %s", sp.Key,
			cmdName(sp.Spec.Cmd), pr.ID)})
}

func cmdName(cmd []string) string {
	if len(cmd) == 0 {
		return ""
	}
	return cmd[0]
}
