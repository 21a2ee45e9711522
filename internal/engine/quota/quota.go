// Package quota admits a tenant's sandboxes, volumes and imports against
// its quota: the create rate, live sandboxes, CPUs, memory and storage,
// counted under one lock per tenant (and the store's, across daemons on
// one database), and charges imports and builds to its storage as they
// unpack. The engine holds one Admission and asks it before every write
// that adds to a tenant's use.
package quota

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
	"github.com/berth-sh/berth/internal/image"
	"github.com/berth-sh/berth/internal/sandbox"
	"github.com/berth-sh/berth/internal/store"
)

// Config is what admission reads from the engine.
type Config struct {
	Store  store.Store
	Images *image.Store // nil: no imports to charge
	// Default is a named tenant's quota when it has no row of its own.
	Default store.TenantQuota
	// Trivial reports whether this daemon is alone on its store (the
	// admission's locks may then be let go before the write).
	Trivial func() bool
	// Storage is the disk a sandbox of spec may grow to.
	Storage func(sp *sandbox.Spec) int64
	Now     func() time.Time
}

// New returns the admission of cfg.
func New(cfg Config) *Admission { return &Admission{cfg: cfg} }

// RetryAfter is the Retry-After of a count limit (sandboxes, CPUs,
// memory, storage): such a limit frees only when the tenant deletes or
// stops something, so it is a polling interval, not a promise.
const RetryAfter = 5 * time.Second

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

// Admission is the engine's admission state: one lock per tenant, held
// from the usage count to the record insert so that concurrent creates
// cannot overshoot, the create-rate buckets, each tenant's running import
// and the admitted sandboxes whose writes still run.
type Admission struct {
	cfg      Config
	mu       sync.Mutex
	locks    map[string]*sync.Mutex
	buckets  map[string]*bucket
	imports  map[string]*importSlot      // importcharge.go
	reserved map[string]map[string]Usage // tenant → sandbox id → admitted, its write still running
}

// reserve records n as admitted for sandbox id of tenant until release:
// the count sees it whether or not its record is written yet.
func (q *Admission) reserve(tenant, id string, n Usage) {
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

func (q *Admission) release(tenant, id string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	delete(q.reserved[tenant], id)
	if len(q.reserved[tenant]) == 0 {
		delete(q.reserved, tenant)
	}
}

// reservations is a copy of tenant's admitted sandboxes whose writes run.
func (q *Admission) reservations(tenant string) map[string]Usage {
	q.mu.Lock()
	defer q.mu.Unlock()
	return maps.Clone(q.reserved[tenant])
}

type bucket struct {
	rate, burst int64
	lim         *rate.Limiter
}

func (q *Admission) lock(tenant string) *sync.Mutex {
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
func (q *Admission) createLimiter(tenant string, perMinute, burst int64) *rate.Limiter {
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
func (m *Admission) Quota(ctx context.Context, tenant string) (*store.TenantQuota, error) {
	q, err := m.cfg.Store.GetTenantQuota(ctx, tenant)
	if err == nil {
		return q, nil
	}
	if !errors.Is(err, errdefs.ErrNotFound) {
		return nil, err
	}
	def := store.TenantQuota{Tenant: tenant}
	if tenant != "" {
		def = m.cfg.Default
		def.Tenant = tenant
	}
	return &def, nil
}

// SetQuota stores a tenant's quota.
func (m *Admission) SetQuota(ctx context.Context, q *store.TenantQuota) error {
	q.UpdatedAt = m.cfg.Now()
	return m.cfg.Store.PutTenantQuota(ctx, q)
}

// TenantUsage counts what the tenant's live sandboxes (its own warm-pool
// members among them: a tenant's pool is of its own sandboxes; the host's
// pool members belong to no tenant), live volumes and template layers
// hold (templateStorage), with what its running import has unpacked so
// far; skip is left out (the sandbox being admitted, when it is already
// recorded elsewhere, e.g. a pool member).
func (m *Admission) TenantUsage(ctx context.Context, tenant, skip string) (Usage, error) {
	var u Usage
	// Admitted sandboxes whose writes still run count as admitted, once,
	// whether or not their record is written yet. They are read before
	// the records: one released in between was written before its
	// release, so the records read after it hold it.
	reserved := m.reservations(tenant)
	sbs, _, err := m.cfg.Store.ListSandboxes(ctx, store.SandboxFilter{Owner: store.OwnedBy(tenant)}, store.Page{})
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
	vols, _, err := m.cfg.Store.ListVolumes(ctx, store.VolumeFilter{Owner: store.OwnedBy(tenant)}, store.Page{})
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
	u.Storage += tpl + m.importing(tenant)
	return u, nil
}

func (u *Usage) add(n Usage) {
	u.Sandboxes += n.Sandboxes
	u.CPUMillis += n.CPUMillis
	u.Memory += n.Memory
	u.Storage += n.Storage
}

// need is what one sandbox of spec holds against a quota.
func (m *Admission) need(sp *sandbox.Spec) Usage {
	return Usage{Sandboxes: 1, CPUMillis: int64(math.Ceil(sp.Resources.CPUs * 1000)),
		Memory: sp.Resources.MemoryBytes, Storage: m.cfg.Storage(sp)}
}

// AdmitSandbox runs write (the insert of sb's record, or the claim that
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
func (m *Admission) AdmitSandbox(ctx context.Context, sb *sandbox.Sandbox, write func() error) error {
	if sb.Spec.Pool != "" {
		if sb.Tenant == "" {
			return write()
		}
		return m.admitNeed(ctx, sb.Tenant, sb.ID, m.need(&sb.Spec), false, write)
	}
	return m.admitNeed(ctx, sb.Tenant, sb.ID, m.need(&sb.Spec), true, write)
}

// AdmitVolume runs write (the record of a new named volume of size bytes)
// only when it fits in the tenant's storage quota, under its lock.
func (m *Admission) AdmitVolume(ctx context.Context, tenant string, size int64, write func() error) error {
	return m.admitNeed(ctx, tenant, "", Usage{Storage: size}, false, write)
}

// admitNeed is the admission of n more for tenant (skip: a record left
// out of the count); rated: it is a sandbox create, under the create rate.
// Only the limits n adds to are checked, so a volume is not refused for a
// sandbox count over a lowered limit.
func (m *Admission) admitNeed(ctx context.Context, tenant, skip string, n Usage, rated bool, write func() error) error {
	q, err := m.Quota(ctx, tenant)
	if err != nil {
		return err
	}
	if q.MaxSandboxes == 0 && q.MaxCPUMillis == 0 && q.MaxMemory == 0 && q.MaxStorage == 0 && (q.CreateRate == 0 || !rated) {
		return write() // no limit applies
	}
	l := m.lock(tenant)
	l.Lock()
	locked := true
	defer func() {
		if locked {
			l.Unlock()
		}
	}()
	// The in-process lock queues this daemon's creates; the store's lock
	// serialises them with other daemons sharing the database.
	unlock, err := m.cfg.Store.LockTenant(ctx, tenant)
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
		res = m.createLimiter(tenant, q.CreateRate, CreateBurst(q)).ReserveN(now, 1)
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
		return refuse(errdefs.QuotaExceeded(RetryAfter, "tenant %s: %d of %d concurrent sandboxes in use", name, u.Sandboxes, q.MaxSandboxes))
	case n.CPUMillis > 0 && q.MaxCPUMillis > 0 && u.CPUMillis+n.CPUMillis > q.MaxCPUMillis:
		return refuse(errdefs.QuotaExceeded(RetryAfter, "tenant %s: %s of %s CPUs in use, this sandbox asks %s",
			name, cpus(u.CPUMillis), cpus(q.MaxCPUMillis), cpus(n.CPUMillis)))
	case n.Memory > 0 && q.MaxMemory > 0 && u.Memory+n.Memory > q.MaxMemory:
		return refuse(errdefs.QuotaExceeded(RetryAfter, "tenant %s: %s of %s memory in use, this sandbox asks %s",
			name, sandbox.FormatBytes(u.Memory), sandbox.FormatBytes(q.MaxMemory), sandbox.FormatBytes(n.Memory)))
	case n.Storage > 0 && q.MaxStorage > 0 && u.Storage+n.Storage > q.MaxStorage:
		return refuse(errdefs.QuotaExceeded(RetryAfter, "tenant %s: %s of %s storage reserved, %s asks %s",
			name, sandbox.FormatBytes(u.Storage), sandbox.FormatBytes(q.MaxStorage), what, sandbox.FormatBytes(n.Storage)))
	}
	// A daemon alone on its store admits a sandbox by reservation: the
	// locks are let go before write (a claim's thaw and transition, a
	// record insert), so one tenant's creates are counted one at a time
	// but written side by side. Daemons sharing a store (PostgreSQL, a
	// store lease) hold both locks through write: another daemon sees an
	// admission only in the store.
	if skip != "" && m.cfg.Trivial() {
		m.reserve(tenant, skip, n)
		defer m.release(tenant, skip)
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

// importSlot is a tenant's one running import or build commit: its turn
// (imports of one tenant run one at a time, so two of them cannot each
// spend the same storage left) and its account, which TenantUsage counts
// while it runs.
type importSlot struct {
	turn   chan struct{} // holds one token while an import runs
	budget *image.Budget
}

func (q *Admission) slot(tenant string) *importSlot {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.imports == nil {
		q.imports = map[string]*importSlot{}
	}
	s := q.imports[tenant]
	if s == nil {
		s = &importSlot{turn: make(chan struct{}, 1)}
		q.imports[tenant] = s
	}
	return s
}

// importing is what the tenant's running import has unpacked so far.
func (q *Admission) importing(tenant string) int64 {
	q.mu.Lock()
	defer q.mu.Unlock()
	if s := q.imports[tenant]; s != nil && s.budget != nil {
		return s.budget.Used()
	}
	return 0
}

// ChargeImport opens the storage account of an import, pull or build
// commit by ctx's caller and returns ctx carrying it (image.WithBudget);
// call done when the template is recorded or the import failed: it reports
// whether the import unpacked any layer (which a failed one may have left
// unrecorded). A
// tenant's layers are charged to its storage quota as they unpack, never
// after: the import may add at most the quota minus TenantUsage at its
// start (a build's sandboxes are admitted on their own, counting what the
// import unpacked so far), and a cached layer is reused unread only when the tenant already holds
// it or the shared catalogue does. The host's imports are bound by the
// store's own caps only and trust the cache.
func (m *Admission) ChargeImport(ctx context.Context, tenant string) (context.Context, func() bool, error) {
	if m.cfg.Images == nil {
		return ctx, func() bool { return false }, nil
	}
	if tenant == "" {
		b := m.cfg.Images.Budget(image.Charge{Bytes: -1, TrustCache: true})
		return image.WithBudget(ctx, b), func() bool { b.Close(); return b.Unpacked() }, nil
	}
	slot := m.slot(tenant)
	select {
	case slot.turn <- struct{}{}:
	case <-ctx.Done():
		return nil, nil, ctx.Err()
	}
	release := func() { <-slot.turn }
	q, err := m.Quota(ctx, tenant)
	if err != nil {
		release()
		return nil, nil, err
	}
	u, err := m.TenantUsage(ctx, tenant, "")
	if err != nil {
		release()
		return nil, nil, err
	}
	own, shared, err := m.templateLayers(ctx, tenant)
	if err != nil {
		release()
		return nil, nil, err
	}
	c := image.Charge{Bytes: -1}
	for l := range own {
		c.Reuse = append(c.Reuse, l)
	}
	for l := range shared {
		c.Reuse = append(c.Reuse, l)
	}
	if q.MaxStorage > 0 {
		c.Bytes = max(0, q.MaxStorage-u.Storage)
		c.Exceeded = func(left int64) error {
			return errdefs.QuotaExceeded(RetryAfter, "tenant %s: %s of %s storage in use; this template needs more than the %s left",
				tenant, sandbox.FormatBytes(u.Storage), sandbox.FormatBytes(q.MaxStorage), sandbox.FormatBytes(c.Bytes))
		}
	}
	b := m.cfg.Images.Budget(c)
	m.mu.Lock()
	slot.budget = b
	m.mu.Unlock()
	done := func() bool {
		m.mu.Lock()
		if slot.budget == b {
			slot.budget = nil
			b.Close()
			release()
		}
		m.mu.Unlock()
		return b.Unpacked()
	}
	return image.WithBudget(ctx, b), done, nil
}

// templateLayers returns the layers of tenant's own templates and those of
// the shared catalogue (which no tenant is charged for).
func (m *Admission) templateLayers(ctx context.Context, tenant string) (own, shared map[string]bool, err error) {
	own, shared = map[string]bool{}, map[string]bool{}
	sh, _, err := m.cfg.Store.ListTemplates(ctx, store.Page{})
	if err != nil {
		return nil, nil, err
	}
	for _, t := range sh {
		for _, l := range t.Layers {
			shared[l] = true
		}
	}
	if tenant == "" {
		return own, shared, nil
	}
	ts, _, err := m.cfg.Store.ListTenantTemplates(ctx, tenant, store.Page{})
	if err != nil {
		return nil, nil, err
	}
	for _, t := range ts {
		if t.Tenant != tenant {
			continue
		}
		for _, l := range t.Layers {
			if !shared[l] {
				own[l] = true
			}
		}
	}
	return own, shared, nil
}

// templateStorage is what tenant's templates hold on disk against its
// quota: each layer of its own templates once (image.Store.Billed: its
// file bytes and a tar header's size a member, as its import was charged), but
// not of the shared catalogue's layers its templates build on. A layer
// another tenant holds too is charged to both: whether one does is not
// the tenant's to learn.
func (m *Admission) templateStorage(ctx context.Context, tenant string) (int64, error) {
	if tenant == "" || m.cfg.Images == nil {
		return 0, nil
	}
	own, _, err := m.templateLayers(ctx, tenant)
	if err != nil {
		return 0, err
	}
	var n int64
	for l := range own {
		n += max(m.cfg.Images.Billed(l), 0)
	}
	return n, nil
}
