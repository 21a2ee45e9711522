package engine

import (
	"context"

	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/internal/image"
	"github.com/berth-sh/berth/internal/sandbox"
	"github.com/berth-sh/berth/internal/store"
)

// importSlot is a tenant's one running import or build commit: its turn
// (imports of one tenant run one at a time, so two of them cannot each
// spend the same storage left) and its account, which TenantUsage counts
// while it runs.
type importSlot struct {
	turn   chan struct{} // holds one token while an import runs
	budget *image.Budget
}

func (q *quotas) slot(tenant string) *importSlot {
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
func (q *quotas) importing(tenant string) int64 {
	q.mu.Lock()
	defer q.mu.Unlock()
	if s := q.imports[tenant]; s != nil && s.budget != nil {
		return s.budget.Used()
	}
	return 0
}

// chargeImport opens the storage account of an import, pull or build
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
func (m *Engine) chargeImport(ctx context.Context) (context.Context, func() bool, error) {
	if m.images == nil {
		return ctx, func() bool { return false }, nil
	}
	tenant := CallerTenant(ctx)
	if tenant == "" {
		b := m.images.Budget(image.Charge{Bytes: -1, TrustCache: true})
		return image.WithBudget(ctx, b), func() bool { b.Close(); return b.Unpacked() }, nil
	}
	slot := m.quota.slot(tenant)
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
			return errdefs.QuotaExceeded(QuotaRetryAfter, "tenant %s: %s of %s storage in use; this template needs more than the %s left",
				tenant, sandbox.FormatBytes(u.Storage), sandbox.FormatBytes(q.MaxStorage), sandbox.FormatBytes(c.Bytes))
		}
	}
	b := m.images.Budget(c)
	m.quota.mu.Lock()
	slot.budget = b
	m.quota.mu.Unlock()
	done := func() bool {
		m.quota.mu.Lock()
		if slot.budget == b {
			slot.budget = nil
			b.Close()
			release()
		}
		m.quota.mu.Unlock()
		return b.Unpacked()
	}
	return image.WithBudget(ctx, b), done, nil
}

// templateLayers returns the layers of tenant's own templates and those of
// the shared catalogue (which no tenant is charged for).
func (m *Engine) templateLayers(ctx context.Context, tenant string) (own, shared map[string]bool, err error) {
	own, shared = map[string]bool{}, map[string]bool{}
	sh, _, err := m.store.ListTemplates(ctx, store.Page{})
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
	ts, _, err := m.store.ListTenantTemplates(ctx, tenant, store.Page{})
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
func (m *Engine) templateStorage(ctx context.Context, tenant string) (int64, error) {
	if tenant == "" || m.images == nil {
		return 0, nil
	}
	own, _, err := m.templateLayers(ctx, tenant)
	if err != nil {
		return 0, err
	}
	var n int64
	for l := range own {
		n += max(m.images.Billed(l), 0)
	}
	return n, nil
}
