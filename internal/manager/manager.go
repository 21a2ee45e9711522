// Package manager is berth's sandbox engine: it turns API calls into
// durable records and host side effects, in that order (intent first), and
// drives the two to agree. Create mounts an overlay root, starts the agent
// as PID 1 under the runtime and waits for it; exec and file calls go to the
// agent over its unix socket; delete tears down in idempotent, verified,
// retried steps. The reconciler (reconcile.go) adopts, finishes and cleans
// up after restarts and crashes and enforces timeouts from stored
// timestamps.
package manager

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/berth-sh/berth/internal/agent"
	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/internal/identity"
	"github.com/berth-sh/berth/internal/image"
	"github.com/berth-sh/berth/internal/network"
	"github.com/berth-sh/berth/internal/runtime"
	"github.com/berth-sh/berth/internal/sandbox"
	"github.com/berth-sh/berth/internal/store"
	"github.com/berth-sh/berth/internal/volume"
)

// DefaultRecordRetention is how long tombstones and their records are kept
// unless the daemon says otherwise (Config.Retention).
const DefaultRecordRetention = 7 * 24 * time.Hour

// Config configures a Manager.
type Config struct {
	DataDir string
	// AgentPath is the berth binary bind-mounted into sandboxes as the agent.
	AgentPath       string
	DefaultTemplate string
	IDMap           runtime.IDMap
	// Instance names this daemon's host resources (cgroup parent, etc.).
	Instance string
	// Node names this daemon in a store shared by several (PostgreSQL):
	// each acts only on its own sandboxes. Default: Instance.
	Node string
	// ReadyTimeout bounds the wait for a new sandbox's agent.
	ReadyTimeout time.Duration
	// ReconcileInterval is how often the background reconciler runs.
	ReconcileInterval time.Duration
	Logger            *slog.Logger
	// Now is the clock; tests may replace it.
	Now func() time.Time
	// OnEvent, if set, is called after every recorded event (the webhook
	// deliverer's kick).
	OnEvent func()
	// PoolSize is the size of the storage pool image, when one is made.
	PoolSize int64
	// EgressSubnet is the IPv4 subnet of egress sandboxes; unset, the one
	// this data dir used before, else the first free one (package
	// network), kept in <data-dir>/network.json.
	EgressSubnet netip.Prefix
	// DefaultPolicy and DefaultTimeout are the server-wide defaults, under
	// a template's and a request's own.
	DefaultPolicy  sandbox.Policy
	DefaultTimeout time.Duration
	// DiskDefault is the server-wide disk cap of a sandbox's writable root
	// layer, under a template's and a request's own: 0 means
	// DefaultDiskBytes, negative none.
	DiskDefault int64
	// DiskLowWater is the free space creates leave on the filesystem
	// under the data dir (capacity.go); 0: 1 GiB or 5% of a smaller one.
	DiskLowWater int64
	// Retention is how long tombstones (deleted sandboxes with their
	// events and flows, deleted volumes) and webhook delivery records are
	// kept before the reconciler purges them; 0 or negative: for ever.
	Retention time.Duration
	// Webhooks are the configured webhook URLs: the purge keeps every
	// event one of them has not handled (events are their outbox).
	Webhooks []string
}

// Manager owns every sandbox of one daemon.
type Manager struct {
	cfg     Config
	store   store.Store
	images  *image.Store
	volumes *volume.Manager
	scratch *volume.Manager // sandboxes' writable root layers (disk.go)
	pool    *volume.Pool
	// runtimes are the runtime classes this daemon offers, by name;
	// defaultRuntime serves sandboxes that name none.
	runtimes       map[string]runtime.Runtime
	defaultRuntime string
	log            *slog.Logger

	locks keyedMutex

	mu       sync.Mutex
	agents   map[string]*agent.Client // by sandbox id
	channels map[string]*agentChannel // by sandbox id (agentchan.go)
	initLogs map[string]*initLog      // by sandbox id (agentchan.go)
	// clonesInFlight are the snapshots-dir entries operations of this
	// daemon are using (clones.go).
	clonesInFlight map[string]int
	// readOnly are the sandbox filesystems seen read-only (capacity.go).
	readOnly map[string]bool
	cancels  map[string]context.CancelFunc
	activity map[string]time.Time // latest activity not yet stored
	cpu      map[string]cpuSample

	netMu      sync.Mutex
	network    *network.Network // made on first use (see net)
	flowEvents chan flowEvent
	// asyncEvents carries events recorded off the request path (exec).
	asyncEvents  chan *sandbox.Event
	flowsDropped atomic.Int64
	agentRefused atomic.Uint64

	ids *idState // host id ranges (ids.go)

	snapTick     int // counts ticks; snapshots expire every few
	poolStats    map[string]*poolStats
	poolBuilding int            // members being made, all templates (under mu)
	poolInFlight map[string]int // members being made, per template (under mu)

	wg     sync.WaitGroup
	stopCh chan struct{}
	kick   chan struct{}
}

// DefaultIDMap maps sandbox root to host uid/gid 100000000 (and 65536 ids
// from there): far above any regular or subordinate id range.
var DefaultIDMap = runtime.IDMap{HostUID: 100000000, HostGID: 100000000, Size: 65536}

// InstanceName derives a short, stable name for the host resources of the
// daemon whose data dir is dataDir.
func InstanceName(dataDir string) string {
	abs, err := filepath.Abs(dataDir)
	if err != nil {
		abs = dataDir
	}
	sum := sha256.Sum256([]byte(abs))
	return "berth-" + hex.EncodeToString(sum[:4])
}

// New returns a Manager. Call Start to reconcile and run background work.
func New(cfg Config, st store.Store, images *image.Store, rts ...runtime.Runtime) (*Manager, error) {
	if len(rts) == 0 {
		return nil, errors.New("manager: no runtime class")
	}
	if cfg.DataDir == "" || cfg.AgentPath == "" {
		return nil, errors.New("manager: DataDir and AgentPath are required")
	}
	if cfg.Instance == "" {
		cfg.Instance = InstanceName(cfg.DataDir)
	}
	if cfg.Node == "" {
		cfg.Node = cfg.Instance
	}
	if cfg.IDMap.Size == 0 {
		cfg.IDMap = DefaultIDMap
	}
	if cfg.DefaultTemplate == "" {
		cfg.DefaultTemplate = "base"
	}
	if cfg.ReadyTimeout == 0 {
		cfg.ReadyTimeout = 15 * time.Second
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
	if err := os.MkdirAll(filepath.Join(cfg.DataDir, "sandboxes"), 0o711); err != nil {
		return nil, err
	}
	// The runtime enters the user namespace before it mounts the root, so
	// mapped root must be able to traverse to it.
	if err := os.Chmod(cfg.DataDir, 0o711); err != nil {
		return nil, err
	}
	uid, gid := cfg.IDMap.HostRoot()
	agentCopy, err := openShare(cfg.DataDir, cfg.AgentPath)
	if err != nil {
		return nil, err
	}
	cfg.AgentPath = agentCopy
	pool, err := volume.OpenPool(cfg.DataDir, cfg.PoolSize)
	if err != nil {
		return nil, fmt.Errorf("storage pool: %w", err)
	}
	cfg.Logger.Info("storage pool", "kind", pool.Kind())
	thawPool(pool.Root(), cfg.Logger)
	vols, err := volume.New(filepath.Join(pool.Root(), "volumes"), uid, gid)
	if err != nil {
		return nil, err
	}
	scratch, err := volume.NewScratch(filepath.Join(pool.Root(), "scratch"), uid, gid, pool.Reflink())
	if err != nil {
		return nil, err
	}
	if cfg.DiskDefault == 0 {
		cfg.DiskDefault = DefaultDiskBytes
	}
	if cfg.DiskDefault > 0 {
		capacity, err := pool.Capacity()
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
	return &Manager{
		cfg: cfg, store: st, images: images, volumes: vols, scratch: scratch, pool: pool, log: cfg.Logger,
		ids:      probeIDs(cfg, pool.Root()),
		runtimes: runtimesByName(rts), defaultRuntime: rts[0].Name(),
		agents:         map[string]*agent.Client{},
		channels:       map[string]*agentChannel{},
		initLogs:       map[string]*initLog{},
		clonesInFlight: map[string]int{},
		readOnly:       map[string]bool{},
		cancels:        map[string]context.CancelFunc{},
		activity:       map[string]time.Time{},
		poolStats:      map[string]*poolStats{},
		flowEvents:     make(chan flowEvent, 4096),
		asyncEvents:    make(chan *sandbox.Event, 1024),
		poolInFlight:   map[string]int{},
		cpu:            map[string]cpuSample{},
		stopCh:         make(chan struct{}),
		kick:           make(chan struct{}, 1),
	}, nil
}

// Runtime returns the default runtime class.
func (m *Manager) Runtime() runtime.Runtime { return m.runtimes[m.defaultRuntime] }

// RuntimeFor returns the runtime class of sb.
func (m *Manager) RuntimeFor(sb *sandbox.Sandbox) runtime.Runtime { return m.rtFor(sb) }

func (m *Manager) rtFor(sb *sandbox.Sandbox) runtime.Runtime {
	if rt, ok := m.runtimes[sb.Spec.Runtime]; ok {
		return rt
	}
	return m.runtimes[m.defaultRuntime]
}

// RuntimeNames lists the runtime classes, the default first.
func (m *Manager) RuntimeNames() []string {
	out := []string{m.defaultRuntime}
	for n := range m.runtimes {
		if n != m.defaultRuntime {
			out = append(out, n)
		}
	}
	slices.Sort(out[1:])
	return out
}

// Store returns the record store.
func (m *Manager) Store() store.Store { return m.store }

// Images returns the layer store.
func (m *Manager) Images() *image.Store { return m.images }

// Config returns the manager's configuration.
func (m *Manager) Config() Config { return m.cfg }

func (m *Manager) now() time.Time { return m.cfg.Now().UTC() }

// Paths of one sandbox's host resources.
type paths struct {
	dir, bundle, rootfs string
	// ctl is root-only and never mounted into the sandbox: the agent's
	// socket where the daemon binds it (socket), and the pin of the one
	// the agent binds itself (pin). run is the tmpfs that gVisor agents
	// bind their socket in, mounted into the sandbox at /.berth/run.
	ctl, socket, pin, run string
	// scratch holds the writable layer that does not persist: upper and
	// work on its own filesystem (disk.go) mounted at scratch/mnt, in the
	// storage pool so forks and snapshots can reflink it.
	scratch, upper, work string
	cgroup               string
}

func (m *Manager) paths(id string) paths {
	dir := filepath.Join(m.cfg.DataDir, "sandboxes", id)
	scratch := filepath.Join(m.pool.Root(), "scratch", id)
	return paths{
		dir:     dir,
		bundle:  filepath.Join(dir, "bundle"),
		rootfs:  filepath.Join(dir, "rootfs"),
		scratch: scratch,
		upper:   filepath.Join(scratch, "mnt", "upper"),
		work:    filepath.Join(scratch, "mnt", "work"),
		ctl:     filepath.Join(dir, ctlDir),
		socket:  filepath.Join(dir, ctlDir, agentSockName),
		pin:     filepath.Join(dir, ctlDir, agentPinName),
		run:     filepath.Join(dir, "run"),
		cgroup:  "/" + m.cfg.Instance + "/" + id,
	}
}

// CgroupParent is the cgroup under which all of this daemon's sandboxes live.
func (m *Manager) CgroupParent() string { return "/" + m.cfg.Instance }

func (m *Manager) agentFor(id string) *agent.Client {
	m.mu.Lock()
	defer m.mu.Unlock()
	c, ok := m.agents[id]
	if !ok {
		m.mu.Unlock()
		c = m.newAgentClient(id)
		m.mu.Lock()
		if prev, ok := m.agents[id]; ok {
			return prev
		}
		m.agents[id] = c
	}
	return c
}

func (m *Manager) forgetAgent(id string) {
	m.mu.Lock()
	delete(m.agents, id)
	m.mu.Unlock()
}

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
func (m *Manager) Node() string { return m.cfg.Node }

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

// keyedMutex serialises lifecycle operations per sandbox.
type keyedMutex struct {
	mu sync.Mutex
	m  map[string]*keyedEntry
}

type keyedEntry struct {
	mu  sync.Mutex
	ref int
}

func (k *keyedMutex) Lock(key string) func() {
	k.mu.Lock()
	if k.m == nil {
		k.m = map[string]*keyedEntry{}
	}
	e, ok := k.m[key]
	if !ok {
		e = &keyedEntry{}
		k.m[key] = e
	}
	e.ref++
	k.mu.Unlock()
	e.mu.Lock()
	return func() {
		e.mu.Unlock()
		k.mu.Lock()
		e.ref--
		if e.ref == 0 {
			delete(k.m, key)
		}
		k.mu.Unlock()
	}
}

// mine reports whether this daemon runs sb.
func (m *Manager) mine(sb *sandbox.Sandbox) bool { return sb.Node == "" || sb.Node == m.cfg.Node }

// local returns sandbox ref if this daemon runs it; a sandbox of another
// node is a 409 naming it, so no two daemons ever act on one sandbox.
func (m *Manager) local(ctx context.Context, ref string) (*sandbox.Sandbox, error) {
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
func (m *Manager) Get(ctx context.Context, ref string) (*sandbox.Sandbox, error) {
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
	return sb, err
}

// List returns a page of live sandboxes, or of all including tombstones.
func (m *Manager) List(ctx context.Context, all bool, p store.Page) ([]*sandbox.Sandbox, string, error) {
	return m.store.ListSandboxes(ctx, store.SandboxFilter{Owner: owner(ctx), IncludeDeleted: all}, p)
}

// Events returns a page of a sandbox's recorded events with ids above after.
func (m *Manager) Events(ctx context.Context, ref string, after int64, p store.Page) ([]*sandbox.Event, string, error) {
	sb, err := m.Get(ctx, ref)
	if err != nil {
		return nil, "", err
	}
	return m.store.ListEvents(ctx, owner(ctx), sb.ID, after, p)
}

// LastActivity is the latest activity known for sb (API calls, exec
// sessions, busy CPU), stored or not yet.
func (m *Manager) LastActivity(sb *sandbox.Sandbox) time.Time { return m.lastActivity(sb) }

// transition moves sb to state to, writes it (compare-and-swap) and records
// the event. On a write failure sb is left unchanged.
func (m *Manager) transition(ctx context.Context, sb *sandbox.Sandbox, to sandbox.State, cause sandbox.Cause, actor, reason string) error {
	from := sb.State
	prev := *sb
	if err := sb.Transition(to, cause, reason, m.now()); err != nil {
		return err
	}
	if to != sandbox.StateFailed && to != sandbox.StateDeleting {
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
	return nil
}

// eventStored tells the webhook deliverer about ev, once it is stored.
func (m *Manager) eventStored(ev *sandbox.Event) {
	if m.cfg.OnEvent != nil && ev.Type == "state" {
		m.cfg.OnEvent()
	}
}

// owner is whose records ctx reads: its caller's tenant, or every
// tenant's for the engine's own work, which runs without a caller.
func owner(ctx context.Context) store.Owner {
	if c, ok := identity.From(ctx); ok {
		return store.OwnedBy(c.Tenant)
	}
	return store.AnyOwner
}

// event records ev; a failure to record is logged, not returned: the
// operation it describes has already happened.
func (m *Manager) event(ctx context.Context, ev *sandbox.Event) {
	if ev.Time.IsZero() {
		ev.Time = m.now()
	}
	if err := m.store.AppendEvent(context.WithoutCancel(ctx), ev); err != nil {
		m.log.Error("recording event", "sandbox", ev.SandboxID, "type", ev.Type, "err", err)
		return
	}
	m.eventStored(ev)
}

// TryLock takes key's lock if it is free.
func (k *keyedMutex) TryLock(key string) (func(), bool) {
	k.mu.Lock()
	if k.m == nil {
		k.m = map[string]*keyedEntry{}
	}
	if _, busy := k.m[key]; busy {
		k.mu.Unlock()
		return nil, false
	}
	e := &keyedEntry{ref: 1}
	e.mu.Lock()
	k.m[key] = e
	k.mu.Unlock()
	return func() {
		e.mu.Unlock()
		k.mu.Lock()
		e.ref--
		if e.ref == 0 {
			delete(k.m, key)
		}
		k.mu.Unlock()
	}, true
}

// BecomeSubreaper makes this process the reaper of the container init
// processes the runtime leaves behind when it exits, so that they do not
// depend on the host's PID 1 to be reaped while the daemon runs.
func BecomeSubreaper() error {
	return unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
}

// reap waits for pid if it is our child (we are its subreaper), so that
// it does not linger as a zombie after the sandbox ends.
func reap(pid int) {
	if pid <= 0 {
		return
	}
	var ws unix.WaitStatus
	for {
		_, err := unix.Wait4(pid, &ws, 0, nil)
		if err != unix.EINTR {
			return
		}
	}
}

func runtimesByName(rts []runtime.Runtime) map[string]runtime.Runtime {
	out := make(map[string]runtime.Runtime, len(rts))
	for _, rt := range rts {
		out[rt.Name()] = rt
	}
	return out
}

// eventAsync records ev off the caller's path; if the queue is full it
// records it at once (events are never dropped).
func (m *Manager) eventAsync(ev *sandbox.Event) {
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
func (m *Manager) recordEvents() {
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
