package sqlstore

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"

	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/internal/store"
)

func (s *sqlStore) PutProcess(ctx context.Context, p *store.SupervisedProcess) error {
	if p.SandboxID == "" || p.Key == "" || len(p.Spec.Cmd) == 0 {
		return errdefs.Invalid("supervised process: sandbox, key and cmd are required")
	}
	spec, err := json.Marshal(p.Spec)
	if err != nil {
		return fmt.Errorf("supervised process %s: encode spec: %w", p.Key, err)
	}
	if _, err := s.exec(ctx, `INSERT INTO supervised_processes (sandbox_id, proc_key, spec, boot, agent_id, created_at)
		VALUES (?, ?, ?, ?, ?, ?)
		ON CONFLICT (sandbox_id, proc_key) DO UPDATE SET spec = excluded.spec, boot = excluded.boot,
		agent_id = excluded.agent_id`,
		p.SandboxID, p.Key, string(spec), p.Boot, p.AgentID, micros(p.CreatedAt)); err != nil {
		return fmt.Errorf("put supervised process %s: %w", p.Key, err)
	}
	return nil
}

func (s *sqlStore) ListProcesses(ctx context.Context, sandboxID string) ([]*store.SupervisedProcess, error) {
	rows, err := s.query(ctx, `SELECT sandbox_id, proc_key, spec, boot, agent_id, created_at
		FROM supervised_processes WHERE sandbox_id = ? ORDER BY created_at, proc_key`, sandboxID)
	if err != nil {
		return nil, fmt.Errorf("list supervised processes: %w", err)
	}
	defer rows.Close()
	var out []*store.SupervisedProcess
	for rows.Next() {
		var (
			p    store.SupervisedProcess
			spec string
			at   int64
		)
		if err := rows.Scan(&p.SandboxID, &p.Key, &spec, &p.Boot, &p.AgentID, &at); err != nil {
			return nil, fmt.Errorf("list supervised processes: %w", err)
		}
		if err := json.Unmarshal([]byte(spec), &p.Spec); err != nil {
			return nil, fmt.Errorf("supervised process %s: decode spec: %w", p.Key, err)
		}
		p.CreatedAt = fromMicros(at)
		out = append(out, &p)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list supervised processes: %w", err)
	}
	return out, nil
}

func (s *sqlStore) DeleteProcess(ctx context.Context, sandboxID, key string) error {
	if _, err := s.exec(ctx, `DELETE FROM supervised_processes WHERE sandbox_id = ? AND proc_key = ?`, sandboxID, key); err != nil {
		return fmt.Errorf("delete supervised process %s: %w", key, err)
	}
	return nil
}

// deleteProcesses removes sandbox id's supervised processes in tx.
func (s *sqlStore) deleteProcesses(ctx context.Context, tx *sql.Tx, id string) error {
	if _, err := s.txExec(ctx, tx, s.d.rebind(`DELETE FROM supervised_processes WHERE sandbox_id = ?`), id); err != nil {
		return fmt.Errorf("sandbox %s: delete supervised processes: %w", id, err)
	}
	return nil
}
