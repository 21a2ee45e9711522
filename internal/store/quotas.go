package store

import (
	"context"
	"time"
)

// TenantQuota is one tenant's limits; 0 in a field means unlimited.
type TenantQuota struct {
	Tenant       string
	MaxSandboxes int64 // live sandboxes at once
	MaxCPUMillis int64 // sum of live sandboxes' CPU quotas, millicores
	MaxMemory    int64 // sum of live sandboxes' memory limits, bytes
	MaxStorage   int64 // sum of disk caps and volume sizes (reserved) and own template layers, bytes
	CreateRate   int64 // creates per minute
	CreateBurst  int64 // creates at once (0: max(1, CreateRate))
	KeyRate      int64 // API requests per second per key
	KeyBurst     int64 // requests at once per key (0: max(1, KeyRate))
	UpdatedAt    time.Time
}

// Quotas are the per-tenant quotas (tenant_quotas).
type Quotas interface {
	// GetTenantQuota returns the tenant's row; ErrNotFound when it has none.
	GetTenantQuota(ctx context.Context, tenant string) (*TenantQuota, error)
	// PutTenantQuota inserts or replaces the tenant's row.
	PutTenantQuota(ctx context.Context, q *TenantQuota) error
	// DeleteTenantQuota removes the tenant's row (back to the default);
	// no row is not an error.
	DeleteTenantQuota(ctx context.Context, tenant string) error
}
