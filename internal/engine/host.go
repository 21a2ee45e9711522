package engine

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/berth-sh/berth/internal/agent"
	"github.com/berth-sh/berth/internal/image"
	"github.com/berth-sh/berth/internal/node"
	"github.com/berth-sh/berth/internal/sandbox"
	"github.com/berth-sh/berth/internal/store"
)

// Host is what a feature package (pools, snapshots, templates, volumes,
// netrules, hibernate, files, procs, reconcile) sees of the core: the
// sandboxes' records, an Op to change one under its lock, launch,
// events, tracked goroutines, the store, the backend, the clock and the
// log; and the hooks through which the core's own operations reach the
// features. A feature never holds the *Engine: what it may do to a
// sandbox is what Host and Op offer. Engine.Host returns it.
type Host interface {
	// Records.
	Get(ctx context.Context, ref string) (*sandbox.Sandbox, error)
	Local(ctx context.Context, ref string) (*sandbox.Sandbox, error)
	Mine(sb *sandbox.Sandbox) bool
	ResolveTemplate(ctx context.Context, tenant, name string) (*store.Template, error)
	GetVolume(ctx context.Context, ref string) (*store.Volume, error)
	Hibernated(sb *sandbox.Sandbox) bool
	LastActivity(sb *sandbox.Sandbox) time.Time
	OpenExecs(id string) int
	Busy(sb *sandbox.Sandbox) bool
	Alive(ctx context.Context, sb *sandbox.Sandbox) bool
	DoctorIDs(ctx context.Context, busy func(string) bool, live map[string]*sandbox.Sandbox, add func(kind, id, detail string, fixFn func() error))

	// Changing a sandbox: an Op holds its lock (Op.Check says so of a
	// record). Op and Async read the current record under the lock.
	Op(ctx context.Context, ref string, fn func(context.Context, *Op, *sandbox.Sandbox) error) (*sandbox.Sandbox, error)
	Async(id string, fn func(context.Context, *Op, *sandbox.Sandbox)) bool
	Lock(id string) (*Op, func())
	TryLock(id string) (*Op, func(), bool)
	Launch(ctx context.Context, sb *sandbox.Sandbox, actor string, prep func() error) error
	Delete(ctx context.Context, ref, actor string, cause sandbox.Cause, reason string) (*sandbox.Sandbox, error)
	Exec(ctx context.Context, ref string, req *ExecRequest, eio ExecIO, actor string) (Exit, error)
	ReadyForUse(ctx context.Context, sb *sandbox.Sandbox, what, actor string) (*sandbox.Sandbox, error)
	AgentExecRequest(ctx context.Context, sb *sandbox.Sandbox, req *ExecRequest) (agent.ExecRequest, error)
	AwaitPort(ctx context.Context, sb *sandbox.Sandbox, port int) error
	LiveValue(id string, key any, mk func() any) any
	Touched(id string)
	FlushActivity(ctx context.Context, sb *sandbox.Sandbox)

	// Admission.
	Admit(ctx context.Context, need int64, what string) error
	AdmitQuota(ctx context.Context, sb *sandbox.Sandbox, write func() error) error
	AdmitVolume(ctx context.Context, tenant string, size int64, write func() error) error
	DropVolume(ctx context.Context, v *store.Volume) error
	ChargeImport(ctx context.Context) (context.Context, func() bool, error)
	SandboxNeed(sp *sandbox.Spec) int64
	CheckDisk(sp *sandbox.Spec) error
	WithDiskDefault(sp *sandbox.Spec)
	DiskDefault() int64
	PrepareNetwork(ctx context.Context, sp *sandbox.Spec, id string, taken func(string) bool) error
	Caps(sb *sandbox.Sandbox) node.Caps
	ClassOf(sb *sandbox.Sandbox) string
	DefaultRuntime() string
	RuntimeNames() []string

	// Events, audit and metrics.
	Event(ctx context.Context, ev *sandbox.Event)
	EventAsync(ev *sandbox.Event)
	AuditSystem(ctx context.Context, sb *sandbox.Sandbox, component, action string) func(error)
	AuditSystemOn(ctx context.Context, tenant, component, action, target string) func(error)
	Recorder() Recorder

	// Background work: Go's goroutines are awaited at Close, their ctx
	// cancelled; Stopping is closed when Close begins; Kicks receives
	// WakeReconciler's requests for a reconciler pass.
	Go(fn func(ctx context.Context))
	Closing() bool
	Stopping() <-chan struct{}
	Kicks() <-chan struct{}
	WakeReconciler()

	// Services.
	Store() store.Store
	Backend() node.Backend
	Images() *image.Store
	Config() Config
	Node() string
	Now() time.Time
	Log() *slog.Logger

	// Hooks registers a feature's part in the core's own operations; call
	// it while assembling, before Run.
	Hooks() *Hooks
}

// Hooks are where the features take part in the core's own operations:
// a create a warm pool serves, one from a snapshot or an image, the wake
// of a hibernated sandbox, and what follows a sandbox's start or precedes
// its stop. Each feature adds its own while the engine is assembled,
// before Run; a hook left unset makes that part of an operation cold or
// refused.
type Hooks struct {
	// Claim hands out a warm-pool member for a create of tpl, or nil.
	Claim func(ctx context.Context, tpl *store.Template, spec sandbox.Spec, req *CreateRequest, opt CreateOptions) (*sandbox.Sandbox, error)
	// Wake restores hibernated sandbox sb under op (a start of a
	// hibernated sandbox is a wake).
	Wake func(ctx context.Context, op *Op, sb *sandbox.Sandbox, cause sandbox.Cause, actor, reason string) error
	// FromSnapshot makes a sandbox from req.Snapshot.
	FromSnapshot func(ctx context.Context, req *CreateRequest, opt CreateOptions) (*sandbox.Sandbox, error)
	// ResolveImage returns the cached image record of req.Image for the
	// caller (pulling it on first use) and a release that lets the image
	// cache evict it again: called once the create is recorded (or
	// failed).
	ResolveImage func(ctx context.Context, req *CreateRequest, tenant string) (*store.Template, func(), error)

	running  []func(ctx context.Context, sb *sandbox.Sandbox)
	stopping []func(ctx context.Context, sb *sandbox.Sandbox)
	flow     []func(node.Flow)
}

// OnRunning adds fn to what is told, in the background, of every sandbox
// that has just become running (create, start, unpause, wake,
// auto-resume): a copy of its record.
func (h *Hooks) OnRunning(fn func(ctx context.Context, sb *sandbox.Sandbox)) {
	h.running = append(h.running, fn)
}

// OnStopping adds fn to what is told, synchronously, before a running
// sandbox is stopped, while its agent still answers; fn bounds its own
// wait, briefly.
func (h *Hooks) OnStopping(fn func(ctx context.Context, sb *sandbox.Sandbox)) {
	h.stopping = append(h.stopping, fn)
}

// OnFlow adds fn to what receives the backend's egress flow decisions.
func (h *Hooks) OnFlow(fn func(node.Flow)) { h.flow = append(h.flow, fn) }

func (h *Hooks) runRunning(ctx context.Context, sb *sandbox.Sandbox) {
	for _, fn := range h.running {
		fn(ctx, sb)
	}
}

func (h *Hooks) runStopping(ctx context.Context, sb *sandbox.Sandbox) {
	for _, fn := range h.stopping {
		fn(ctx, sb)
	}
}

// flowHook is the backend's flow callback: nil when no feature wants flows.
func (h *Hooks) flowHook() func(node.Flow) {
	if len(h.flow) == 0 {
		return nil
	}
	return func(f node.Flow) {
		for _, fn := range h.flow {
			fn(f)
		}
	}
}

// Op is an operation on one sandbox that holds its lock: the only way a
// feature moves a sandbox between states. Its methods act on a record of
// that sandbox (the one its Op, Async or Lock read, or one read again
// since under the lock); a record of another sandbox is refused.
type Op struct {
	e  *Engine
	id string
}

// Check refuses a record of another sandbox than the one op holds.
func (o *Op) Check(sb *sandbox.Sandbox) error {
	if o == nil || sb == nil || sb.ID != o.id {
		return fmt.Errorf("engine: operation on a sandbox whose lock is not held")
	}
	return nil
}

// Transition moves sb to state to and records it with its event.
func (o *Op) Transition(ctx context.Context, sb *sandbox.Sandbox, to sandbox.State, cause sandbox.Cause, actor, reason string) error {
	if err := o.Check(sb); err != nil {
		return err
	}
	return o.e.transition(ctx, sb, to, cause, actor, reason)
}

// Handover records running sandbox sb under a new owner and settings (a
// warm-pool claim of a member its class keeps running): a state event
// running -> running, then what a transition to running does.
func (o *Op) Handover(ctx context.Context, sb *sandbox.Sandbox, cause sandbox.Cause, actor, reason string) error {
	if err := o.Check(sb); err != nil {
		return err
	}
	return o.e.handover(ctx, sb, cause, actor, reason)
}

// Stop, Start, Pause and Destroy are stop, start, pause and delete.
func (o *Op) Stop(ctx context.Context, sb *sandbox.Sandbox, cause sandbox.Cause, actor, reason string) error {
	if err := o.Check(sb); err != nil {
		return err
	}
	return o.e.stopLocked(ctx, sb, cause, actor, reason)
}

func (o *Op) Start(ctx context.Context, sb *sandbox.Sandbox, cause sandbox.Cause, actor, reason string) error {
	if err := o.Check(sb); err != nil {
		return err
	}
	return o.e.startLocked(ctx, sb, cause, actor, reason)
}

func (o *Op) Pause(ctx context.Context, sb *sandbox.Sandbox, cause sandbox.Cause, actor, reason string) error {
	if err := o.Check(sb); err != nil {
		return err
	}
	return o.e.pauseLocked(ctx, sb, cause, actor, reason)
}

func (o *Op) Destroy(ctx context.Context, sb *sandbox.Sandbox, cause sandbox.Cause, actor, reason string) error {
	if err := o.Check(sb); err != nil {
		return err
	}
	return o.e.destroyLocked(ctx, sb, cause, actor, reason)
}

// Provision completes sb's record and has the backend start it.
func (o *Op) Provision(ctx context.Context, sb *sandbox.Sandbox) error {
	if err := o.Check(sb); err != nil {
		return err
	}
	return o.e.provision(ctx, sb)
}

// PrepareRecord completes sb's record (layers, host ids, volumes) before
// the backend acts on it.
func (o *Op) PrepareRecord(ctx context.Context, sb *sandbox.Sandbox) error {
	if err := o.Check(sb); err != nil {
		return err
	}
	return o.e.prepareRecord(ctx, sb)
}

// Fail records cause on sb, tears it down and leaves a tombstone.
func (o *Op) Fail(ctx context.Context, sb *sandbox.Sandbox, actor string, cause error) {
	if o.Check(sb) != nil {
		return
	}
	o.e.fail(ctx, sb, actor, cause)
}

// StopHost ends sb's execs and its processes on the backend, keeping
// its files.
func (o *Op) StopHost(ctx context.Context, sb *sandbox.Sandbox) error {
	if err := o.Check(sb); err != nil {
		return err
	}
	return o.e.stopProcesses(ctx, sb, o.e.node.Stop)
}

// CancelExecs ends every exec running in the sandbox.
func (o *Op) CancelExecs() {
	if l := o.e.live.peek(o.id); l != nil {
		l.cancelExecs()
	}
}

// StoreOwn writes sb's record as apply changes it, with the events
// apply returns, retrying a concurrent update (storeOwn).
func (o *Op) StoreOwn(ctx context.Context, sb *sandbox.Sandbox, apply func(*sandbox.Sandbox) ([]*sandbox.Event, error)) error {
	if err := o.Check(sb); err != nil {
		return err
	}
	return o.e.storeOwn(ctx, sb, apply)
}

// host is the Engine as its features see it.
type host struct{ e *Engine }

// Host returns the core as the feature packages see it; the assembler
// hands it to each.
func (m *Engine) Host() Host { return host{m} }

func (h host) Hooks() *Hooks { return &h.e.hooks }

func (h host) Op(ctx context.Context, ref string, fn func(context.Context, *Op, *sandbox.Sandbox) error) (*sandbox.Sandbox, error) {
	return h.e.op(ctx, ref, func(ctx context.Context, sb *sandbox.Sandbox) error {
		return fn(ctx, &Op{e: h.e, id: sb.ID}, sb)
	})
}

// Async runs fn on a fresh copy of sandbox id under its lock in the
// background, unless an operation holds the lock or the engine is
// closing; it reports whether fn was started.
func (h host) Async(id string, fn func(context.Context, *Op, *sandbox.Sandbox)) bool {
	return h.e.async(id, func(ctx context.Context, sb *sandbox.Sandbox) { fn(ctx, &Op{e: h.e, id: id}, sb) })
}

// Lock takes sandbox id's lock; TryLock takes it if it is free.
func (h host) Lock(id string) (*Op, func()) { return &Op{e: h.e, id: id}, h.e.live.lock(id) }
func (h host) TryLock(id string) (*Op, func(), bool) {
	unlock, ok := h.e.live.tryLock(id)
	if !ok {
		return nil, nil, false
	}
	return &Op{e: h.e, id: id}, unlock, true
}

func (h host) Launch(ctx context.Context, sb *sandbox.Sandbox, actor string, prep func() error) error {
	return h.e.launch(ctx, sb, actor, prep)
}

func (h host) Get(ctx context.Context, ref string) (*sandbox.Sandbox, error) {
	return h.e.Get(ctx, ref)
}
func (h host) Local(ctx context.Context, ref string) (*sandbox.Sandbox, error) {
	return h.e.local(ctx, ref)
}
func (h host) Mine(sb *sandbox.Sandbox) bool { return h.e.mine(sb) }
func (h host) ResolveTemplate(ctx context.Context, tenant, name string) (*store.Template, error) {
	return h.e.ResolveTemplate(ctx, tenant, name)
}
func (h host) GetVolume(ctx context.Context, ref string) (*store.Volume, error) {
	return h.e.GetVolume(ctx, ref)
}
func (h host) Hibernated(sb *sandbox.Sandbox) bool                 { return h.e.hibernated(sb) }
func (h host) LastActivity(sb *sandbox.Sandbox) time.Time          { return h.e.lastActivity(sb) }
func (h host) OpenExecs(id string) int                             { return h.e.openExecs(id) }
func (h host) Busy(sb *sandbox.Sandbox) bool                       { return h.e.busy(sb) }
func (h host) Alive(ctx context.Context, sb *sandbox.Sandbox) bool { return h.e.alive(ctx, sb) }
func (h host) DoctorIDs(ctx context.Context, busy func(string) bool, live map[string]*sandbox.Sandbox, add func(kind, id, detail string, fixFn func() error)) {
	h.e.doctorIDs(ctx, busy, live, add)
}
func (h host) Delete(ctx context.Context, ref, actor string, cause sandbox.Cause, reason string) (*sandbox.Sandbox, error) {
	return h.e.Delete(ctx, ref, actor, cause, reason)
}
func (h host) Exec(ctx context.Context, ref string, req *ExecRequest, eio ExecIO, actor string) (Exit, error) {
	return h.e.Exec(ctx, ref, req, eio, actor)
}
func (h host) ReadyForUse(ctx context.Context, sb *sandbox.Sandbox, what, actor string) (*sandbox.Sandbox, error) {
	return h.e.readyForUse(ctx, sb, what, actor)
}
func (h host) AgentExecRequest(ctx context.Context, sb *sandbox.Sandbox, req *ExecRequest) (agent.ExecRequest, error) {
	return h.e.agentExecRequest(ctx, sb, req)
}
func (h host) AwaitPort(ctx context.Context, sb *sandbox.Sandbox, port int) error {
	return h.e.awaitPort(ctx, sb, port)
}
func (h host) LiveValue(id string, key any, mk func() any) any { return h.e.liveValue(id, key, mk) }
func (h host) Touched(id string)                               { h.e.touch(id) }
func (h host) FlushActivity(ctx context.Context, sb *sandbox.Sandbox) {
	h.e.flushActivity(ctx, sb)
}

func (h host) Admit(ctx context.Context, need int64, what string) error {
	return h.e.admit(ctx, need, what)
}
func (h host) AdmitQuota(ctx context.Context, sb *sandbox.Sandbox, write func() error) error {
	return h.e.admitQuota(ctx, sb, write)
}
func (h host) AdmitVolume(ctx context.Context, tenant string, size int64, write func() error) error {
	return h.e.admitVolume(ctx, tenant, size, write)
}
func (h host) DropVolume(ctx context.Context, v *store.Volume) error { return h.e.dropVolume(ctx, v) }
func (h host) ChargeImport(ctx context.Context) (context.Context, func() bool, error) {
	return h.e.chargeImport(ctx)
}
func (h host) SandboxNeed(sp *sandbox.Spec) int64 { return h.e.sandboxNeed(sp) }
func (h host) CheckDisk(sp *sandbox.Spec) error   { return h.e.checkDisk(sp) }
func (h host) WithDiskDefault(sp *sandbox.Spec)   { h.e.withDiskDefault(sp) }
func (h host) DiskDefault() int64                 { return h.e.diskDefault() }
func (h host) PrepareNetwork(ctx context.Context, sp *sandbox.Spec, id string, taken func(string) bool) error {
	return h.e.prepareNetworkTaken(ctx, sp, id, taken)
}
func (h host) Caps(sb *sandbox.Sandbox) node.Caps { return h.e.caps(sb) }
func (h host) ClassOf(sb *sandbox.Sandbox) string { return h.e.classOf(sb) }
func (h host) DefaultRuntime() string             { return h.e.DefaultRuntime() }
func (h host) RuntimeNames() []string             { return h.e.RuntimeNames() }

func (h host) Event(ctx context.Context, ev *sandbox.Event) { h.e.event(ctx, ev) }
func (h host) EventAsync(ev *sandbox.Event)                 { h.e.eventAsync(ev) }
func (h host) AuditSystem(ctx context.Context, sb *sandbox.Sandbox, component, action string) func(error) {
	return h.e.auditSystem(ctx, sb, component, action)
}
func (h host) AuditSystemOn(ctx context.Context, tenant, component, action, target string) func(error) {
	return h.e.auditSystemOn(ctx, tenant, component, action, target)
}
func (h host) Recorder() Recorder { return h.e.cfg.Metrics }

func (h host) Go(fn func(ctx context.Context)) { h.e.goTracked(fn) }
func (h host) Closing() bool                   { return h.e.bg.Err() != nil }
func (h host) Stopping() <-chan struct{}       { return h.e.stopCh }
func (h host) Kicks() <-chan struct{}          { return h.e.kick }
func (h host) WakeReconciler()                 { h.e.wakeReconciler() }

func (h host) Store() store.Store    { return h.e.store }
func (h host) Backend() node.Backend { return h.e.node }
func (h host) Images() *image.Store  { return h.e.images }
func (h host) Config() Config        { return h.e.cfg }
func (h host) Node() string          { return h.e.cfg.Node }
func (h host) Now() time.Time        { return h.e.now() }
func (h host) Log() *slog.Logger     { return h.e.log }
