package sqlstore

import (
	"context"
	"errors"
	"sync"
)

// LockTenant is the dialect's TenantLock; a backend without one cannot
// serialise admission and says so rather than admitting unguarded.
func (s *sqlStore) LockTenant(ctx context.Context, tenant string) (func(), error) {
	if s.d.TenantLock == nil {
		return nil, errors.New(s.d.Name + " store: no tenant admission lock")
	}
	unlock, err := s.d.TenantLock(ctx, s.w, tenant)
	if err != nil {
		return nil, err
	}
	var once sync.Once
	return func() { once.Do(unlock) }, nil
}
