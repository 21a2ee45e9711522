package postgres

import (
	"context"
	"database/sql"
	"fmt"
)

// tenantLock is PostgreSQL's sqlstore.Dialect.TenantLock: a transaction
// kept open until unlock holds pg_advisory_xact_lock on
// hashtext('berth-quota:'||tenant), so every daemon on the database admits
// a tenant's creates one at a time (hashtext is int4, so the keys never
// meet the migration and event-order keys, which are wider). The holders
// take at most slots connections of the pool at once (half of it), so the
// admitted writes, which need connections of their own, always find one.
func tenantLock(slots int) func(ctx context.Context, w *sql.DB, tenant string) (func(), error) {
	sem := make(chan struct{}, max(1, slots))
	return func(ctx context.Context, w *sql.DB, tenant string) (func(), error) {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			return nil, fmt.Errorf("admission lock of tenant %q: %w", tenant, ctx.Err())
		}
		// The transaction outlives ctx's cancellation: the lock must be
		// held until unlock, not dropped while the admitted write runs.
		tx, err := w.BeginTx(context.WithoutCancel(ctx), nil)
		if err != nil {
			<-sem
			return nil, fmt.Errorf("admission lock of tenant %q: begin: %w", tenant, err)
		}
		if _, err := tx.ExecContext(ctx, `SELECT pg_advisory_xact_lock(hashtext($1))`, "berth-quota:"+tenant); err != nil {
			_ = tx.Rollback()
			<-sem
			if ctx.Err() != nil {
				err = ctx.Err()
			}
			return nil, fmt.Errorf("admission lock of tenant %q: %w", tenant, err)
		}
		return func() {
			_ = tx.Rollback() // nothing was written; ending it releases the lock
			<-sem
		}, nil
	}
}
