package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"time"

	"github.com/berth-sh/berth/internal/errdefs"
)

func (s *sqlStore) PutPeer(ctx context.Context, node, addr string) error {
	if node == "" || addr == "" {
		return errdefs.Invalid("peer: node and address are required")
	}
	_, err := s.exec(ctx, `INSERT INTO peers (node, addr, updated_at) VALUES (?, ?, ?)
		ON CONFLICT (node) DO UPDATE SET addr = excluded.addr, updated_at = excluded.updated_at`,
		node, addr, micros(time.Now()))
	return err
}

func (s *sqlStore) GetPeer(ctx context.Context, node string) (string, error) {
	var addr string
	err := s.queryRow(ctx, `SELECT addr FROM peers WHERE node = ?`, node).Scan(&addr)
	if errors.Is(err, sql.ErrNoRows) {
		return "", errdefs.NotFound("node %s has no peer address", node)
	}
	return addr, err
}
