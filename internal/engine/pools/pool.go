package pools

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/berth-sh/berth/internal/cleanup"
	"github.com/berth-sh/berth/internal/engine"
	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/internal/failpoint"
	"github.com/berth-sh/berth/internal/leader"
	"github.com/berth-sh/berth/internal/node"
	"github.com/berth-sh/berth/internal/sandbox"
	"github.com/berth-sh/berth/internal/store"
	"github.com/berth-sh/berth/templatefile"
)

// Warm pools keep, per (tenant, template), a number of ready sandboxes: created
// ahead, then frozen (no CPU). A create that fits a pool's template and
// defaults claims one instead of starting a container: it is thawed and
// given the claimant's name, hostname, env, labels, timeout and policies.
// On a runtime class that cannot freeze (Caps.Freeze false: a Kubernetes
// pod) members wait running, holding what they reserve on their node, with
// no idle policy (a member waits, it is not idle), and a claim takes one as
// it is. On a class that cannot rename a running sandbox (Caps.Rename
// false) only creates without a name are served from the pool: the
// claimed sandbox keeps the member's host name, sb-<id>, which is what
// such a create's would be anyway.
// Pool members are never handed out twice and never returned: a claimed
// sandbox is an ordinary sandbox, destroyed at its end. Members whose
// template has changed are replaced. The host's pools (tenant "") are of
// the shared catalogue's templates; their members belong to no tenant
// until claimed. A tenant's pool is of its own template: its members are
// that tenant's sandboxes from the start (counted by its quota, hidden
// from it until claimed), and only that tenant's creates claim them.

// Warm is the warm-pool feature over the engine's core.
type Warm struct {
	e     engine.Host
	store store.Store
	node  node.Backend
	log   *slog.Logger

	// refilling serializes Refill: only Refill starts members, so while
	// it holds this the members in flight can only finish.
	refilling    sync.Mutex
	mu           sync.Mutex
	poolStats    map[store.PoolKey]*poolStats
	claimQueues  map[store.PoolKey]*claimQueue     // what claims pop members from (claimqueue.go; under mu)
	poolBuilding int                               // members being made, all pools (under mu)
	poolInFlight map[store.PoolKey]map[string]bool // ids of members being made, per pool (under mu)
	retiring     map[string]bool                   // ids of members queued for removal (under mu)

	refillKick, refillRunning atomic.Bool  // kickRefill's pass asked for, and running
	claiming                  atomic.Int32 // claims running now
	lastClaim                 atomic.Int64 // when a claim last began or ended (unix ns, the host's clock)
	lastBurst                 atomic.Int64 // when a claim last began or ended beside another (unix ns, the host's clock)

	demand  demand // poolable creates of the automatic pool (auto.go)
	autoMax int    // the automatic pool's bound
}

// New returns the warm-pool feature of e and installs its claim in e's
// creates.
func New(e engine.Host) *Warm {
	w := &Warm{e: e, store: e.Store(), node: e.Backend(), log: e.Log(),
		poolStats: map[store.PoolKey]*poolStats{}, claimQueues: map[store.PoolKey]*claimQueue{}, poolInFlight: map[store.PoolKey]map[string]bool{}, retiring: map[string]bool{}}
	w.autoMax = e.Config().WarmPoolMax
	if w.autoMax <= 0 {
		w.autoMax = defaultAutoMax()
	}
	w.autoMax = min(w.autoMax, MaxPoolSize)
	e.Hooks().Claim = w.Claim // a create may be served by a warm member
	return w
}

const actorReconciler = "reconciler"

// MaxPoolSize bounds a template's pool.
const MaxPoolSize = templatefile.MaxPoolMin

type poolStats struct {
	hits, misses atomic.Int64

	mu       sync.Mutex
	reason   string    // why the last member could not be made, "" after one was
	failures int       // members not made in a row
	retryAt  time.Time // no member is begun before (the host's clock)
}

// Members that fail in a row are retried after a backoff, doubling from
// refillBackoff to refillBackoffMax: an error that lasts (a full disk, a
// broken template) would otherwise make and remove members back to back.
const (
	refillBackoff    = time.Second
	refillBackoffMax = time.Minute
)

// made records the outcome of one member's making.
func (st *poolStats) made(err error) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if err == nil {
		st.reason, st.failures, st.retryAt = "", 0, time.Time{}
		return
	}
	st.reason = refillReason(err)
	st.failures++
	st.retryAt = time.Now().Add(min(refillBackoff<<min(st.failures-1, 10), refillBackoffMax))
}

// backingOff reports whether the pool waits before its next member.
func (st *poolStats) backingOff() bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	return time.Now().Before(st.retryAt)
}

func (st *poolStats) lastReason() string {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.reason
}

// refillReason is what a pool below its size shows for a member that
// could not be made: the error's class and its user-safe message (a
// tenant sees its own pools' reasons; no internal detail goes in).
func refillReason(err error) string {
	msg := errdefs.Message(err)
	switch {
	case errors.Is(err, errdefs.ErrQuota):
		return "tenant quota reached: " + msg
	case errors.Is(err, errdefs.ErrInsufficientStorage), errors.Is(err, errdefs.ErrExhausted):
		return "host capacity: " + msg
	}
	return "error: " + msg
}

func (m *Warm) stats(tpl store.PoolKey) *poolStats {
	m.mu.Lock()
	defer m.mu.Unlock()
	st, ok := m.poolStats[tpl]
	if !ok {
		st = &poolStats{}
		m.poolStats[tpl] = st
	}
	return st
}

// keyOf is the pool of template t.
func keyOf(t *store.Template) store.PoolKey { return store.PoolKey{Tenant: t.Tenant, Template: t.Name} }

// SetPool sets how many ready sandboxes template name keeps: the
// caller's own template (a tenant cannot size the host's shared pools).
func (m *Warm) SetPool(ctx context.Context, name string, min int) (*Pool, error) {
	if min < 0 || min > MaxPoolSize {
		return nil, errdefs.Invalid("pool size must be between 0 and %d", MaxPoolSize)
	}
	tenant := engine.CallerTenant(ctx)
	tpl, err := m.e.ResolveTemplate(ctx, tenant, name)
	if err != nil {
		return nil, err
	}
	if tpl.Tenant != tenant {
		return nil, errdefs.Permission("template %q is the host's shared template: its pool is the host's to set", name)
	}
	if err := m.store.SetPool(ctx, tenant, name, min); err != nil {
		return nil, err
	}
	m.e.WakeReconciler()
	return m.Pool(ctx, name)
}

// ClearPool forgets the size set for the caller's own template name: the
// default template's pool is the automatic one again (auto.go), any
// other has none.
func (m *Warm) ClearPool(ctx context.Context, name string) (*Pool, error) {
	tenant := engine.CallerTenant(ctx)
	tpl, err := m.e.ResolveTemplate(ctx, tenant, name)
	if err != nil {
		return nil, err
	}
	if tpl.Tenant != tenant {
		return nil, errdefs.Permission("template %q is the host's shared template: its pool is the host's to set", name)
	}
	if err := m.store.ClearPool(ctx, tenant, name); err != nil {
		return nil, err
	}
	m.e.WakeReconciler()
	return m.Pool(ctx, name)
}

// Pool reports the pool of template name as the caller resolves it: a
// tenant's own template's, or the shared one's.
func (m *Warm) Pool(ctx context.Context, name string) (*Pool, error) {
	tpl, err := m.e.ResolveTemplate(ctx, engine.CallerTenant(ctx), name)
	if err != nil {
		return nil, err
	}
	set, err := m.store.ListPools(ctx)
	if err != nil {
		return nil, err
	}
	members, err := m.poolMembers(ctx)
	if err != nil {
		return nil, err
	}
	k := keyOf(tpl)
	p := m.poolReport(k, m.sizes(set)[k], members[k])
	p.Auto = m.isAuto(k, set)
	return p, nil
}

// Pools reports every pool the caller sees: the host every tenant's, a
// tenant its own and the host's of the shared templates it does not
// shadow.
func (m *Warm) Pools(ctx context.Context) ([]Pool, error) {
	set, err := m.store.ListPools(ctx)
	if err != nil {
		return nil, err
	}
	pools := m.sizes(set)
	members, err := m.poolMembers(ctx)
	if err != nil {
		return nil, err
	}
	tenant, scoped := engine.Owner(ctx).Tenant()
	keys := make([]store.PoolKey, 0, len(pools))
	auto, _ := m.autoKey()
	for k, size := range pools {
		if size == 0 && len(members[k]) == 0 && k != auto {
			continue // set to none, and none left
		}
		if scoped && k.Tenant != tenant {
			if k.Tenant != "" {
				continue
			}
			if _, err := m.store.GetTenantTemplate(ctx, tenant, k.Template); err == nil {
				continue // shadowed by the tenant's own
			}
		}
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b store.PoolKey) int {
		if c := strings.Compare(a.Template, b.Template); c != 0 {
			return c
		}
		return strings.Compare(a.Tenant, b.Tenant)
	})
	out := make([]Pool, 0, len(keys))
	for _, k := range keys {
		p := m.poolReport(k, pools[k], members[k])
		p.Auto = m.isAuto(k, set)
		out = append(out, *p)
	}
	return out, nil
}

// ready reports whether pool member sb can be claimed: frozen, or running
// where its class cannot freeze (such members wait running).
func (m *Warm) ready(sb *sandbox.Sandbox) bool {
	switch sb.State {
	case sandbox.StatePaused:
		return true
	case sandbox.StateRunning:
		return !m.e.Caps(sb).Freeze
	}
	return false
}

func (m *Warm) poolReport(name store.PoolKey, min int, members []*sandbox.Sandbox) *Pool {
	p := &Pool{Tenant: name.Tenant, Template: name.Template, Min: min}
	for _, sb := range members {
		switch {
		case m.ready(sb):
			p.Ready++
		case sb.State == sandbox.StateCreating || sb.State == sandbox.StateRunning:
			p.Starting++
		}
	}
	m.mu.Lock()
	if n := len(m.poolInFlight[name]); n > p.Starting {
		p.Starting = n // members being made may not have a record yet
	}
	m.mu.Unlock()
	st := m.stats(name)
	p.Hits, p.Misses = st.hits.Load(), st.misses.Load()
	if p.Ready+p.Starting < p.Min {
		p.Reason = st.lastReason()
	}
	return p
}

// poolMembers groups this node's unclaimed pool members by pool.
func (m *Warm) poolMembers(ctx context.Context) (map[store.PoolKey][]*sandbox.Sandbox, error) {
	live, _, err := m.store.ListSandboxes(ctx, store.SandboxFilter{Owner: store.AnyOwner, Node: m.e.Node(), Pooled: true}, store.Page{})
	if err != nil {
		return nil, err
	}
	return groupPoolMembers(live), nil
}

// groupPoolMembers picks the unclaimed pool members out of live sandboxes,
// by pool: a member's tenant is its pool's.
func groupPoolMembers(live []*sandbox.Sandbox) map[store.PoolKey][]*sandbox.Sandbox {
	out := map[store.PoolKey][]*sandbox.Sandbox{}
	for _, sb := range live {
		if sb.Spec.Pool != "" {
			k := store.PoolKey{Tenant: sb.Tenant, Template: sb.Spec.Pool}
			out[k] = append(out[k], sb)
		}
	}
	return out
}

// poolable reports whether a create request can be served by a pool
// member of tpl: an ephemeral sandbox with the template's defaults for
// everything fixed at container start (the disk cap included), of the
// class pool members are made in (the default), which must be able to
// keep members, and, for a create with a name, to rename one.
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
		spec.Runtime == m.e.DefaultRuntime() && caps.Pool && (req.Name == "" || caps.Rename) &&
		spec.User == tpl.Config.User && // its /workspace belongs to the template's user
		!spec.Sudo // members are started without it
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
// asks for, or returns nil if there is none. tpl is the template the
// create resolved for its tenant, so the pool is that template's: a
// tenant's own template's pool (of its own members), or the host's pool
// of a shared one; never another tenant's.
func (m *Warm) Claim(ctx context.Context, tpl *store.Template, spec sandbox.Spec, req *engine.CreateRequest, opt engine.CreateOptions) (*sandbox.Sandbox, error) {
	if tpl.Tenant != "" && tpl.Tenant != opt.Tenant || !m.poolable(req, tpl, &spec) {
		return nil, nil
	}
	k := keyOf(tpl)
	if ak, ok := m.autoKey(); ok && k == ak {
		m.demand.note(m.e.Now()) // hit or miss, what the automatic pool is sized by
	}
	set, err := m.store.ListPools(ctx)
	if err != nil || m.sizes(set)[k] == 0 {
		return nil, err
	}
	// Only this pool's members are read, once for a burst of claims
	// (claimqueue.go): a claim's cost must grow neither with the node's
	// sandboxes nor with the claims beside it.
	now := time.Now().UnixNano()
	m.lastClaim.Store(now)
	if m.claiming.Add(1) > 1 {
		m.lastBurst.Store(now)
	}
	defer m.kickRefill()
	defer func() {
		// The claim's end counts as much as its beginning: the claims of
		// a burst all begin at once, behind their requests' first
		// writes, and end one by one, each followed by its first
		// command; a pass timed from the last beginning made members
		// (runtime starts and mounts on the same cores) while half the
		// burst still waited for its answers.
		end := time.Now().UnixNano()
		m.lastClaim.Store(end)
		if m.claiming.Add(-1) > 0 {
			m.lastBurst.Store(end)
		}
	}()
	q := m.queue(k)
	listed := false
	list := func(ctx context.Context) ([]string, error) {
		members, _, err := m.store.ListSandboxes(ctx, store.SandboxFilter{Owner: store.AnyOwner, Node: m.e.Node(), Pool: k.Template}, store.Page{})
		if err != nil {
			return nil, err
		}
		return m.readyIDs(k, members), nil
	}
	for {
		id, ok, err := q.next(ctx, &listed, list)
		if err != nil {
			return nil, err
		}
		if !ok {
			break
		}
		op, unlock, ok := m.e.TryLock(id)
		if !ok {
			continue // the reconciler has it (claims never share an id)
		}
		begin := time.Now()
		sb, err := m.claimLocked(ctx, op, k, id, tpl, spec, req, opt)
		unlock()
		if err != nil {
			if errors.Is(err, errdefs.ErrNameTaken) || errors.Is(err, errdefs.ErrQuota) {
				// The name is taken, the tenant is full: no member will
				// do. The member goes back for the next claim.
				q.putBack(id)
				return nil, err
			}
			if !errors.Is(err, errNotClaimable) {
				m.log.Warn("pool claim failed", "sandbox", id, "err", err)
			}
			continue
		}
		m.stats(k).hits.Add(1)
		m.e.Recorder().Resumed("pool_claim", time.Since(begin))
		return sb, nil
	}
	m.stats(k).misses.Add(1)
	return nil, nil
}

func (m *Warm) claimLocked(ctx context.Context, op *engine.Op, pool store.PoolKey, id string, tpl *store.Template, spec sandbox.Spec, req *engine.CreateRequest, opt engine.CreateOptions) (*sandbox.Sandbox, error) {
	// A host pool's member belongs to no tenant, so the claimant's own
	// read would not find it: read it as the engine, then check it is
	// still a member of the pool being claimed from.
	sb, err := m.store.GetSandbox(ctx, store.AnyOwner, id)
	if errors.Is(err, errdefs.ErrNotFound) {
		return nil, errNotClaimable // removed since the pool was listed
	}
	if err != nil {
		return nil, err
	}
	if !m.ready(sb) || sb.Spec.Pool != pool.Template || sb.Tenant != pool.Tenant ||
		m.runtimeOf(sb) != spec.Runtime || !slices.Equal(sb.Spec.Layers, tpl.Layers) ||
		sb.Spec.Resources.DiskBytes != spec.Resources.DiskBytes { // made under another default
		return nil, errNotClaimable // claimed, removed or changed since the pool was listed
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
	if err := m.e.AdmitQuota(ctx, sb, func() error { return m.claimSteps(ctx, op, sb, &prev, opt) }); err != nil {
		return nil, err
	}
	return sb, nil
}

// claimSteps gives the member to its claimant. Each step pushes its undo:
// a claim that fails leaves the member in the pool exactly as it was
// (named as before, frozen or running). A member kept running (its class
// cannot freeze) is not thawed; its record is handed over, which writes
// the claimant's secret files as a transition to running would.
func (m *Warm) claimSteps(ctx context.Context, op *engine.Op, sb, prev *sandbox.Sandbox, opt engine.CreateOptions) error {
	cu := cleanup.Make()
	defer cu.Clean()
	// Thawed first, then renamed: a class that renames through a process
	// in the sandbox (gVisor: runsc exec) cannot while it is frozen. The
	// undo renames back before it freezes again.
	rename := func() error {
		if sb.Name == "" {
			return nil
		}
		rn, err := node.Need[node.Renamer](m.node, node.OpRename)
		if err == nil {
			err = rn.SetHostname(ctx, sb, sb.Hostname())
		}
		if err != nil {
			return fmt.Errorf("setting hostname: %w", err)
		}
		cu.Add(func() error { return rn.SetHostname(ctx, prev, prev.Hostname()) })
		return nil
	}
	if prev.State == sandbox.StateRunning {
		if err := rename(); err != nil {
			return err
		}
		if err := op.Handover(ctx, sb, sandbox.CauseUser, opt.Actor, "create (warm pool)"); err != nil {
			return err
		}
		cu.Release()
		return nil
	}
	fz, err := node.Need[node.Freezer](m.node, node.OpResume)
	if err == nil {
		err = fz.Thaw(ctx, sb)
	}
	if err != nil {
		return fmt.Errorf("thawing pool member: %w", err)
	}
	cu.Add(func() error { return fz.Freeze(ctx, prev) })
	if err := rename(); err != nil {
		return err
	}
	if err := op.Transition(ctx, sb, sandbox.StateRunning, sandbox.CauseUser, opt.Actor, "create (warm pool)"); err != nil {
		return err
	}
	cu.Release()
	return nil
}

// Refill creates members for pools below their size, replaces members
// made from an older version of their template, and removes ready
// members above the size (a pool made smaller). At most refillParallel
// members are made at a time, and each waits its turn in the start queue
// behind every caller's start, so a refill never starves creates. live is this node's
// live sandboxes, as the reconciler just read them: enough to find stale
// members, but not to count: a member whose record was written after that
// read and that finished before the count would be in neither the list
// nor the members in flight, and be made twice. So the count takes the
// ids in flight first and reads the members again after, and a member is
// counted once whichever (or both) it is in.
func (m *Warm) Refill(ctx context.Context, live []*sandbox.Sandbox) {
	m.refilling.Lock()
	defer m.refilling.Unlock()
	members := groupPoolMembers(live)
	if live == nil {
		var err error
		if members, err = m.poolMembers(ctx); err != nil {
			m.log.Warn("refilling warm pools: listing their members", "err", err)
			return
		}
	}
	set, err := m.store.ListPools(ctx)
	if err != nil {
		return
	}
	pools := m.sizes(set)
	if len(pools) == 0 && len(members) == 0 {
		return
	}
	for k, list := range members {
		tpl, terr := m.store.GetTenantTemplate(ctx, k.Tenant, k.Template)
		for _, sb := range list {
			if terr != nil || pools[k] == 0 || !slices.Equal(sb.Spec.Layers, tpl.Layers) {
				m.retire(sb, "warm pool rolled over")
			}
		}
	}
	// No pool left (the last made 0) still goes on: a member left
	// unfinished is no ready member to retire above, and only the pass
	// below removes it.
	m.mu.Lock()
	inFlight := map[store.PoolKey]map[string]bool{}
	for k, ids := range m.poolInFlight {
		inFlight[k] = maps.Clone(ids)
	}
	retiring := maps.Clone(m.retiring)
	m.mu.Unlock()
	if members, err = m.poolMembers(ctx); err != nil {
		m.log.Warn("refilling warm pools: listing their members", "err", err)
		return
	}
	// A member queued for removal whose record went before its turn
	// came (claimed, or destroyed otherwise) is forgotten.
	current := map[string]bool{}
	for _, list := range members {
		for _, sb := range list {
			current[sb.ID] = true
		}
	}
	m.mu.Lock()
	maps.DeleteFunc(m.retiring, func(id string, _ bool) bool { return !current[id] })
	m.mu.Unlock()
	// Members no one is making any more (a daemon killed between a
	// member's create and its pause left it running): finished into the
	// pool if it still wants them, else removed. Never counted as ready
	// until then, they would hold the pool's size for ever.
	for k, list := range members {
		tpl, terr := m.store.GetTenantTemplate(ctx, k.Tenant, k.Template)
		for _, sb := range list {
			if m.Stuck(sb) && !inFlight[k][sb.ID] && !retiring[sb.ID] {
				m.finish(sb, terr == nil && pools[k] > 0 && slices.Equal(sb.Spec.Layers, tpl.Layers))
			}
		}
	}
	for k, size := range pools {
		tpl, err := m.store.GetTenantTemplate(ctx, k.Tenant, k.Template)
		if err != nil {
			continue
		}
		counted := maps.Clone(inFlight[k])
		if counted == nil {
			counted = map[string]bool{}
		}
		var listed []*sandbox.Sandbox
		for _, sb := range members[k] {
			if !slices.Equal(sb.Spec.Layers, tpl.Layers) || retiring[sb.ID] || !becoming(sb) {
				continue // going: not counted, not chosen again
			}
			counted[sb.ID] = true
			listed = append(listed, sb)
		}
		// Above its size (made smaller): the oldest members are kept, the
		// newest go. A member still being made cannot be retired now; the
		// pass its completion kicks retires it if the pool is still too
		// large. (Choosing among the ready members alone would retire the
		// oldest ones while a member that was just paused, not yet out of
		// flight, stayed.)
		if len(counted) > size {
			slices.SortFunc(listed, compareAge)
			for _, sb := range listed[min(size, len(listed)):] {
				if m.ready(sb) && !inFlight[k][sb.ID] {
					m.retire(sb, "warm pool made smaller")
				}
			}
			continue
		}
		if m.stats(k).backingOff() {
			continue // the reconciler's next passes try again
		}
		m.mu.Lock()
		for have := len(counted); have < size && m.poolBuilding < m.refillParallel() && !m.e.Closing(); have++ {
			id := engine.NewID()
			m.poolBuilding++
			if m.poolInFlight[k] == nil {
				m.poolInFlight[k] = map[string]bool{}
			}
			m.poolInFlight[k][id] = true
			m.e.Go(func(ctx context.Context) {
				err := m.addPoolMember(ctx, tpl, id)
				m.stats(k).made(err)
				switch {
				case errors.Is(err, errdefs.ErrQuota):
					// A tenant's pool stops at its quota: the tenant's
					// choice, not a fault to shout about each round.
					m.log.Debug("warm pool held at the tenant's quota", "tenant", tpl.Tenant, "template", tpl.Name, "err", err)
				case err != nil:
					m.log.Warn("refilling warm pool", "tenant", tpl.Tenant, "template", tpl.Name, "sandbox", id, "err", err)
				}
				m.mu.Lock()
				m.poolBuilding--
				delete(m.poolInFlight[k], id)
				if len(m.poolInFlight[k]) == 0 {
					delete(m.poolInFlight, k)
				}
				m.mu.Unlock()
				m.kickRefill()
			})
		}
		m.mu.Unlock()
	}
}

// kickRefill asks for a refill pass soon, off the caller's path: after a
// claim and after each member made. A pass reads the pools' members only;
// the reconciler's full tick (every sandbox of the node) is not woken for
// it, so a burst of claims does not run one tick per claim. Kicks while a
// pass runs make one more pass.
func (m *Warm) kickRefill() {
	m.refillKick.Store(true)
	if m.e.Closing() || !m.refillRunning.CompareAndSwap(false, true) {
		return
	}
	m.e.Go(func(ctx context.Context) {
		m.awaitClaimsQuiet(ctx)
		for m.refillKick.Swap(false) {
			if _, ok := m.e.Config().NodeLease.Held(); !ok || ctx.Err() != nil {
				break // the node's work is another replica's, or the daemon stops
			}
			m.Refill(ctx, nil)
		}
		m.refillRunning.Store(false)
		if m.refillKick.Load() && ctx.Err() == nil {
			m.kickRefill() // a kick between the last pass and the flag
		}
	})
}

// A refill pass waits until no claim began or ended for claimQuiet: the
// claimant's first command runs before the member that replaces it is made, whose
// runtime start and mounts would take the CPU it needs. Claims one at a
// time (a trickle, a sequential client) hold the pass back one such pause
// at most; a burst (claims beside each other) holds it until the burst
// ends, at most refillHold (a burst of 100 on 2 cores). Measured times are
// the host's, not the engine's clock: a pause, not a deadline.
const (
	claimQuiet = 150 * time.Millisecond
	refillHold = time.Second
)

func (m *Warm) awaitClaimsQuiet(ctx context.Context) {
	start := time.Now()
	for {
		hold := claimQuiet
		if time.Since(time.Unix(0, m.lastBurst.Load())) < claimQuiet {
			hold = refillHold
		}
		wait := claimQuiet - time.Since(time.Unix(0, m.lastClaim.Load()))
		wait = min(wait, hold-time.Since(start))
		if wait <= 0 {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
	}
}

// refillParallel is how many members are made at once: a quarter of the
// node's starts at once, 2 to 8.
func (m *Warm) refillParallel() int {
	n := m.e.Config().MaxStarts
	if n <= 0 {
		return 4
	}
	return min(8, max(2, n/4))
}

// Stuck reports whether pool member sb waits in a state a member only
// passes through on its way into the pool (running where its class can
// freeze): whoever made it is gone unless it is in flight.
func (m *Warm) Stuck(sb *sandbox.Sandbox) bool {
	return sb.Spec.Pool != "" && sb.State == sandbox.StateRunning && m.e.Caps(sb).Freeze
}

// InFlight reports whether this daemon is making pool member id now.
func (m *Warm) InFlight(id string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, ids := range m.poolInFlight {
		if ids[id] {
			return true
		}
	}
	return false
}

// finish brings stuck member sb into its pool (paused: ready) when the
// pool wants it, else destroys it; in the background, if it is still
// stuck and unclaimed when its lock is free.
func (m *Warm) finish(sb *sandbox.Sandbox, want bool) {
	m.e.Async(sb.ID, func(ctx context.Context, op *engine.Op, cur *sandbox.Sandbox) {
		f, ok := m.e.Config().NodeLease.Held()
		if !ok || !m.Stuck(cur) || m.InFlight(cur.ID) {
			return
		}
		ctx = leader.Fenced(ctx, f)
		var err error
		if want {
			err = op.Pause(ctx, cur, sandbox.CauseReconciler, "pool:"+cur.Spec.Pool, "ready in warm pool (finished after an interruption)")
		} else {
			err = op.Destroy(ctx, cur, sandbox.CauseReconciler, actorReconciler, "warm pool member left unfinished, no longer wanted")
		}
		if err != nil {
			m.log.Warn("finishing a warm pool member left unfinished", "sandbox", cur.ID, "err", err)
		}
	})
}

// retire destroys ready pool member sb in the background, if it is still
// an unclaimed ready member when its turn comes.
func (m *Warm) retire(sb *sandbox.Sandbox, reason string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.ready(sb) || m.retiring[sb.ID] {
		return
	}
	m.retiring[sb.ID] = true
	done := func() {
		m.mu.Lock()
		delete(m.retiring, sb.ID)
		m.mu.Unlock()
	}
	if !m.e.Async(sb.ID, func(ctx context.Context, op *engine.Op, cur *sandbox.Sandbox) {
		defer done()
		// Fenced like the reconciler's own actions: a replica that lost
		// the node's lease while queued acts no more.
		f, ok := m.e.Config().NodeLease.Held()
		if !ok || cur.Spec.Pool == "" || !m.ready(cur) {
			return
		}
		_ = op.Destroy(leader.Fenced(ctx, f), cur, sandbox.CauseReconciler, actorReconciler, reason)
	}) {
		delete(m.retiring, sb.ID) // busy: the next pass tries again
	}
}

// becoming reports whether member sb is, or is on its way to being, a
// ready member: a retired one's record can still be read as deleting after
// its retirement was forgotten, and must not count against the size (the
// next pass would retire a ready member in its place).
func becoming(sb *sandbox.Sandbox) bool {
	switch sb.State {
	case sandbox.StateCreating, sandbox.StateRunning, sandbox.StatePaused:
		return true
	}
	return false
}

// compareAge orders pool members oldest first (their ids break ties).
func compareAge(a, b *sandbox.Sandbox) int {
	if c := a.CreatedAt.Compare(b.CreatedAt); c != 0 {
		return c
	}
	return strings.Compare(a.ID, b.ID)
}

// addPoolMember makes one ready sandbox for tpl: frozen, or running where
// its class cannot freeze.
func (m *Warm) addPoolMember(ctx context.Context, tpl *store.Template, id string) error {
	// A member once begun is finished (paused into the pool) or undone,
	// like a request's create: Close stops new members, not one half made.
	ctx = context.WithoutCancel(ctx)
	spec, err := engine.SpecFromRequest(&engine.CreateRequest{}, tpl)
	if err != nil {
		return err
	}
	spec.Layers, spec.HostUsr, spec.Pool = tpl.Layers, tpl.Config.HostUsr, tpl.Name
	spec.Runtime = m.e.DefaultRuntime()
	caps, _ := node.ClassCaps(m.node, spec.Runtime)
	if !caps.Pool {
		return errdefs.NotSupported("runtime class %s cannot keep warm-pool members", spec.Runtime)
	}
	if !caps.Freeze {
		// It waits running: an idle policy would act on a member that
		// is only waiting. A claim replaces the policy with its own.
		spec.Policy.IdleTimeout, spec.Policy.OnIdle = 0, sandbox.ActionNone
	}
	m.e.WithDiskDefault(&spec)
	now := m.e.Now()
	// A tenant's pool member is the tenant's (its quota counts it).
	sb := &sandbox.Sandbox{ID: id, Tenant: tpl.Tenant, State: sandbox.StateCreating, Node: m.e.Node(), Spec: spec,
		CreatedAt: now, UpdatedAt: now, Cause: sandbox.CauseReconciler, Reason: "warm pool"}
	// A create that failed undid itself (the engine's fail).
	if err := m.e.Launch(ctx, sb, "pool:"+tpl.Name, nil); err != nil {
		return err
	}
	// A member left here by a kill runs unfinished: a later Refill
	// finishes or removes it (finish). A step that fails removes it.
	op, unlock := m.e.Lock(sb.ID)
	defer unlock()
	err = failpoint.Inject("pool.refill.after-launch")
	var cur *sandbox.Sandbox
	if err == nil {
		if cur, err = m.store.GetSandbox(ctx, store.AnyOwner, sb.ID); err != nil {
			return err // no record to act on: left to finish, as after a kill
		}
		if cur.Spec.Pool == "" || cur.State != sandbox.StateRunning {
			return nil
		}
		// The pool may have shrunk or its template changed meanwhile.
		set, lerr := m.store.ListPools(ctx)
		latest, terr := m.store.GetTenantTemplate(ctx, tpl.Tenant, tpl.Name)
		if lerr != nil || terr != nil || m.sizes(set)[keyOf(tpl)] == 0 || !slices.Equal(latest.Layers, tpl.Layers) {
			return op.Destroy(ctx, cur, sandbox.CauseReconciler, actorReconciler, "warm pool no longer wants it")
		}
		if !caps.Freeze {
			return nil // ready as it runs (ready)
		}
		err = failpoint.Inject("pool.refill.before-pause")
		if err == nil {
			err = op.Pause(ctx, cur, sandbox.CauseReconciler, "pool:"+tpl.Name, "ready in warm pool")
		}
	}
	if err != nil {
		m.removeFailed(ctx, op, sb.ID, err)
	}
	return err
}

// removeFailed destroys pool member id, whose making failed after its
// create with err: a member half made is undone, the error its reason.
// The caller holds its lock.
func (m *Warm) removeFailed(ctx context.Context, op *engine.Op, id string, err error) {
	cur, gerr := m.store.GetSandbox(ctx, store.AnyOwner, id)
	if gerr != nil || cur.State == sandbox.StateDeleted {
		return // gone, or no record to act on: a later refill finishes it
	}
	reason := "warm pool member not made: " + err.Error()
	if derr := op.Destroy(ctx, cur, sandbox.CauseReconciler, actorReconciler, reason); derr != nil {
		m.log.Warn("removing a warm pool member that failed", "sandbox", id, "err", derr)
	}
}
