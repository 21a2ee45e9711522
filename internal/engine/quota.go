package engine

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"sync"
	"time"

	"golang.org/x/time/rate"

	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/internal/sandbox"
	"github.com/berth-sh/berth/internal/store"
)

// QuotaRetryAfter is the Retry-After of a count limit (sandboxes, CPUs,
// memory, storage): such a limit frees only when the tenant deletes or
// stops something, so it is a polling interval, not a promise.
const QuotaRetryAfter = 5 * time.Second

// Usage is what a tenant's live sandboxes and volumes hold against its
// quota (reserved sizes, not what is used on disk).
type Usage struct {
	Sandboxes int64
	CPUMillis int64
	Memory    int64
	// Storage is the disk caps of live sandboxes, the sizes of live
	// volumes, the unpacked layers of the tenant's own templates and what
	// its running import has unpacked so far.
	Storage int64
}

// quotas is the engine's admission state: one lock per tenant, held from
// the usage count to the record insert so that concurrent creates cannot
// overshoot, and the create-rate buckets.
type quotas struct {
	mu       sync.Mutex
	locks    map[string]*sync.Mutex
	buckets  map[string]*bucket
	imports  map[string]*importSlot      // storage.go
	reserved map[string]map[string]Usage // tenant → sandbox id → admitted, its write still running
}

// reserve records n as admitted for sandbox id of tenant until release:
// the count sees it whether or not its record is written yet.
func (q *quotas) reserve(tenant, id string, n Usage) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.reserved == nil {
		q.reserved = map[string]map[string]Usage{}
	}
	if q.reserved[tenant] == nil {
		q.reserved[tenant] = map[string]Usage{}
	}
	q.reserved[tenant][id] = n
}

func (q *quotas) release(tenant, id string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	delete(q.reserved[tenant], id)
	if len(q.reserved[tenant]) == 0 {
		delete(q.reserved, tenant)
	}
}

// reservations is a copy of tenant's admitted sandboxes whose writes run.
func (q *quotas) reservations(tenant string) map[string]Usage {
	q.mu.Lock()
	defer q.mu.Unlock()
	return maps.Clone(q.reserved[tenant])
}

type bucket struct {
	rate, burst int64
	lim         *rate.Limiter
}

func (q *quotas) lock(tenant string) *sync.Mutex {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.locks == nil {
		q.locks = map[string]*sync.Mutex{}
	}
	l := q.locks[tenant]
	if l == nil {
		l = &sync.Mutex{}
		q.locks[tenant] = l
	}
	return l
}

// createLimiter is the tenant's create-rate bucket, remade when the quota
// changed (which refills it).
func (q *quotas) createLimiter(tenant string, perMinute, burst int64) *rate.Limiter {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.buckets == nil {
		q.buckets = map[string]*bucket{}
	}
	if b := q.buckets[tenant]; b != nil && b.rate == perMinute && b.burst == burst {
		return b.lim
	}
	lim := rate.NewLimiter(rate.Limit(float64(perMinute)/60), int(burst))
	q.buckets[tenant] = &bucket{rate: perMinute, burst: burst, lim: lim}
	return lim
}

// CreateBurst is a quota's create burst: its own, else max(1, the rate).
func CreateBurst(q *store.TenantQuota) int64 {
	if q.CreateBurst > 0 {
		return q.CreateBurst
	}
	return max(1, q.CreateRate)
}

// Quota returns the tenant's quota: its row, else the daemon's default
// (Config.DefaultQuota) for a named tenant; the host admin's tenant ("")
// has none unless it has a row.
func (m *Engine) Quota(ctx context.Context, tenant string) (*store.TenantQuota, error) {
	q, err := m.store.GetTenantQuota(ctx, tenant)
	if err == nil {
		return q, nil
	}
	if !errors.Is(err, errdefs.ErrNotFound) {
		return nil, err
	}
	def := store.TenantQuota{Tenant: tenant}
	if tenant != "" {
		def = m.cfg.DefaultQuota
		def.Tenant = tenant
	}
	return &def, nil
}

// SetQuota stores a tenant's quota.
func (m *Engine) SetQuota(ctx context.Context, q *store.TenantQuota) error {
	q.UpdatedAt = m.now()
	return m.store.PutTenantQuota(ctx, q)
}

// TenantUsage counts what the tenant's live sandboxes (its own warm-pool
// members among them: a tenant's pool is of its own sandboxes; the host's
// pool members belong to no tenant), live volumes and template layers
// hold (templateStorage), with what its running import has unpacked so
// far; skip is left out (the sandbox being admitted, when it is already
// recorded elsewhere, e.g. a pool member).
func (m *Engine) TenantUsage(ctx context.Context, tenant, skip string) (Usage, error) {
	var u Usage
	// Admitted sandboxes whose writes still run count as admitted, once,
	// whether or not their record is written yet. They are read before
	// the records: one released in between was written before its
	// release, so the records read after it hold it.
	reserved := m.quota.reservations(tenant)
	sbs, _, err := m.store.ListSandboxes(ctx, store.SandboxFilter{Owner: store.OwnedBy(tenant)}, store.Page{})
	if err != nil {
		return u, err
	}
	for id, n := range reserved {
		if id != skip {
			u.add(n)
		}
	}
	owned := map[string]bool{}
	for _, sb := range sbs {
		if !sb.State.Live() || sb.Spec.Pool != "" && sb.Tenant == "" || sb.ID == skip {
			continue
		}
		if _, ok := reserved[sb.ID]; ok {
			continue
		}
		u.add(m.need(&sb.Spec))
		for _, vm := range sb.Spec.Volumes {
			if vm.Owned {
				owned[vm.VolumeID] = true
			}
		}
	}
	vols, _, err := m.store.ListVolumes(ctx, store.VolumeFilter{Owner: store.OwnedBy(tenant)}, store.Page{})
	if err != nil {
		return u, err
	}
	for _, v := range vols {
		if !owned[v.ID] && v.DeletedAt.IsZero() {
			u.Storage += v.SizeBytes
		}
	}
	tpl, err := m.templateStorage(ctx, tenant)
	if err != nil {
		return u, err
	}
	u.Storage += tpl + m.quota.importing(tenant)
	return u, nil
}

func (u *Usage) add(n Usage) {
	u.Sandboxes += n.Sandboxes
	u.CPUMillis += n.CPUMillis
	u.Memory += n.Memory
	u.Storage += n.Storage
}

// need is what one sandbox of spec holds against a quota.
func (m *Engine) need(sp *sandbox.Spec) Usage {
	return Usage{Sandboxes: 1, CPUMillis: int64(math.Ceil(sp.Resources.CPUs * 1000)),
		Memory: sp.Resources.MemoryBytes, Storage: m.sandboxNeed(sp)}
}

// admitQuota runs write (the insert of sb's record, or the claim that
// gives a pool member to sb's tenant) only when sb fits in its tenant's
// quota: the create rate, then live sandboxes, CPUs, memory and storage
// counted with sb. The tenant's lock (in-process, then the store's
// LockTenant, which spans every daemon on the database) is held from the
// count to the end of write, so concurrent creates are admitted one at a
// time and never overshoot. A refusal is 429 quota_exceeded naming the limit,
// with Retry-After; nothing was written. The host's pool members belong
// to no tenant and are not counted; a tenant's pool members are its own,
// counted like its other sandboxes (but not under its create rate: the
// reconciler makes them, not a request).
func (m *Engine) admitQuota(ctx context.Context, sb *sandbox.Sandbox, write func() error) error {
	if sb.Spec.Pool != "" {
		if sb.Tenant == "" {
			return write()
		}
		return m.admitNeed(ctx, sb.Tenant, sb.ID, m.need(&sb.Spec), false, write)
	}
	return m.admitNeed(ctx, sb.Tenant, sb.ID, m.need(&sb.Spec), true, write)
}

// admitVolume runs write (the record of a new named volume of size bytes)
// only when it fits in the tenant's storage quota, under its lock.
func (m *Engine) admitVolume(ctx context.Context, tenant string, size int64, write func() error) error {
	return m.admitNeed(ctx, tenant, "", Usage{Storage: size}, false, write)
}

// admitNeed is the admission of n more for tenant (skip: a record left
// out of the count); rated: it is a sandbox create, under the create rate.
// Only the limits n adds to are checked, so a volume is not refused for a
// sandbox count over a lowered limit.
func (m *Engine) admitNeed(ctx context.Context, tenant, skip string, n Usage, rated bool, write func() error) error {
	q, err := m.Quota(ctx, tenant)
	if err != nil {
		return err
	}
	if q.MaxSandboxes == 0 && q.MaxCPUMillis == 0 && q.MaxMemory == 0 && q.MaxStorage == 0 && (q.CreateRate == 0 || !rated) {
		return write() // no limit applies
	}
	l := m.quota.lock(tenant)
	l.Lock()
	locked := true
	defer func() {
		if locked {
			l.Unlock()
		}
	}()
	// The in-process lock queues this daemon's creates; the store's lock
	// serialises them with other daemons sharing the database.
	unlock, err := m.store.LockTenant(ctx, tenant)
	if err != nil {
		return err
	}
	defer unlock()
	name := tenant
	if name == "" {
		name = "(host admin)"
	}
	var res *rate.Reservation
	if rated && q.CreateRate > 0 {
		now := time.Now()
		res = m.quota.createLimiter(tenant, q.CreateRate, CreateBurst(q)).ReserveN(now, 1)
		if d := res.DelayFrom(now); !res.OK() || d > 0 {
			res.CancelAt(now)
			return errdefs.QuotaExceeded(d, "tenant %s: create rate of %d a minute (burst %d) exceeded; retry in %s",
				name, q.CreateRate, CreateBurst(q), d.Round(time.Second))
		}
	}
	refuse := func(err error) error {
		if res != nil {
			res.Cancel()
		}
		return err
	}
	u, err := m.TenantUsage(ctx, tenant, skip)
	if err != nil {
		return refuse(err)
	}
	what := "this sandbox"
	if n.Sandboxes == 0 {
		what = "this volume"
	}
	switch {
	case n.Sandboxes > 0 && q.MaxSandboxes > 0 && u.Sandboxes+n.Sandboxes > q.MaxSandboxes:
		return refuse(errdefs.QuotaExceeded(QuotaRetryAfter, "tenant %s: %d of %d concurrent sandboxes in use", name, u.Sandboxes, q.MaxSandboxes))
	case n.CPUMillis > 0 && q.MaxCPUMillis > 0 && u.CPUMillis+n.CPUMillis > q.MaxCPUMillis:
		return refuse(errdefs.QuotaExceeded(QuotaRetryAfter, "tenant %s: %s of %s CPUs in use, this sandbox asks %s",
			name, cpus(u.CPUMillis), cpus(q.MaxCPUMillis), cpus(n.CPUMillis)))
	case n.Memory > 0 && q.MaxMemory > 0 && u.Memory+n.Memory > q.MaxMemory:
		return refuse(errdefs.QuotaExceeded(QuotaRetryAfter, "tenant %s: %s of %s memory in use, this sandbox asks %s",
			name, sandbox.FormatBytes(u.Memory), sandbox.FormatBytes(q.MaxMemory), sandbox.FormatBytes(n.Memory)))
	case n.Storage > 0 && q.MaxStorage > 0 && u.Storage+n.Storage > q.MaxStorage:
		return refuse(errdefs.QuotaExceeded(QuotaRetryAfter, "tenant %s: %s of %s storage reserved, %s asks %s",
			name, sandbox.FormatBytes(u.Storage), sandbox.FormatBytes(q.MaxStorage), what, sandbox.FormatBytes(n.Storage)))
	}
	// A daemon alone on its store admits a sandbox by reservation: the
	// locks are let go before write (a claim's thaw and transition, a
	// record insert), so one tenant's creates are counted one at a time
	// but written side by side. Daemons sharing a store (PostgreSQL, a
	// store lease) hold both locks through write: another daemon sees an
	// admission only in the store.
	if skip != "" && m.cfg.StoreLease.Status().Trivial {
		m.quota.reserve(tenant, skip, n)
		defer m.quota.release(tenant, skip)
		unlock()
		l.Unlock()
		locked = false
	}
	if err := write(); err != nil {
		return refuse(err)
	}
	return nil
}

func cpus(milli int64) string { return fmt.Sprintf("%g", float64(milli)/1000) }
