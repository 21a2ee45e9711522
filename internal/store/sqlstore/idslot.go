package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/berth-sh/berth/internal/errdefs"
)

// AllocateIDSlot inserts the lowest free slot in one statement; two
// allocators that pick the same slot (PostgreSQL, concurrent transactions)
// collide on the primary key, and the loser picks again.
func (s *sqlStore) AllocateIDSlot(ctx context.Context, sandboxID, node string, limit int) (int, error) {
	if sandboxID == "" || limit <= 0 {
		return 0, errdefs.Invalid("id slot: sandbox id and a positive limit are required")
	}
	for attempt := 0; ; attempt++ {
		var slot int
		err := s.queryRow(ctx, `SELECT slot FROM id_slots WHERE sandbox_id = ?`, sandboxID).Scan(&slot)
		if err == nil {
			return slot, nil
		}
		if !errors.Is(err, sql.ErrNoRows) {
			return 0, fmt.Errorf("id slot of %s: %w", sandboxID, err)
		}
		res, err := s.exec(ctx, `INSERT INTO id_slots (slot, sandbox_id, node, allocated_at)
			SELECT c.slot, ?, ?, ? FROM (
				SELECT 0 AS slot WHERE NOT EXISTS (SELECT 1 FROM id_slots WHERE slot = 0)
				UNION ALL
				SELECT s.slot + 1 AS slot FROM id_slots s
				WHERE NOT EXISTS (SELECT 1 FROM id_slots t WHERE t.slot = s.slot + 1)
			) c WHERE c.slot < ? ORDER BY c.slot LIMIT 1`,
			sandboxID, node, micros(time.Now()), limit)
		if err != nil {
			if s.d.classify(err) == UniqueViolation && attempt < 100 {
				continue // another allocator took it (or this sandbox got one): look again
			}
			return 0, fmt.Errorf("allocating an id slot for %s: %w", sandboxID, err)
		}
		if n, err := res.RowsAffected(); err != nil {
			return 0, err
		} else if n == 0 {
			return 0, errdefs.Exhausted("all %d host id ranges are in use", limit)
		}
	}
}

func (s *sqlStore) ReleaseIDSlot(ctx context.Context, sandboxID string) error {
	if _, err := s.exec(ctx, `DELETE FROM id_slots WHERE sandbox_id = ?`, sandboxID); err != nil {
		return fmt.Errorf("releasing the id slot of %s: %w", sandboxID, err)
	}
	return nil
}

func (s *sqlStore) ListIDSlots(ctx context.Context, node string) (map[string]int, error) {
	rows, err := s.query(ctx, `SELECT sandbox_id, slot FROM id_slots WHERE (? = '' OR node = ?)`, node, node)
	if err != nil {
		return nil, fmt.Errorf("list id slots: %w", err)
	}
	defer rows.Close()
	out := map[string]int{}
	for rows.Next() {
		var id string
		var slot int
		if err := rows.Scan(&id, &slot); err != nil {
			return nil, err
		}
		out[id] = slot
	}
	return out, rows.Err()
}
