package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"

	"github.com/berth-sh/berth/internal/sandbox"
	"github.com/berth-sh/berth/internal/store"
)

// Purge runs one batch in one transaction behind the EventOrderLock, so no
// event is appended to a tombstone between the check that its events are
// all handled and its removal (PostgreSQL would cascade it away unsent).
func (s *sqlStore) Purge(ctx context.Context, req store.PurgeRequest) (store.PurgeResult, error) {
	var res store.PurgeResult
	if req.Before.IsZero() {
		return res, nil
	}
	limit := req.Limit
	if limit <= 0 {
		limit = 100
	}
	before := micros(req.Before)
	err := s.inTx(ctx, true, func(ctx context.Context, tx *sql.Tx) error {
		res = store.PurgeResult{}
		hold, err := s.outboxHold(ctx, tx, req.Webhooks)
		if err != nil {
			return err
		}
		ids, err := s.purgeable(ctx, tx, before, hold, limit)
		if err != nil {
			return err
		}
		for _, id := range ids {
			var evs, fls int64
			if err := s.txQueryRow(ctx, tx, s.d.rebind(`SELECT
				(SELECT COUNT(*) FROM events WHERE sandbox_id = ?), (SELECT COUNT(*) FROM flows WHERE sandbox_id = ?)`),
				id, id).Scan(&evs, &fls); err != nil {
				return fmt.Errorf("purge: count: %w", err)
			}
			if err := s.purgeSandbox(ctx, tx, id); err != nil {
				return err
			}
			res.Sandboxes++
			res.Events += evs
			res.Flows += fls
		}
		if res.Volumes, err = s.execCount(ctx, tx, `DELETE FROM volumes WHERE id IN (SELECT id FROM volumes
			WHERE state = ? AND deleted_at > 0 AND deleted_at < ? ORDER BY deleted_at LIMIT ?)`,
			store.VolumeDeleted, before, limit); err != nil {
			return fmt.Errorf("purge volumes: %w", err)
		}
		// Attempt logs of events handled long ago; those of events still
		// held stay with them.
		if res.Deliveries, err = s.execCount(ctx, tx, `DELETE FROM webhook_deliveries WHERE id IN (SELECT id FROM webhook_deliveries
			WHERE at < ? AND event_id <= ? ORDER BY id LIMIT ?)`, before, hold, limit); err != nil {
			return fmt.Errorf("purge webhook deliveries: %w", err)
		}
		return nil
	})
	if err != nil {
		return store.PurgeResult{}, fmt.Errorf("purge: %w", err)
	}
	return res, nil
}

// outboxHold is the highest event id every webhook in urls has handled
// (math.MaxInt64 without webhooks, 0 if one has no cursor yet): the events
// above it are the outbox still to deliver.
func (s *sqlStore) outboxHold(ctx context.Context, tx *sql.Tx, urls []string) (int64, error) {
	hold := int64(math.MaxInt64)
	for _, u := range urls {
		var id int64
		err := s.txQueryRow(ctx, tx, s.d.rebind(`SELECT event_id FROM webhook_cursors WHERE url = ?`), u).Scan(&id)
		switch {
		case errors.Is(err, sql.ErrNoRows):
			return 0, nil
		case err != nil:
			return 0, fmt.Errorf("purge: webhook cursor: %w", err)
		}
		hold = min(hold, id)
	}
	return hold, nil
}

// purgeable returns up to limit tombstones deleted before before whose
// events all have ids at most hold, oldest first.
func (s *sqlStore) purgeable(ctx context.Context, tx *sql.Tx, before, hold int64, limit int) ([]string, error) {
	rows, err := s.txQuery(ctx, tx, s.d.rebind(`SELECT id FROM sandboxes
		WHERE state = ? AND deleted_at > 0 AND deleted_at < ?
		AND NOT EXISTS (SELECT 1 FROM events WHERE events.sandbox_id = sandboxes.id AND events.id > ?)
		ORDER BY deleted_at, id LIMIT ?`), string(sandbox.StateDeleted), before, hold, limit)
	if err != nil {
		return nil, fmt.Errorf("purge: tombstones: %w", err)
	}
	defer rows.Close()
	var ids []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return nil, fmt.Errorf("purge: tombstones: %w", err)
		}
		ids = append(ids, id)
	}
	return ids, rows.Err()
}

func (s *sqlStore) execCount(ctx context.Context, tx *sql.Tx, q string, args ...any) (int64, error) {
	r, err := s.txExec(ctx, tx, s.d.rebind(q), args...)
	if err != nil {
		return 0, err
	}
	return r.RowsAffected()
}
