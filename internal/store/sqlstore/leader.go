package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/internal/store"
)

// TakeReconcileLease is one upsert: the row is inserted, or updated only where the
// lease is the holder's own or expired by the database's clock; RETURNING
// says whether it was. A conflicting holder's unexpired row returns
// nothing, and the row is then read as it stands.
func (s *sqlStore) TakeReconcileLease(ctx context.Context, name, holder string, ttl time.Duration) (store.LeaseRecord, error) {
	if name == "" || holder == "" || ttl <= 0 {
		return store.LeaseRecord{}, errdefs.Invalid("lease: name, holder and a positive ttl are required")
	}
	now := s.d.NowMillis
	var rec store.LeaseRecord
	var expires, nowMs int64
	err := s.w.QueryRowContext(ctx, s.d.rebind(`INSERT INTO reconcile_leases (name, holder, epoch, expires_ms)
		VALUES (?, ?, 1, `+now+` + ?)
		ON CONFLICT (name) DO UPDATE SET
			epoch = CASE WHEN reconcile_leases.holder = excluded.holder THEN reconcile_leases.epoch
				ELSE reconcile_leases.epoch + 1 END,
			holder = excluded.holder,
			expires_ms = excluded.expires_ms
		WHERE reconcile_leases.holder = excluded.holder OR reconcile_leases.expires_ms <= `+now+`
		RETURNING name, holder, epoch, expires_ms, `+now),
		name, holder, ttl.Milliseconds()).Scan(&rec.Name, &rec.Holder, &rec.Epoch, &expires, &nowMs)
	if errors.Is(err, sql.ErrNoRows) {
		return s.GetReconcileLease(ctx, name)
	}
	if err != nil {
		return store.LeaseRecord{}, fmt.Errorf("take lease %s: %w", name, err)
	}
	rec.Expires = time.UnixMilli(expires).UTC()
	rec.Remaining = time.Duration(expires-nowMs) * time.Millisecond
	return rec, nil
}

func (s *sqlStore) ReleaseReconcileLease(ctx context.Context, name, holder string, epoch int64) error {
	// Expired rather than deleted: the epoch must keep growing, or a
	// fence of an older holder could come to match again.
	if _, err := s.exec(ctx, `UPDATE reconcile_leases SET expires_ms = 0
		WHERE name = ? AND holder = ? AND epoch = ?`, name, holder, epoch); err != nil {
		return fmt.Errorf("release lease %s: %w", name, err)
	}
	return nil
}

func (s *sqlStore) GetReconcileLease(ctx context.Context, name string) (store.LeaseRecord, error) {
	var rec store.LeaseRecord
	var expires, nowMs int64
	err := s.w.QueryRowContext(ctx, s.d.rebind(`SELECT name, holder, epoch, expires_ms, `+s.d.NowMillis+`
		FROM reconcile_leases WHERE name = ?`), name).Scan(&rec.Name, &rec.Holder, &rec.Epoch, &expires, &nowMs)
	if errors.Is(err, sql.ErrNoRows) {
		return store.LeaseRecord{}, errdefs.NotFound("lease %s was never taken", name)
	}
	if err != nil {
		return store.LeaseRecord{}, fmt.Errorf("get lease %s: %w", name, err)
	}
	rec.Expires = time.UnixMilli(expires).UTC()
	rec.Remaining = time.Duration(expires-nowMs) * time.Millisecond
	return rec, nil
}

func (s *sqlStore) PurgeReconcileLeases(ctx context.Context, prefix string, after time.Duration) (int64, error) {
	if prefix == "" {
		return 0, errdefs.Invalid("lease purge: a name prefix is required")
	}
	// A prefix match without LIKE's wildcards: the prefix is the caller's
	// constant, but '_' is a LIKE wildcard and would widen it.
	res, err := s.exec(ctx, `DELETE FROM reconcile_leases WHERE substr(name, 1, ?) = ? AND expires_ms < `+s.d.NowMillis+` - ?`,
		len(prefix), prefix, after.Milliseconds())
	if err != nil {
		return 0, fmt.Errorf("purge leases %s*: %w", prefix, err)
	}
	return res.RowsAffected()
}

// fenceClause is the condition a fenced write adds to its WHERE: the
// lease is still the fence's, at its epoch, unexpired now. Evaluated in
// the write's own statement, so no gap is left between check and write.
func (s *sqlStore) fenceClause(ctx context.Context) (string, []any) {
	f, ok := store.FenceFrom(ctx)
	if !ok {
		return "", nil
	}
	return ` AND EXISTS (SELECT 1 FROM reconcile_leases WHERE name = ? AND holder = ? AND epoch = ? AND expires_ms > ` +
		s.d.NowMillis + s.d.ShareLock + `)`, []any{f.Name, f.Holder, f.Epoch}
}

// fenceHolds reports whether ctx's fence still holds (true without one):
// a refused fenced write is told apart from a stale generation by it.
func (s *sqlStore) fenceHolds(ctx context.Context, tx *sql.Tx) (bool, error) {
	clause, args := s.fenceClause(ctx)
	if clause == "" {
		return true, nil
	}
	var one int
	err := s.txQueryRow(ctx, tx, s.d.rebind(`SELECT 1 WHERE 1 = 1`+clause), args...).Scan(&one)
	if errors.Is(err, sql.ErrNoRows) {
		return false, nil
	}
	return err == nil, err
}

func leaseLost(f store.Fence) error {
	return &errdefs.Error{Category: errdefs.ErrConflict, Reason: store.ErrLeaseLost,
		Msg: fmt.Sprintf("lease %s is no longer held by %s at epoch %d", f.Name, f.Holder, f.Epoch)}
}
