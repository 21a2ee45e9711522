package pools

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/berth-sh/berth/internal/cleanup"
	"github.com/berth-sh/berth/internal/engine"
	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/internal/node"
	"github.com/berth-sh/berth/internal/sandbox"
	"github.com/berth-sh/berth/internal/store"
	"github.com/berth-sh/berth/templatefile"
)

// Warm pools keep, per template, a number of ready sandboxes: created
// ahead, then frozen (no CPU). A create that fits a pool's template and
// defaults claims one instead of starting a container: it is thawed and
// given the claimant's name, hostname, env, labels, timeout and policies.
// Pool members are never handed out twice and never returned: a claimed
// sandbox is an ordinary sandbox, destroyed at its end. Members whose
// template has changed are replaced.

// Warm is the warm-pool feature over the engine's core.
type Warm struct {
	e     *engine.Engine
	store store.Store
	node  node.Backend
	log   *slog.Logger

	mu           sync.Mutex
	poolStats    map[string]*poolStats
	poolBuilding int            // members being made, all templates (under mu)
	poolInFlight map[string]int // members being made, per template (under mu)
}

// New returns the warm-pool feature of e and installs its claim in e's
// creates.
func New(e *engine.Engine) *Warm {
	w := &Warm{e: e, store: e.Store(), node: e.Backend(), log: e.Log(),
		poolStats: map[string]*poolStats{}, poolInFlight: map[string]int{}}
	return w
}

const actorReconciler = "reconciler"

// MaxPoolSize bounds a template's pool.
const MaxPoolSize = templatefile.MaxPoolMin

type poolStats struct{ hits, misses atomic.Int64 }

func (m *Warm) stats(tpl string) *poolStats {
	m.mu.Lock()
	defer m.mu.Unlock()
	st, ok := m.poolStats[tpl]
	if !ok {
		st = &poolStats{}
		m.poolStats[tpl] = st
	}
	return st
}

// SetPool sets how many ready sandboxes template name keeps.
func (m *Warm) SetPool(ctx context.Context, name string, min int) (*Pool, error) {
	if min < 0 || min > MaxPoolSize {
		return nil, errdefs.Invalid("pool size must be between 0 and %d", MaxPoolSize)
	}
	if _, err := m.e.GetTemplate(ctx, name); err != nil {
		return nil, err
	}
	if err := m.store.SetPool(ctx, name, min); err != nil {
		return nil, err
	}
	m.e.WakeReconciler()
	return m.Pool(ctx, name)
}

// Pool reports template name's pool.
func (m *Warm) Pool(ctx context.Context, name string) (*Pool, error) {
	pools, err := m.store.ListPools(ctx)
	if err != nil {
		return nil, err
	}
	members, err := m.poolMembers(ctx)
	if err != nil {
		return nil, err
	}
	return m.poolReport(name, pools[name], members[name]), nil
}

// Pools reports every pool.
func (m *Warm) Pools(ctx context.Context) ([]Pool, error) {
	pools, err := m.store.ListPools(ctx)
	if err != nil {
		return nil, err
	}
	members, err := m.poolMembers(ctx)
	if err != nil {
		return nil, err
	}
	names := make([]string, 0, len(pools))
	for n := range pools {
		names = append(names, n)
	}
	slices.Sort(names)
	out := make([]Pool, 0, len(names))
	for _, n := range names {
		out = append(out, *m.poolReport(n, pools[n], members[n]))
	}
	return out, nil
}

func (m *Warm) poolReport(name string, min int, members []*sandbox.Sandbox) *Pool {
	p := &Pool{Template: name, Min: min}
	for _, sb := range members {
		switch sb.State {
		case sandbox.StatePaused:
			p.Ready++
		case sandbox.StateCreating, sandbox.StateRunning:
			p.Starting++
		}
	}
	m.mu.Lock()
	if n := m.poolInFlight[name]; n > p.Starting {
		p.Starting = n // members being made may not have a record yet
	}
	m.mu.Unlock()
	st := m.stats(name)
	p.Hits, p.Misses = st.hits.Load(), st.misses.Load()
	return p
}

// poolMembers groups this node's unclaimed pool members by template.
func (m *Warm) poolMembers(ctx context.Context) (map[string][]*sandbox.Sandbox, error) {
	live, _, err := m.store.ListSandboxes(ctx, store.SandboxFilter{Owner: store.AnyOwner, Node: m.e.Node()}, store.Page{})
	if err != nil {
		return nil, err
	}
	return groupPoolMembers(live), nil
}

// groupPoolMembers picks the unclaimed pool members out of live sandboxes,
// by template.
func groupPoolMembers(live []*sandbox.Sandbox) map[string][]*sandbox.Sandbox {
	out := map[string][]*sandbox.Sandbox{}
	for _, sb := range live {
		if sb.Spec.Pool != "" {
			out[sb.Spec.Pool] = append(out[sb.Spec.Pool], sb)
		}
	}
	return out
}

// poolable reports whether a create request can be served by a pool
// member of tpl: an ephemeral sandbox with the template's defaults for
// everything fixed at container start (the disk cap included), of the
// class pool members are made in (the default), which must be able to
// keep members.
func (m *Warm) poolable(req *engine.CreateRequest, tpl *store.Template, spec *sandbox.Spec) bool {
	def := sandbox.DefaultResources
	if tpl.Config.Resources != nil {
		def = *tpl.Config.Resources
	}
	if def.DiskBytes == 0 {
		def.DiskBytes = m.e.DiskDefault() // as members are made (addPoolMember)
	}
	caps, _ := node.ClassCaps(m.node, spec.Runtime)
	return !req.Persistent && len(spec.Volumes) == 0 && req.Snapshot == "" &&
		spec.Resources == def && (spec.Network == "" || spec.Network == "none") &&
		spec.Runtime == m.e.DefaultRuntime() && caps.Pool &&
		spec.User == tpl.Config.User // its /workspace belongs to the template's user
}

// runtimeOf is sb's runtime class, records from before classes were
// recorded by name being the default's.
func (m *Warm) runtimeOf(sb *sandbox.Sandbox) string {
	if sb.Spec.Runtime == "" {
		return m.e.DefaultRuntime()
	}
	return sb.Spec.Runtime
}

// claim hands out a ready pool member of tpl as the sandbox the request
// asks for, or returns nil if there is none.
func (m *Warm) Claim(ctx context.Context, tpl *store.Template, spec sandbox.Spec, req *engine.CreateRequest, opt engine.CreateOptions) (*sandbox.Sandbox, error) {
	if tpl.Tenant != "" || !m.poolable(req, tpl, &spec) {
		// Pools are the shared catalogue's: a tenant's own template
		// (which may shadow a pooled shared name) has none.
		return nil, nil
	}
	pools, err := m.store.ListPools(ctx)
	if err != nil || pools[tpl.Name] == 0 {
		return nil, err
	}
	members, err := m.poolMembers(ctx)
	if err != nil {
		return nil, err
	}
	defer m.e.WakeReconciler() // refill
	for _, cand := range members[tpl.Name] {
		if cand.State != sandbox.StatePaused || !slices.Equal(cand.Spec.Layers, tpl.Layers) ||
			cand.Spec.Resources.DiskBytes != spec.Resources.DiskBytes || // made under another default
			m.runtimeOf(cand) != spec.Runtime { // made under another default class
			continue
		}
		unlock, ok := m.e.TryLock(cand.ID)
		if !ok {
			continue // another claim or the reconciler has it
		}
		begin := time.Now()
		sb, err := m.claimLocked(ctx, cand.ID, spec, req, opt)
		unlock()
		if err != nil {
			if errors.Is(err, errdefs.ErrNameTaken) || errors.Is(err, errdefs.ErrQuota) {
				return nil, err // the name is taken, the tenant is full: no member will do
			}
			m.log.Warn("pool claim failed", "sandbox", cand.ID, "err", err)
			continue
		}
		m.stats(tpl.Name).hits.Add(1)
		m.e.Recorder().Resumed("pool_claim", time.Since(begin))
		return sb, nil
	}
	m.stats(tpl.Name).misses.Add(1)
	return nil, nil
}

func (m *Warm) claimLocked(ctx context.Context, id string, spec sandbox.Spec, req *engine.CreateRequest, opt engine.CreateOptions) (*sandbox.Sandbox, error) {
	sb, err := m.store.GetSandbox(ctx, engine.Owner(ctx), id)
	if err != nil {
		return nil, err
	}
	if sb.State != sandbox.StatePaused || sb.Spec.Pool == "" || m.runtimeOf(sb) != spec.Runtime {
		return nil, errdefs.Conflict("pool member %s was taken", id)
	}
	// The claimant's identity and settings; what the container was started
	// with (layers, resources, host /usr) is the member's and equal.
	spec.Layers, spec.HostUsr = sb.Spec.Layers, sb.Spec.HostUsr
	spec.IDs = sb.Spec.IDs // its processes run in the member's range
	spec.Pool = ""
	now := m.e.Now()
	prev := *sb
	sb.Spec = spec
	sb.Name, sb.Tenant = req.Name, opt.Tenant
	sb.CreatedAt, sb.StartedAt, sb.LastActivityAt = now, now, now
	if opt.Reserve != nil {
		if err := opt.Reserve(sb.ID); err != nil {
			return nil, err
		}
	}
	// The claim counts against the claimant's quota: admitted under its
	// tenant's lock, which is held until the member is recorded as its.
	if err := m.e.AdmitQuota(ctx, sb, func() error { return m.claimSteps(ctx, sb, &prev, opt) }); err != nil {
		return nil, err
	}
	return sb, nil
}

// claimSteps gives the member to its claimant. Each step pushes its undo:
// a claim that fails leaves the member in the pool exactly as it was
// (named as before, frozen).
func (m *Warm) claimSteps(ctx context.Context, sb, prev *sandbox.Sandbox, opt engine.CreateOptions) error {
	cu := cleanup.Make()
	defer cu.Clean()
	if sb.Name != "" {
		if err := m.node.SetHostname(ctx, sb, sb.Hostname()); err != nil {
			return fmt.Errorf("setting hostname: %w", err)
		}
		cu.Add(func() error { return m.node.SetHostname(ctx, prev, prev.Hostname()) })
	}
	if err := m.node.Thaw(ctx, sb); err != nil {
		return fmt.Errorf("thawing pool member: %w", err)
	}
	cu.Add(func() error { return m.node.Freeze(ctx, prev) })
	if err := m.e.Transition(ctx, sb, sandbox.StateRunning, sandbox.CauseUser, opt.Actor, "create (warm pool)"); err != nil {
		return err
	}
	cu.Release()
	return nil
}

// refillPools creates members for pools below their size and replaces
// members made from an older version of their template. At most two
// members are made at a time, so a refill never starves claims.
// live is this node's live sandboxes, as the reconciler just read them.
func (m *Warm) Refill(ctx context.Context, live []*sandbox.Sandbox) {
	members := groupPoolMembers(live)
	pools, err := m.store.ListPools(ctx)
	if err != nil || len(pools) == 0 && len(members) == 0 {
		return
	}
	for name, list := range members {
		tpl, terr := m.store.GetTemplate(ctx, name)
		for _, sb := range list {
			stale := terr != nil || pools[name] == 0 || !slices.Equal(sb.Spec.Layers, tpl.Layers)
			if stale && sb.State == sandbox.StatePaused {
				m.e.Async(sb.ID, func(ctx context.Context, cur *sandbox.Sandbox) {
					if cur.Spec.Pool != "" {
						_ = m.e.DestroyLocked(ctx, cur, sandbox.CauseReconciler, actorReconciler, "warm pool rolled over")
					}
				})
			}
		}
	}
	for name, min := range pools {
		tpl, err := m.store.GetTemplate(ctx, name)
		if err != nil {
			continue
		}
		have := 0
		for _, sb := range members[name] {
			if slices.Equal(sb.Spec.Layers, tpl.Layers) {
				have++
			}
		}
		m.mu.Lock()
		// Members being made may not have a record yet.
		have += m.poolInFlight[name]
		for i := have; i < min && m.poolBuilding < 2 && !m.e.Closing(); i++ {
			m.poolBuilding++
			m.poolInFlight[name]++
			m.e.Go(func(ctx context.Context) {
				if err := m.addPoolMember(ctx, tpl); err != nil {
					m.log.Warn("refilling warm pool", "template", tpl.Name, "err", err)
				}
				m.mu.Lock()
				m.poolBuilding--
				m.poolInFlight[tpl.Name]--
				m.mu.Unlock()
				m.e.WakeReconciler()
			})
		}
		m.mu.Unlock()
	}
}

// addPoolMember makes one frozen, ready sandbox for tpl.
func (m *Warm) addPoolMember(ctx context.Context, tpl *store.Template) error {
	// A member once begun is finished (paused into the pool) or undone,
	// like a request's create: Close stops new members, not one half made.
	ctx = context.WithoutCancel(ctx)
	spec, err := engine.SpecFromRequest(&engine.CreateRequest{}, tpl)
	if err != nil {
		return err
	}
	spec.Layers, spec.HostUsr, spec.Pool = tpl.Layers, tpl.Config.HostUsr, tpl.Name
	spec.Runtime = m.e.DefaultRuntime()
	if caps, _ := node.ClassCaps(m.node, spec.Runtime); !caps.Pool {
		return fmt.Errorf("runtime class %s cannot keep warm-pool members", spec.Runtime)
	}
	m.e.WithDiskDefault(&spec)
	now := m.e.Now()
	sb := &sandbox.Sandbox{ID: engine.NewID(), State: sandbox.StateCreating, Node: m.e.Node(), Spec: spec,
		CreatedAt: now, UpdatedAt: now, Cause: sandbox.CauseReconciler, Reason: "warm pool"}
	if err := m.e.Launch(ctx, sb, "pool:"+tpl.Name, nil); err != nil {
		return err
	}
	unlock := m.e.Lock(sb.ID)
	defer unlock()
	cur, err := m.store.GetSandbox(ctx, store.AnyOwner, sb.ID)
	if err != nil {
		return err
	}
	if cur.Spec.Pool == "" || cur.State != sandbox.StateRunning {
		return nil
	}
	// The pool may have shrunk or its template changed meanwhile.
	pools, err := m.store.ListPools(ctx)
	latest, terr := m.store.GetTemplate(ctx, tpl.Name)
	if err != nil || terr != nil || pools[tpl.Name] == 0 || !slices.Equal(latest.Layers, tpl.Layers) {
		return m.e.DestroyLocked(ctx, cur, sandbox.CauseReconciler, actorReconciler, "warm pool no longer wants it")
	}
	return m.e.PauseLocked(ctx, cur, sandbox.CauseReconciler, "pool:"+tpl.Name, "ready in warm pool")
}
