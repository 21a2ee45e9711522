package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/internal/store"
)

const quotaCols = `tenant, max_sandboxes, max_cpus, max_memory, max_storage, create_rate, create_burst, key_rate, key_burst, updated_at`

func (s *sqlStore) GetTenantQuota(ctx context.Context, tenant string) (*store.TenantQuota, error) {
	var q store.TenantQuota
	var at int64
	err := s.queryRow(ctx, `SELECT `+quotaCols+` FROM tenant_quotas WHERE tenant = ?`, tenant).Scan(
		&q.Tenant, &q.MaxSandboxes, &q.MaxCPUMillis, &q.MaxMemory, &q.MaxStorage,
		&q.CreateRate, &q.CreateBurst, &q.KeyRate, &q.KeyBurst, &at)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, errdefs.NotFound("no quota for tenant %q", tenant)
	}
	if err != nil {
		return nil, fmt.Errorf("quota of %q: %w", tenant, err)
	}
	q.UpdatedAt = fromMicros(at)
	return &q, nil
}

func (s *sqlStore) PutTenantQuota(ctx context.Context, q *store.TenantQuota) error {
	for _, v := range []int64{q.MaxSandboxes, q.MaxCPUMillis, q.MaxMemory, q.MaxStorage, q.CreateRate, q.CreateBurst, q.KeyRate, q.KeyBurst} {
		if v < 0 {
			return errdefs.Invalid("quota of %q: limits must not be negative", q.Tenant)
		}
	}
	_, err := s.exec(ctx, `INSERT INTO tenant_quotas (`+quotaCols+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
		ON CONFLICT (tenant) DO UPDATE SET max_sandboxes = excluded.max_sandboxes, max_cpus = excluded.max_cpus,
			max_memory = excluded.max_memory, max_storage = excluded.max_storage, create_rate = excluded.create_rate,
			create_burst = excluded.create_burst, key_rate = excluded.key_rate, key_burst = excluded.key_burst,
			updated_at = excluded.updated_at`,
		q.Tenant, q.MaxSandboxes, q.MaxCPUMillis, q.MaxMemory, q.MaxStorage, q.CreateRate, q.CreateBurst,
		q.KeyRate, q.KeyBurst, micros(q.UpdatedAt))
	if err != nil {
		return fmt.Errorf("storing the quota of %q: %w", q.Tenant, err)
	}
	return nil
}

func (s *sqlStore) DeleteTenantQuota(ctx context.Context, tenant string) error {
	if _, err := s.exec(ctx, `DELETE FROM tenant_quotas WHERE tenant = ?`, tenant); err != nil {
		return fmt.Errorf("removing the quota of %q: %w", tenant, err)
	}
	return nil
}
