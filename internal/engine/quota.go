package engine

import (
	"context"

	"github.com/berth-sh/berth/internal/engine/quota"
	"github.com/berth-sh/berth/internal/sandbox"
	"github.com/berth-sh/berth/internal/store"
)

// Tenants' quotas are admitted by internal/engine/quota; these are the
// engine's doors onto it.

// Usage is what a tenant's live sandboxes and volumes hold against its
// quota.
type Usage = quota.Usage

// QuotaRetryAfter is the Retry-After of a count limit.
const QuotaRetryAfter = quota.RetryAfter

// CreateBurst is a quota's create burst: its own, else max(1, the rate).
func CreateBurst(q *store.TenantQuota) int64 { return quota.CreateBurst(q) }

// Quota returns the tenant's quota: its row, else the daemon's default
// for a named tenant.
func (m *Engine) Quota(ctx context.Context, tenant string) (*store.TenantQuota, error) {
	return m.quota.Quota(ctx, tenant)
}

// SetQuota stores a tenant's quota.
func (m *Engine) SetQuota(ctx context.Context, q *store.TenantQuota) error {
	return m.quota.SetQuota(ctx, q)
}

// TenantUsage counts what the tenant holds; skip is left out.
func (m *Engine) TenantUsage(ctx context.Context, tenant, skip string) (Usage, error) {
	return m.quota.TenantUsage(ctx, tenant, skip)
}

func (m *Engine) admitQuota(ctx context.Context, sb *sandbox.Sandbox, write func() error) error {
	return m.quota.AdmitSandbox(ctx, sb, write)
}

func (m *Engine) admitVolume(ctx context.Context, tenant string, size int64, write func() error) error {
	return m.quota.AdmitVolume(ctx, tenant, size, write)
}

// chargeImport opens the storage account of an import by ctx's caller
// (quota.Admission.ChargeImport).
func (m *Engine) chargeImport(ctx context.Context) (context.Context, func() bool, error) {
	return m.quota.ChargeImport(ctx, CallerTenant(ctx))
}
