package manager

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/internal/sandbox"
	"github.com/berth-sh/berth/internal/store"
)

// Warm pools keep, per template, a number of ready sandboxes: created
// ahead, then frozen (no CPU). A create that fits a pool's template and
// defaults claims one instead of starting a container: it is thawed and
// given the claimant's name, hostname, env, labels, timeout and policies.
// Pool members are never handed out twice and never returned: a claimed
// sandbox is an ordinary sandbox, destroyed at its end. Members whose
// template has changed are replaced.

// MaxPoolSize bounds a template's pool.
const MaxPoolSize = 256

type poolStats struct{ hits, misses atomic.Int64 }

func (m *Manager) stats(tpl string) *poolStats {
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
func (m *Manager) SetPool(ctx context.Context, name string, min int) (*api.Pool, error) {
	if min < 0 || min > MaxPoolSize {
		return nil, errdefs.Invalid("pool size must be between 0 and %d", MaxPoolSize)
	}
	if _, err := m.GetTemplate(ctx, name); err != nil {
		return nil, err
	}
	if err := m.store.SetPool(ctx, name, min); err != nil {
		return nil, err
	}
	m.wakeReconciler()
	return m.Pool(ctx, name)
}

// Pool reports template name's pool.
func (m *Manager) Pool(ctx context.Context, name string) (*api.Pool, error) {
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
func (m *Manager) Pools(ctx context.Context) ([]api.Pool, error) {
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
	out := make([]api.Pool, 0, len(names))
	for _, n := range names {
		out = append(out, *m.poolReport(n, pools[n], members[n]))
	}
	return out, nil
}

func (m *Manager) poolReport(name string, min int, members []*sandbox.Sandbox) *api.Pool {
	p := &api.Pool{Template: name, Min: min}
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
func (m *Manager) poolMembers(ctx context.Context) (map[string][]*sandbox.Sandbox, error) {
	live, _, err := m.store.ListSandboxes(ctx, store.SandboxFilter{Owner: store.AnyOwner, Node: m.cfg.Node}, store.Page{})
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
// everything fixed at container start (the disk cap included).
func poolable(req *api.CreateSandboxRequest, tpl *store.Template, spec *sandbox.Spec, diskDefault int64) bool {
	def := sandbox.DefaultResources
	if tpl.Config.Resources != nil {
		def = *tpl.Config.Resources
	}
	if def.DiskBytes == 0 {
		def.DiskBytes = diskDefault // as members are made (addPoolMember)
	}
	return !req.Persistent && len(spec.Volumes) == 0 && req.Snapshot == "" &&
		spec.Resources == def && (spec.Network == "" || spec.Network == "none") &&
		(req.Runtime == "" || req.Runtime == "runc")
}

// claim hands out a ready pool member of tpl as the sandbox the request
// asks for, or returns nil if there is none.
func (m *Manager) claim(ctx context.Context, tpl *store.Template, spec sandbox.Spec, req *api.CreateSandboxRequest, opt CreateOptions) (*sandbox.Sandbox, error) {
	pools, err := m.store.ListPools(ctx)
	if err != nil || pools[tpl.Name] == 0 {
		return nil, err
	}
	members, err := m.poolMembers(ctx)
	if err != nil {
		return nil, err
	}
	defer m.wakeReconciler() // refill
	for _, cand := range members[tpl.Name] {
		if cand.State != sandbox.StatePaused || !slices.Equal(cand.Spec.Layers, tpl.Layers) ||
			cand.Spec.Resources.DiskBytes != spec.Resources.DiskBytes { // made under another default
			continue
		}
		unlock, ok := m.locks.TryLock(cand.ID)
		if !ok {
			continue // another claim or the reconciler has it
		}
		sb, err := m.claimLocked(ctx, cand.ID, spec, req, opt)
		unlock()
		if err != nil {
			if errors.Is(err, errdefs.ErrConflict) && req.Name != "" && strings.Contains(err.Error(), "named") {
				return nil, err // the name is taken: no member will do
			}
			m.log.Warn("pool claim failed", "sandbox", cand.ID, "err", err)
			continue
		}
		m.stats(tpl.Name).hits.Add(1)
		return sb, nil
	}
	m.stats(tpl.Name).misses.Add(1)
	return nil, nil
}

func (m *Manager) claimLocked(ctx context.Context, id string, spec sandbox.Spec, req *api.CreateSandboxRequest, opt CreateOptions) (*sandbox.Sandbox, error) {
	sb, err := m.store.GetSandbox(ctx, store.AnyOwner, id)
	if err != nil {
		return nil, err
	}
	if sb.State != sandbox.StatePaused || sb.Spec.Pool == "" {
		return nil, errdefs.Conflict("pool member %s was taken", id)
	}
	// The claimant's identity and settings; what the container was started
	// with (layers, resources, host /usr) is the member's and equal.
	spec.Layers, spec.HostUsr = sb.Spec.Layers, sb.Spec.HostUsr
	spec.IDs = sb.Spec.IDs // its processes run in the member's range
	spec.Pool = ""
	now := m.now()
	prev := *sb
	sb.Spec = spec
	sb.Name, sb.Tenant = req.Name, opt.Tenant
	sb.CreatedAt, sb.StartedAt, sb.LastActivityAt = now, now, now
	if opt.Reserve != nil {
		if err := opt.Reserve(sb.ID); err != nil {
			return nil, err
		}
	}
	if sb.Name != "" {
		if err := m.setHostname(sb.ID, sb.Hostname()); err != nil {
			return nil, fmt.Errorf("setting hostname: %w", err)
		}
	}
	if err := m.rtFor(sb).Resume(ctx, sb.ID); err != nil {
		return nil, fmt.Errorf("thawing pool member: %w", err)
	}
	if err := m.transition(ctx, sb, sandbox.StateRunning, sandbox.CauseUser, opt.Actor, "create (warm pool)"); err != nil {
		// Not handed out: back to the pool as it was.
		_ = m.rtFor(&prev).Pause(ctx, prev.ID)
		if prev.Name == "" {
			_ = m.setHostname(prev.ID, prev.Hostname())
		}
		return nil, err
	}
	return sb, nil
}

// setHostname changes a running sandbox's host name inside its UTS
// namespace (the sandbox itself lacks the privilege to).
func (m *Manager) setHostname(id, name string) error {
	b, err := os.ReadFile(filepath.Join(m.paths(id).bundle, "init.pid"))
	if err != nil {
		return err
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return err
	}
	out, err := exec.Command("nsenter", "--target", strconv.Itoa(pid), "--uts", "--", "hostname", name).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%w: %s", err, strings.TrimSpace(string(out)))
	}
	return nil
}

// refillPools creates members for pools below their size and replaces
// members made from an older version of their template. At most two
// members are made at a time, so a refill never starves claims.
// live is this node's live sandboxes, as the reconciler just read them.
func (m *Manager) refillPools(ctx context.Context, live []*sandbox.Sandbox) {
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
				m.async(sb.ID, func(ctx context.Context, cur *sandbox.Sandbox) {
					if cur.Spec.Pool != "" {
						_ = m.destroyLocked(ctx, cur, sandbox.CauseReconciler, actorReconciler, "warm pool rolled over")
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
		for i := have; i < min && m.poolBuilding < 2; i++ {
			m.poolBuilding++
			m.poolInFlight[name]++
			m.wg.Add(1)
			go func() {
				defer m.wg.Done()
				if err := m.addPoolMember(context.Background(), tpl); err != nil {
					m.log.Warn("refilling warm pool", "template", tpl.Name, "err", err)
				}
				m.mu.Lock()
				m.poolBuilding--
				m.poolInFlight[tpl.Name]--
				m.mu.Unlock()
				m.wakeReconciler()
			}()
		}
		m.mu.Unlock()
	}
}

// addPoolMember makes one frozen, ready sandbox for tpl.
func (m *Manager) addPoolMember(ctx context.Context, tpl *store.Template) error {
	spec, err := SpecFromRequest(&api.CreateSandboxRequest{}, tpl)
	if err != nil {
		return err
	}
	spec.Layers, spec.HostUsr, spec.Pool = tpl.Layers, tpl.Config.HostUsr, tpl.Name
	m.withDiskDefault(&spec)
	now := m.now()
	sb := &sandbox.Sandbox{ID: newID(), State: sandbox.StateCreating, Node: m.cfg.Node, Spec: spec,
		CreatedAt: now, UpdatedAt: now, Cause: sandbox.CauseReconciler, Reason: "warm pool"}
	if err := m.launch(ctx, sb, "pool:"+tpl.Name, nil); err != nil {
		return err
	}
	unlock := m.locks.Lock(sb.ID)
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
		return m.destroyLocked(ctx, cur, sandbox.CauseReconciler, actorReconciler, "warm pool no longer wants it")
	}
	return m.pauseLocked(ctx, cur, sandbox.CauseReconciler, "pool:"+tpl.Name, "ready in warm pool")
}
