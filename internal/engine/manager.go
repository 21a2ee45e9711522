// Package engine is the core of berth's sandbox engine: it turns API calls
// into durable records and host side effects, in that order (intent
// first), and drives the two to agree, over a node.Backend and the store.
// Create provisions through the backend and waits for the agent; exec and
// file calls go to the agent; delete tears down in idempotent, verified,
// retried steps. Every transition is a compare-and-swap with its event.
// The reconciler (package engine/reconcile) adopts, finishes and cleans up
// after restarts and crashes and enforces policies.
//
// One live object per sandbox (live.go) holds its operation lock, open
// execs, activity not yet stored and CPU sample. The feature packages
// (pools, snapshots, templates, ...) never hold the *Engine: each is
// given the narrow Host (host.go, Engine.Host) — records, an Op that
// holds a sandbox's lock and offers transition, stop, start, pause and
// destroy, launch, events, tracked goroutines, store, backend, clock and
// log — and registers its Hooks there (a pool claim, a create from a
// snapshot or an image, the wake of a hibernated start, a sandbox
// becoming running or stopping, egress flows). The engine imports no api and no runtime,
// volume, network or mount code; it takes and returns its own types
// (types.go), and turns the backend's answers into them in nodetypes.go.
// Background work runs under a context cancelled at Close: nothing new
// starts, what began finishes or is undone. A port request that
// auto-resumes or auto-starts its sandbox waits, at most PortWakeWait, for
// the template service's ready port and then for the target port to
// accept (network.go, dialWoken), so the first preview of a stopped
// sandbox gets the page, not a 502.
package engine

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/berth-sh/berth/internal/engine/quota"
	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/internal/identity"
	"github.com/berth-sh/berth/internal/image"
	"github.com/berth-sh/berth/internal/leader"
	"github.com/berth-sh/berth/internal/node"
	"github.com/berth-sh/berth/internal/sandbox"
	"github.com/berth-sh/berth/internal/store"
)

// Config configures an Engine.
type Config struct {
	DefaultTemplate string
	// TenantPulls lets tenants' callers import templates from registries
	// (serve --tenant-pulls); off, a registry pull is the host's alone.
	TenantPulls bool
	// ImageCacheSize caps the bytes of the layers that images pulled on
	// first use (create --image) hold (serve --image-cache-size); past
	// it, the least recently used image records no sandbox uses are
	// removed with the layers nothing else holds. 0: no cap.
	ImageCacheSize int64
	// UploadDir stages uploaded template archives (on the layer store's
	// filesystem, so an import moves rather than copies).
	UploadDir string
	// Node names this daemon in a store shared by several (PostgreSQL):
	// each acts only on its own sandboxes.
	Node string
	// ReconcileInterval is how often the background reconciler runs.
	ReconcileInterval time.Duration
	Logger            *slog.Logger
	// Now is the clock; tests may replace it.
	Now func() time.Time
	// OnEvent, if set, is called after every recorded event (the webhook
	// deliverer's kick).
	OnEvent func()
	// OnState, if set, is called with a sandbox's new state after each
	// recorded state change (the daemon revokes its leases on stop,
	// quarantine and delete).
	OnState func(sandboxID string, to sandbox.State)
	// DefaultPolicy and DefaultTimeout are the server-wide defaults, under
	// a template's and a request's own.
	DefaultPolicy  sandbox.Policy
	DefaultTimeout time.Duration
	// DiskDefault is the server-wide disk cap of a sandbox's writable root
	// layer, under a template's and a request's own: 0 means
	// DefaultDiskBytes, negative none.
	DiskDefault int64
	// Retention is how long tombstones (deleted sandboxes with their
	// events and flows, deleted volumes) and webhook delivery records are
	// kept before the reconciler purges them; 0 or negative: for ever.
	Retention time.Duration
	// Webhooks are the configured webhook URLs: the purge keeps every
	// event one of them has not handled (events are their outbox).
	Webhooks []string
	// Audit, if set, records the engine's system actions (audit.go).
	Audit Auditor
	// DefaultQuota applies to every named tenant without a quota of its
	// own (zero: unlimited).
	DefaultQuota store.TenantQuota
	// Metrics, if set, receives the engine's measures (recorder.go).
	Metrics Recorder
	// NodeLease and StoreLease decide whether this daemon runs the
	// reconciler's work over its node's sandboxes and the store-wide jobs
	// (package leader): replicas sharing a node (Kubernetes) or a store
	// (PostgreSQL) elect one. Nil: this daemon's alone (leader.Always).
	NodeLease, StoreLease leader.Lease
	// Replica is this daemon's identity among replicas (its leases'
	// holder id), stamped on every record it creates or moves
	// (Sandbox.Replica). On a shared node the node lease's holder
	// finishes a create or start whose replica's presence lease
	// (leader.ReplicaLeaseName) has lapsed. Empty where nothing is shared.
	Replica string
	// MaxStarts is how many sandboxes this node starts at once (creates,
	// forks, restores, pool refills); the rest wait their turn
	// (startqueue.go). 0: DefaultMaxStarts; negative: no limit.
	MaxStarts int
	// WarmPool sizes the host's warm pool of the default template while
	// no pool of it is set through the API (package pools, auto.go): 0
	// from recent demand, at most WarmPoolMax (0: from the host's memory)
	// and for WarmPoolIdle after the demand (0: 10 minutes); positive:
	// that many; negative: none.
	WarmPool     int
	WarmPoolMax  int
	WarmPoolIdle time.Duration
	// StartQueue is how many starts one tenant may have waiting before
	// its next create is refused (429 limit_exceeded, start_queue). 0:
	// DefaultStartQueue; negative: no bound.
	StartQueue int
}

// DefaultMaxStarts is the starts at once per CPU of the host when
// Config.MaxStarts is not set. A start is partly the runtime's work on the
// host's CPUs (runc's init, mounts, cgroups) and partly waits (the disk,
// the agent's first answer) that others' work fills, so the limit keeps
// the CPUs busy rather than low; it bounds what a flood of creates starts
// at once. On the 2-core test host (berth bench, 2026-12-07, a burst of
// 100 → first `true`, p50 / p95 / last): no limit 11.6 / 14.6 / 14.7 s,
// 16 at once 6.5 / 12.5 / 12.7 s, 4 at once 7.4 / 14.3 / 14.9 s.
const DefaultMaxStarts = 8

// DefaultStartQueue bounds the waiting starts of one tenant.
const DefaultStartQueue = 1024

// DefaultRecordRetention is how long tombstones and their records are kept
// unless the daemon says otherwise (Config.Retention).
const DefaultRecordRetention = 7 * 24 * time.Hour

// DefaultDiskBytes is the server-wide disk cap of a sandbox's writable
// root layer when neither the request nor its template gives one.
const DefaultDiskBytes = 10 << 30

// Engine owns every sandbox of one daemon: their records, states,
// policies and events. Everything on the host is the node backend's.
type Engine struct {
	cfg    Config
	store  store.Store
	images *image.Store
	node   node.Backend
	log    *slog.Logger

	live    liveSet          // one live object per sandbox (live.go)
	quota   *quota.Admission // per-tenant admission (quota.go)
	starts  *startQueue      // starts at once, and the turn of the rest (startqueue.go)
	hooks   Hooks            // the features' part in the core's operations (host.go)
	secrets SecretResolver   // secrets.go

	// asyncEvents carries events recorded off the request path (exec).
	asyncEvents chan *sandbox.Event

	idSwept atomic.Bool // the startup sweep of leaked id slots has run

	// bg is cancelled at Close: background work (policy actions, refills,
	// deadline handling) stops at its next step instead of being only
	// awaited.
	bg     context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	stopCh chan struct{}
	kick   chan struct{}
}

// New returns an Engine over backend. Call Start, then reconcile, to run
// background work.
func New(cfg Config, st store.Store, images *image.Store, backend node.Backend) (*Engine, error) {
	if backend == nil || len(backend.Classes()) == 0 {
		return nil, errors.New("manager: no node backend or no runtime class")
	}
	if cfg.Node == "" {
		return nil, errors.New("manager: Node is required")
	}
	if cfg.DefaultTemplate == "" {
		cfg.DefaultTemplate = "base"
	}
	if cfg.ReconcileInterval == 0 {
		cfg.ReconcileInterval = time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Metrics == nil {
		cfg.Metrics = nopRecorder{}
	}
	if cfg.NodeLease == nil {
		cfg.NodeLease = leader.Always(leader.NodeLeaseName(cfg.Node), cfg.Node)
	}
	if cfg.StoreLease == nil {
		cfg.StoreLease = leader.Always(leader.StoreLeaseName, cfg.Node)
	}
	if cfg.DiskDefault == 0 {
		cfg.DiskDefault = DefaultDiskBytes
	}
	if cfg.DiskDefault > 0 {
		capacity, err := backend.Capacity()
		if err != nil {
			return nil, fmt.Errorf("storage pool: %w", err)
		}
		if cfg.DiskDefault < sandbox.MinDiskBytes || cfg.DiskDefault > capacity {
			return nil, fmt.Errorf("default disk cap %d MiB: must be between %d MiB and the storage pool's size, %d MiB",
				cfg.DiskDefault>>20, sandbox.MinDiskBytes>>20, capacity>>20)
		}
		cfg.Logger.Info("disk caps", "default", fmt.Sprintf("%d MiB", cfg.DiskDefault>>20), "pool_size", fmt.Sprintf("%d MiB", capacity>>20))
	} else {
		cfg.Logger.Warn("no default disk cap: sandboxes created without --disk can fill the storage pool")
	}
	switch {
	case cfg.MaxStarts == 0:
		cfg.MaxStarts = DefaultMaxStarts * runtime.NumCPU()
	case cfg.MaxStarts < 0:
		cfg.MaxStarts = 0
	}
	switch {
	case cfg.StartQueue == 0:
		cfg.StartQueue = DefaultStartQueue
	case cfg.StartQueue < 0:
		cfg.StartQueue = 0
	}
	bg, cancel := context.WithCancel(context.Background())
	m := &Engine{
		cfg: cfg, store: st, images: images, node: backend, log: cfg.Logger,
		starts:      newStartQueue(cfg.MaxStarts, cfg.StartQueue),
		asyncEvents: make(chan *sandbox.Event, 1024),
		bg:          bg, cancel: cancel,
		stopCh: make(chan struct{}),
		kick:   make(chan struct{}, 1),
	}
	m.quota = quota.New(quota.Config{Store: st, Images: images, Default: cfg.DefaultQuota,
		Trivial: func() bool { return cfg.StoreLease.Status().Trivial }, Storage: m.sandboxNeed, Now: cfg.Now})
	return m, nil
}

// AgentRefusals counts refused agent connections (the backend's).
func (m *Engine) AgentRefusals() uint64 { return m.node.AgentRefusals() }

// DefaultRuntime is the runtime class of sandboxes that name none.
func (m *Engine) DefaultRuntime() string { return m.node.Classes()[0].Name }

// caps returns the capabilities of sb's runtime class.
func (m *Engine) caps(sb *sandbox.Sandbox) node.Caps {
	c, _ := node.ClassCaps(m.node, sb.Spec.Runtime)
	return c
}

// Classes lists the runtime classes with their capabilities, the
// default first.
func (m *Engine) Classes() []node.Class { return slices.Clone(m.node.Classes()) }

// RuntimeNames lists the runtime classes, the default first.
func (m *Engine) RuntimeNames() []string {
	cls := m.node.Classes()
	out := make([]string, 0, len(cls))
	for _, c := range cls {
		out = append(out, c.Name)
	}
	slices.Sort(out[1:])
	return out
}

// Store returns the record store.
func (m *Engine) Store() store.Store { return m.store }

// Config returns the manager's configuration.
func (m *Engine) Config() Config { return m.cfg }

func (m *Engine) now() time.Time { return m.cfg.Now().UTC() }

// newID returns a random sandbox id: 16 characters of [a-z0-9], about 82 bits.
// NewID returns a new random sandbox or snapshot id.
func NewID() string { return newID() }

// ValidID reports whether id has the form of the ids newID makes (16
// lowercase letters and digits), as a pre-chosen id must.
func ValidID(id string) bool {
	if len(id) != 16 {
		return false
	}
	for i := range len(id) {
		if c := id[i]; (c < 'a' || c > 'z') && (c < '0' || c > '9') {
			return false
		}
	}
	return true
}

// Node is the name this daemon records on its sandboxes.
func (m *Engine) Node() string { return m.cfg.Node }

func newID() string {
	const alphabet = "abcdefghijklmnopqrstuvwxyz0123456789"
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err)
	}
	for i := range b {
		b[i] = alphabet[int(b[i])%len(alphabet)]
	}
	return string(b[:])
}

// mine reports whether this daemon runs sb.
func (m *Engine) mine(sb *sandbox.Sandbox) bool { return sb.Node == "" || sb.Node == m.cfg.Node }

// local returns sandbox ref if this daemon runs it; a sandbox of another
// node is a 409 naming it, so no two daemons ever act on one sandbox.
func (m *Engine) local(ctx context.Context, ref string) (*sandbox.Sandbox, error) {
	sb, err := m.Get(ctx, ref)
	if err != nil {
		return nil, err
	}
	if !m.mine(sb) && sb.State != sandbox.StateDeleted {
		return nil, errdefs.Conflict("sandbox %s runs on node %s; send the request to that daemon", sb.ID, sb.Node)
	}
	return sb, nil
}

// Get returns a sandbox by id or, failing that, by live name.
func (m *Engine) Get(ctx context.Context, ref string) (*sandbox.Sandbox, error) {
	if ref == "" {
		return nil, errdefs.Invalid("sandbox id or name is required")
	}
	sb, err := m.store.GetSandbox(ctx, owner(ctx), ref)
	if errors.Is(err, errdefs.ErrNotFound) {
		sb, err = m.store.GetSandboxByName(ctx, owner(ctx), ref)
		if errors.Is(err, errdefs.ErrNotFound) {
			return nil, errdefs.NotFound("no sandbox %q", ref)
		}
	}
	if _, scoped := owner(ctx).Tenant(); err == nil && sb.Spec.Pool != "" && scoped {
		// An unclaimed pool member is no one's sandbox yet, even when it
		// counts against its tenant's quota: only the host sees it.
		return nil, errdefs.NotFound("no sandbox %q", ref)
	}
	return sb, err
}

// List returns a page of live sandboxes, or of all including tombstones.
func (m *Engine) List(ctx context.Context, all bool, p store.Page) ([]*sandbox.Sandbox, string, error) {
	return m.store.ListSandboxes(ctx, store.SandboxFilter{Owner: owner(ctx), IncludeDeleted: all}, p)
}

// ListFiltered returns a page of the caller's sandboxes that f selects
// (its Owner is the caller's, whatever f says; tombstones never).
func (m *Engine) ListFiltered(ctx context.Context, f store.SandboxFilter, p store.Page) ([]*sandbox.Sandbox, string, error) {
	f.Owner, f.IncludeDeleted = owner(ctx), false
	return m.store.ListSandboxes(ctx, f, p)
}

// Events returns a page of a sandbox's recorded events with ids above after.
func (m *Engine) Events(ctx context.Context, ref string, after int64, p store.Page) ([]*sandbox.Event, string, error) {
	sb, err := m.Get(ctx, ref)
	if err != nil {
		return nil, "", err
	}
	return m.store.ListEvents(ctx, owner(ctx), sb.ID, after, p)
}

// AllEvents returns a page of the recorded events of every sandbox the
// caller sees, of the sandboxes ids (every one when empty) and the types
// (every one when empty), with ids above after; and last, the highest id
// the page read, which a follower reads after next (an unclaimed pool
// member is no one's sandbox yet, as in Get: its events are read but not
// returned to a tenant).
func (m *Engine) AllEvents(ctx context.Context, ids, types []string, after int64, p store.Page) (evs []*sandbox.Event, next string, last int64, err error) {
	o := owner(ctx)
	evs, next, err = m.store.ListAllEvents(ctx, store.EventFilter{Owner: o, SandboxIDs: ids, Types: types, AfterID: after}, p)
	if err != nil {
		return nil, "", 0, err
	}
	last = after
	if len(evs) > 0 {
		last = evs[len(evs)-1].ID
	}
	if _, scoped := o.Tenant(); !scoped {
		return evs, next, last, nil
	}
	member := map[string]bool{}
	out := evs[:0]
	for _, ev := range evs {
		is, ok := member[ev.SandboxID]
		if !ok {
			sb, err := m.store.GetSandbox(ctx, o, ev.SandboxID)
			switch {
			case err == nil:
				is = sb.Spec.Pool != ""
			case !errors.Is(err, errdefs.ErrNotFound): // purged since: its events were real
				return nil, "", 0, err
			}
			member[ev.SandboxID] = is
		}
		if !is {
			out = append(out, ev)
		}
	}
	return out, next, last, nil
}

// EventsWritten returns a channel closed when this daemon next records
// events (store.Events.EventsWritten): a follower reads, then waits on it.
func (m *Engine) EventsWritten() <-chan struct{} { return m.store.EventsWritten() }

// LatestEventID is the newest event's id (store.Events): event ids are
// one sequence over every sandbox, and a caller sees them on its own
// events anyway, so the number tells a tenant nothing new.
func (m *Engine) LatestEventID(ctx context.Context) (int64, error) { return m.store.LatestEventID(ctx) }

// transition moves sb to state to, writes it (compare-and-swap) and records
// the event. On a write failure sb is left unchanged.
func (m *Engine) transition(ctx context.Context, sb *sandbox.Sandbox, to sandbox.State, cause sandbox.Cause, actor, reason string) error {
	from := sb.State
	// A create is not done until its secret files are in place: they are
	// written before the running record, and a failure fails the create
	// (its caller tears it down), where a start or wake only records the
	// failure as an event and runs without them.
	created := from == sandbox.StateCreating && to == sandbox.StateRunning && HasSecretFiles(sb)
	if created {
		if err := m.deliverSecretFiles(ctx, sb, "created"); err != nil {
			return fmt.Errorf("secret files not delivered: %w", err)
		}
	}
	prev := *sb
	if err := sb.Transition(to, cause, reason, m.now()); err != nil {
		return err
	}
	// The replica doing the work: a creating or starting record whose
	// replica is gone is the node lease holder's to finish.
	sb.Replica = m.cfg.Replica
	// The error stays with a failure all the way to its tombstone (failed,
	// deleting, deleted); any other state is a fresh start without it.
	if to != sandbox.StateFailed && to != sandbox.StateDeleting && to != sandbox.StateDeleted {
		sb.Error = ""
	}
	// The record and its event commit together: events are the webhook
	// outbox, and a crash between two writes would lose the webhook.
	ev := &sandbox.Event{
		SandboxID: sb.ID, Time: m.now(), Type: "state", From: from, To: to, Actor: actor,
		Cause: cause, Reason: reason, Outcome: "ok", Message: sb.Error,
	}
	if err := m.store.UpdateSandbox(ctx, sb, ev); err != nil {
		*sb = prev
		return fmt.Errorf("recording %s -> %s: %w", from, to, err)
	}
	m.eventStored(ev)
	if to == sandbox.StateRunning && from != sandbox.StateRunning && !created && HasSecretFiles(sb) {
		// Before the Running hook, so before a template's service;
		// synchronous, so the first exec after a create or start sees
		// the files (bounded: secretFilesTimeout).
		_ = m.deliverSecretFiles(ctx, sb, "running")
	}
	if to == sandbox.StateRunning && from != sandbox.StateRunning && len(m.hooks.running) > 0 {
		cp := *sb
		m.goTracked(func(ctx context.Context) { m.hooks.runRunning(ctx, &cp) })
	}
	return nil
}

// handover records running sandbox sb under what the caller changed in it
// (a warm-pool member kept running, given to its claimant): the record and
// a state event running -> running commit together, then, as at any
// transition to running, its secret files are written and the Running
// hook is told.
func (m *Engine) handover(ctx context.Context, sb *sandbox.Sandbox, cause sandbox.Cause, actor, reason string) error {
	if sb.State != sandbox.StateRunning {
		return sandbox.ErrWrongState("hand over", sb)
	}
	prev := *sb
	now := m.now()
	sb.Cause, sb.Reason, sb.UpdatedAt = cause, reason, now
	ev := &sandbox.Event{
		SandboxID: sb.ID, Time: now, Type: "state", From: sandbox.StateRunning, To: sandbox.StateRunning, Actor: actor,
		Cause: cause, Reason: reason, Outcome: "ok",
	}
	if err := m.store.UpdateSandbox(ctx, sb, ev); err != nil {
		*sb = prev
		return fmt.Errorf("recording the handover: %w", err)
	}
	m.eventStored(ev)
	if HasSecretFiles(sb) {
		_ = m.deliverSecretFiles(ctx, sb, "running")
	}
	if len(m.hooks.running) > 0 {
		cp := *sb
		m.goTracked(func(ctx context.Context) { m.hooks.runRunning(ctx, &cp) })
	}
	return nil
}

// eventStored tells the webhook deliverer about ev, once it is stored.
func (m *Engine) eventStored(ev *sandbox.Event) {
	if m.cfg.OnEvent != nil && ev.Type == "state" {
		m.cfg.OnEvent()
	}
	if m.cfg.OnState != nil && ev.Type == "state" {
		m.cfg.OnState(ev.SandboxID, ev.To)
	}
}

// owner is whose records ctx reads: its caller's tenant, or every
// tenant's for the engine's own work, which runs without a caller.
// CallerTenant is the tenant whose templates and pools ctx's call reads
// and makes: its caller's tenant, or "" (the host's shared catalogue) for
// the host admin and the engine's own work.
func CallerTenant(ctx context.Context) string {
	if c, ok := identity.From(ctx); ok && !c.Host {
		return c.Tenant
	}
	return ""
}

func owner(ctx context.Context) store.Owner {
	if c, ok := identity.From(ctx); ok && !c.Host {
		return store.OwnedBy(c.Tenant)
	}
	return store.AnyOwner
}

// event records ev; a failure to record is logged, not returned: the
// operation it describes has already happened.
func (m *Engine) event(ctx context.Context, ev *sandbox.Event) {
	if ev.Time.IsZero() {
		ev.Time = m.now()
	}
	if err := m.store.AppendEvent(context.WithoutCancel(ctx), ev); err != nil {
		m.log.Error("recording event", "sandbox", ev.SandboxID, "type", ev.Type, "err", err)
		return
	}
	m.eventStored(ev)
}

// eventAsync records ev off the caller's path; if the queue is full it
// records it at once (events are never dropped).
func (m *Engine) eventAsync(ev *sandbox.Event) {
	if ev.Time.IsZero() {
		ev.Time = m.now()
	}
	select {
	case m.asyncEvents <- ev:
	default:
		m.event(context.Background(), ev)
	}
}

// recordEvents writes queued events until Close, then drains the queue.
func (m *Engine) recordEvents() {
	defer m.wg.Done()
	for {
		select {
		case ev := <-m.asyncEvents:
			m.event(context.Background(), ev)
		case <-m.stopCh:
			for {
				select {
				case ev := <-m.asyncEvents:
					m.event(context.Background(), ev)
				default:
					return
				}
			}
		}
	}
}
