package sqlstore

import (
	"context"
	"fmt"

	"github.com/berth-sh/berth/internal/store"
)

func (s *sqlStore) AppendFlows(ctx context.Context, flows []*store.Flow, keep int) (err error) {
	if len(flows) == 0 {
		return nil
	}
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("append flows: %w", err)
	}
	defer func() {
		if err != nil {
			_ = tx.Rollback()
		}
	}()
	ins := s.d.rebind(`INSERT INTO flows (sandbox_id, seq, at, kind, proto, src, dst, name, decision, rule)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`)
	touched := map[string]bool{}
	for _, f := range flows {
		if _, err := s.txExec(ctx, tx, ins, f.SandboxID, f.ID, micros(f.Time), f.Kind, f.Proto, f.Src, f.Dst,
			f.Name, f.Decision, f.Rule); err != nil {
			return fmt.Errorf("append flows: %w", err)
		}
		touched[f.SandboxID] = true
	}
	if keep > 0 {
		for id := range touched {
			if _, err := s.txExec(ctx, tx, s.d.rebind(`DELETE FROM flows WHERE sandbox_id = ? AND id <= (
				SELECT id FROM flows WHERE sandbox_id = ? ORDER BY id DESC LIMIT 1 OFFSET ?)`), id, id, keep); err != nil {
				return fmt.Errorf("trim flows: %w", err)
			}
		}
	}
	return tx.Commit()
}

func (s *sqlStore) ListFlows(ctx context.Context, o store.Owner, sandboxID string, afterID int64, limit int) ([]*store.Flow, error) {
	if limit <= 0 {
		limit = 10000
	}
	q, args := `SELECT id, sandbox_id, at, kind, proto, src, dst, name, decision, rule
		FROM flows WHERE sandbox_id = ? AND id > ?`, []any{sandboxID, afterID}
	if t, ok := o.Tenant(); ok {
		q += ` AND sandbox_id IN (SELECT id FROM sandboxes WHERE id = ? AND tenant = ?)`
		args = append(args, sandboxID, t)
	}
	rows, err := s.query(ctx, q+` ORDER BY id LIMIT ?`, append(args, limit)...)
	if err != nil {
		return nil, fmt.Errorf("list flows: %w", err)
	}
	defer rows.Close()
	var out []*store.Flow
	for rows.Next() {
		var f store.Flow
		var at int64
		if err := rows.Scan(&f.ID, &f.SandboxID, &at, &f.Kind, &f.Proto, &f.Src, &f.Dst, &f.Name, &f.Decision, &f.Rule); err != nil {
			return nil, err
		}
		f.Time = fromMicros(at)
		out = append(out, &f)
	}
	return out, rows.Err()
}
