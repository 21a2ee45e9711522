package engine

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/berth-sh/berth/internal/agent"

	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/internal/node"
	"github.com/berth-sh/berth/internal/sandbox"
	"github.com/berth-sh/berth/internal/store"
)

// The core's operations, for the feature packages built on it (pools,
// snapshots, templates, reconcile). Methods that end in Locked need the
// caller to hold the sandbox's lock: Lock, TryLock, Op or Async give it.

// Features are the feature packages the core's own operations reach
// into: a create that a warm pool can serve, or one from a snapshot.
// Unset, those creates are made cold or refused.
type Features struct {
	// Claim hands out a warm-pool member for a create of tpl, or nil.
	Claim func(ctx context.Context, tpl *store.Template, spec sandbox.Spec, req *CreateRequest, opt CreateOptions) (*sandbox.Sandbox, error)
	// Wake restores a hibernated sandbox whose lock the caller holds (a
	// start of a hibernated sandbox is a wake).
	Wake func(ctx context.Context, sb *sandbox.Sandbox, cause sandbox.Cause, actor, reason string) error
	// Flow receives the backend's egress flow decisions (the flow log).
	Flow func(node.Flow)
	// FromSnapshot makes a sandbox from req.Snapshot.
	FromSnapshot func(ctx context.Context, req *CreateRequest, opt CreateOptions) (*sandbox.Sandbox, error)
	// ResolveImage returns the cached image record of req.Image for the
	// caller (pulling it on first use) and a release that lets the image
	// cache evict it again: call it once the create is recorded (or
	// failed).
	ResolveImage func(ctx context.Context, req *CreateRequest, tenant string) (*store.Template, func(), error)
	// Running is told, in the background, of every sandbox that has just
	// become running (create, start, unpause, wake, auto-resume): a copy
	// of its record. It runs templates' services.
	Running func(ctx context.Context, sb *sandbox.Sandbox)
	// Stopping is told, synchronously, before a running sandbox is
	// stopped, while its agent still answers (its processes' output is
	// kept); it bounds its own wait, briefly.
	Stopping func(ctx context.Context, sb *sandbox.Sandbox)
}

// SetFeatures installs the feature hooks; call it before Recover.
func (m *Engine) SetFeatures(f Features) { m.features = f }

// ClassOf names sb's runtime class; Caps is what it can do.
func (m *Engine) ClassOf(sb *sandbox.Sandbox) string { return m.classOf(sb) }
func (m *Engine) Caps(sb *sandbox.Sandbox) node.Caps { return m.caps(sb) }

// CancelExecs ends every exec running in sandbox id.
func (m *Engine) CancelExecs(id string) {
	if l := m.live.peek(id); l != nil {
		l.cancelExecs()
	}
}

// LiveValue returns feature state kept with sandbox id's live object,
// made by mk at first use; it goes when the sandbox is deleted. With mk
// nil it only looks (nil if there is none).
func (m *Engine) LiveValue(id string, key any, mk func() any) any {
	if mk == nil {
		l := m.live.peek(id)
		if l == nil {
			return nil
		}
		return l.value(key, nil)
	}
	return m.live.get(id).value(key, mk)
}

// AgentExecRequest composes what the agent runs for req in sb (see
// agentExecRequest); the caller has validated req (ExecRequest.Validate).
func (m *Engine) AgentExecRequest(ctx context.Context, sb *sandbox.Sandbox, req *ExecRequest) (agent.ExecRequest, error) {
	return m.agentExecRequest(ctx, sb, req)
}

// PrepareRecord completes sb's record (layers, host ids, volumes) before
// the backend acts on it.
func (m *Engine) PrepareRecord(ctx context.Context, sb *sandbox.Sandbox) error {
	return m.prepareRecord(ctx, sb)
}

// ReadyForUse brings a paused or stopped sandbox with auto_resume back to
// running before a request that needs it; it refuses quarantined ones.
func (m *Engine) ReadyForUse(ctx context.Context, sb *sandbox.Sandbox, what, actor string) (*sandbox.Sandbox, error) {
	return m.readyForUse(ctx, sb, what, actor)
}

// Log is the engine's logger.
func (m *Engine) Log() *slog.Logger { return m.log }

// Now is the engine's clock, in UTC.
func (m *Engine) Now() time.Time { return m.now() }

// Mine reports whether this node runs sb.
func (m *Engine) Mine(sb *sandbox.Sandbox) bool { return m.mine(sb) }

// Local returns sandbox ref if this node runs it (409 naming its node if
// another does).
func (m *Engine) Local(ctx context.Context, ref string) (*sandbox.Sandbox, error) {
	return m.local(ctx, ref)
}

// Lock takes sandbox id's operation lock.
func (m *Engine) Lock(id string) func() { return m.live.lock(id) }

// TryLock takes sandbox id's operation lock if it is free.
func (m *Engine) TryLock(id string) (func(), bool) { return m.live.tryLock(id) }

// Op runs fn on the current record of sandbox ref under its lock.
func (m *Engine) Op(ctx context.Context, ref string, fn func(context.Context, *sandbox.Sandbox) error) (*sandbox.Sandbox, error) {
	return m.op(ctx, ref, fn)
}

// Async runs fn on a fresh copy of sandbox id under its lock in the
// background, unless an operation holds the lock or the engine is
// closing; it reports whether fn was started.
func (m *Engine) Async(id string, fn func(context.Context, *sandbox.Sandbox)) bool {
	return m.async(id, fn)
}

// Go runs fn in the background; Close waits for it. ctx is cancelled at
// Close.
func (m *Engine) Go(fn func(ctx context.Context)) {
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		fn(m.bg)
	}()
}

// Closing reports whether Close has begun.
func (m *Engine) Closing() bool { return m.bg.Err() != nil }

// Transition moves sb to state to and records it with its event.
func (m *Engine) Transition(ctx context.Context, sb *sandbox.Sandbox, to sandbox.State, cause sandbox.Cause, actor, reason string) error {
	return m.transition(ctx, sb, to, cause, actor, reason)
}

// Handover records a running sandbox whose lock the caller holds under
// a new owner and settings (a warm-pool claim of a member its class keeps
// running): a state event running -> running, then what a transition to
// running does (secret files, the Running hook).
func (m *Engine) Handover(ctx context.Context, sb *sandbox.Sandbox, cause sandbox.Cause, actor, reason string) error {
	return m.handover(ctx, sb, cause, actor, reason)
}

// Event records ev; EventAsync records it off the caller's path.
func (m *Engine) Event(ctx context.Context, ev *sandbox.Event) { m.event(ctx, ev) }
func (m *Engine) EventAsync(ev *sandbox.Event)                 { m.eventAsync(ev) }

// Launch records new sandbox sb and makes it (prep first, if given); a
// failure tears it down and leaves a failed tombstone.
func (m *Engine) Launch(ctx context.Context, sb *sandbox.Sandbox, actor string, prep func() error) error {
	return m.launch(ctx, sb, actor, prep)
}

// Provision completes sb's record and has the backend start it.
func (m *Engine) Provision(ctx context.Context, sb *sandbox.Sandbox) error {
	return m.provision(ctx, sb)
}

// Fail records cause on sb, tears it down and leaves a tombstone.
func (m *Engine) Fail(ctx context.Context, sb *sandbox.Sandbox, actor string, cause error) {
	m.fail(ctx, sb, actor, cause)
}

// DestroyLocked, StopLocked, StartLocked and PauseLocked are delete,
// stop, start and pause of a sandbox whose lock the caller holds.
func (m *Engine) DestroyLocked(ctx context.Context, sb *sandbox.Sandbox, cause sandbox.Cause, actor, reason string) error {
	return m.destroyLocked(ctx, sb, cause, actor, reason)
}
func (m *Engine) StopLocked(ctx context.Context, sb *sandbox.Sandbox, cause sandbox.Cause, actor, reason string) error {
	return m.stopLocked(ctx, sb, cause, actor, reason)
}
func (m *Engine) StartLocked(ctx context.Context, sb *sandbox.Sandbox, cause sandbox.Cause, actor, reason string) error {
	return m.startLocked(ctx, sb, cause, actor, reason)
}
func (m *Engine) PauseLocked(ctx context.Context, sb *sandbox.Sandbox, cause sandbox.Cause, actor, reason string) error {
	return m.pauseLocked(ctx, sb, cause, actor, reason)
}

// StopHost ends sb's execs and its processes on the backend, keeping
// its files.
func (m *Engine) StopHost(ctx context.Context, sb *sandbox.Sandbox) error {
	return m.stopProcesses(ctx, sb, m.node.Stop)
}

// Alive reports whether sb's processes run and its agent answers.
func (m *Engine) Alive(ctx context.Context, sb *sandbox.Sandbox) bool {
	st, err := m.node.Status(ctx, sb)
	if err != nil || st != node.StatusRunning {
		return false
	}
	pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	_, err = m.node.Agent(sb).Ping(pctx)
	return err == nil
}

// Admit refuses (507) objects that may grow to need bytes when the
// backend cannot fit them.
func (m *Engine) Admit(ctx context.Context, need int64, what string) error {
	return m.admit(ctx, need, what)
}

// SandboxNeed is what a sandbox of spec may grow to.
func (m *Engine) SandboxNeed(sp *sandbox.Spec) int64 { return m.sandboxNeed(sp) }

// CheckDisk refuses a disk cap the pool cannot hold.
func (m *Engine) CheckDisk(sp *sandbox.Spec) error { return m.checkDisk(sp) }

// WithDiskDefault fills a spec's disk cap from the server default.
func (m *Engine) WithDiskDefault(sp *sandbox.Spec) { m.withDiskDefault(sp) }

// DiskDefault is the server-wide disk cap (0: none).
func (m *Engine) DiskDefault() int64 { return m.diskDefault() }

// Touched notes activity of sandbox id (kept in memory; FlushActivity
// stores it).
func (m *Engine) Touched(id string) { m.touch(id) }

// OpenExecs counts the execs running in sandbox id.
func (m *Engine) OpenExecs(id string) int { return m.openExecs(id) }

// Busy reports whether sb's processes used more CPU than its idle
// threshold since the last look.
func (m *Engine) Busy(sb *sandbox.Sandbox) bool { return m.busy(sb) }

// FlushActivity stores activity seen since sb's record was last written,
// so idle timers survive a restart; writes are coalesced to one a second.
func (m *Engine) FlushActivity(ctx context.Context, sb *sandbox.Sandbox) {
	l := m.live.peek(sb.ID)
	if l == nil {
		return
	}
	t := l.lastActivity()
	if t.IsZero() || !t.After(sb.LastActivityAt.Add(time.Second)) {
		return
	}
	m.async(sb.ID, func(ctx context.Context, cur *sandbox.Sandbox) {
		if !cur.State.Live() || !t.After(cur.LastActivityAt) {
			return
		}
		cur.LastActivityAt = t
		if err := m.store.UpdateSandbox(ctx, cur); err == nil {
			l.stored(t)
		}
	})
}

// WakeReconciler asks the reconciler for a pass now; Kicks is what it
// listens on.
func (m *Engine) WakeReconciler()        { m.wakeReconciler() }
func (m *Engine) Kicks() <-chan struct{} { return m.kick }

func (m *Engine) wakeReconciler() {
	select {
	case m.kick <- struct{}{}:
	default:
	}
}

// async runs fn on a fresh copy of sandbox id under its lock, unless an
// operation already holds the lock; it reports whether fn was started.
func (m *Engine) async(id string, fn func(context.Context, *sandbox.Sandbox)) bool {
	if m.bg.Err() != nil {
		return false // shutting down
	}
	unlock, ok := m.live.tryLock(id)
	if !ok {
		return false
	}
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		defer unlock()
		// Policy actions and retries are whole operations: they finish
		// (or are undone) once started, like a request's; Close stops
		// new ones from starting.
		ctx := context.Background()
		sb, err := m.store.GetSandbox(ctx, owner(ctx), id)
		if err != nil {
			return
		}
		fn(ctx, sb)
	}()
	return true
}

// Run begins the core's background work (the backend's, the flow log
// and the async event recorder).
func (m *Engine) Run() {
	m.node.Start(node.Hooks{
		Event: m.eventAsync,
		Flow:  m.features.Flow,
		Slots: func(ctx context.Context) (map[string]int, error) { return m.store.ListIDSlots(ctx, "") },
	})
	m.wg.Add(1)
	go m.recordEvents()
}

// Close stops background work: what is in flight is cancelled and
// awaited. Sandboxes keep running; the backend keeps the egress network
// for those that need it.
func (m *Engine) Close() {
	select {
	case <-m.stopCh:
	default:
		close(m.stopCh)
	}
	m.cancel()
	m.wg.Wait()
	m.node.Close(m.keepNetwork(context.Background()))
}

// Stopping is closed when Close begins.
func (m *Engine) Stopping() <-chan struct{} { return m.stopCh }

// ResolveTemplate returns the template a sandbox of tenant named: the
// tenant's own of that name first, then the shared catalogue's (404
// naming it if there is neither; another tenant's is never found, nor
// the host's image cache records).
func (m *Engine) ResolveTemplate(ctx context.Context, tenant, name string) (*store.Template, error) {
	if name == "" {
		name = m.cfg.DefaultTemplate // as a create that names none
	}
	t, err := m.store.ResolveTemplate(ctx, tenant, name)
	if err == nil && IsImageTemplate(name) && t.Tenant != tenant {
		err = errdefs.ErrNotFound // the host's image records are no shared catalogue
	}
	if errors.Is(err, errdefs.ErrNotFound) {
		return nil, errdefs.NotFound("no template %q", name)
	}
	return t, err
}

// GetTemplate returns one shared-catalogue template (404 naming it if
// there is none).
func (m *Engine) GetTemplate(ctx context.Context, name string) (*store.Template, error) {
	t, err := m.store.GetTemplate(ctx, name)
	if errors.Is(err, errdefs.ErrNotFound) {
		return nil, errdefs.NotFound("no template %q", name)
	}
	return t, err
}

// Owner is whose records ctx reads: its caller's tenant, or every
// tenant's for the engine's own work, which runs without a caller.
func Owner(ctx context.Context) store.Owner { return owner(ctx) }
