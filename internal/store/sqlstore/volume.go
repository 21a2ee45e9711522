package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/internal/store"
)

const volumeCols = `id, name, tenant, state, size_bytes, inodes, sandbox_id, keep, created_at, updated_at, deleted_at, generation`

func scanVolume(sc scanner) (*store.Volume, error) {
	var (
		v                         store.Volume
		created, updated, deleted int64
	)
	if err := sc.Scan(&v.ID, &v.Name, &v.Tenant, &v.State, &v.SizeBytes, &v.Inodes, &v.SandboxID, &v.Keep,
		&created, &updated, &deleted, &v.Generation); err != nil {
		return nil, err
	}
	v.CreatedAt, v.UpdatedAt, v.DeletedAt = fromMicros(created), fromMicros(updated), fromMicros(deleted)
	return &v, nil
}

func (s *sqlStore) CreateVolume(ctx context.Context, v *store.Volume) error {
	if v.ID == "" || v.Name == "" {
		return errdefs.Invalid("volume id and name are required")
	}
	_, err := s.exec(ctx, `INSERT INTO volumes (`+volumeCols+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 1)`,
		v.ID, v.Name, v.Tenant, v.State, v.SizeBytes, v.Inodes, v.SandboxID, v.Keep,
		micros(v.CreatedAt), micros(v.UpdatedAt), micros(v.DeletedAt))
	if err != nil {
		if s.d.classify(err) == UniqueViolation {
			return errdefs.NameTaken("a volume named %q already exists", v.Name)
		}
		return fmt.Errorf("create volume %s: %w", v.Name, err)
	}
	v.Generation = 1
	return nil
}

func (s *sqlStore) GetVolume(ctx context.Context, id string) (*store.Volume, error) {
	v, err := scanVolume(s.queryRow(ctx, `SELECT `+volumeCols+` FROM volumes WHERE id = ?`, id))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, errdefs.NotFound("volume %s not found", id)
	}
	if err != nil {
		return nil, fmt.Errorf("get volume %s: %w", id, err)
	}
	return v, nil
}

func (s *sqlStore) GetVolumeByName(ctx context.Context, tenant, name string) (*store.Volume, error) {
	v, err := scanVolume(s.queryRow(ctx, `SELECT `+volumeCols+` FROM volumes WHERE tenant = ? AND name = ? AND state <> ?`,
		tenant, name, store.VolumeDeleted))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, errdefs.NotFound("volume %q not found", name)
	}
	if err != nil {
		return nil, fmt.Errorf("get volume %q: %w", name, err)
	}
	return v, nil
}

func (s *sqlStore) ListVolumes(ctx context.Context, tenant string, includeDeleted bool) ([]*store.Volume, error) {
	q := `SELECT ` + volumeCols + ` FROM volumes WHERE (? = '' OR tenant = ?)`
	args := []any{tenant, tenant}
	if !includeDeleted {
		q += ` AND state <> ?`
		args = append(args, store.VolumeDeleted)
	}
	rows, err := s.query(ctx, q+` ORDER BY created_at, id`, args...)
	if err != nil {
		return nil, fmt.Errorf("list volumes: %w", err)
	}
	defer rows.Close()
	var out []*store.Volume
	for rows.Next() {
		v, err := scanVolume(rows)
		if err != nil {
			return nil, fmt.Errorf("list volumes: %w", err)
		}
		out = append(out, v)
	}
	return out, rows.Err()
}

func (s *sqlStore) UpdateVolume(ctx context.Context, v *store.Volume) error {
	res, err := s.exec(ctx, `UPDATE volumes SET name = ?, tenant = ?, state = ?, size_bytes = ?, inodes = ?,
		sandbox_id = ?, keep = ?, created_at = ?, updated_at = ?, deleted_at = ?, generation = generation + 1
		WHERE id = ? AND generation = ?`,
		v.Name, v.Tenant, v.State, v.SizeBytes, v.Inodes, v.SandboxID, v.Keep,
		micros(v.CreatedAt), micros(v.UpdatedAt), micros(v.DeletedAt), v.ID, v.Generation)
	if err != nil {
		if s.d.classify(err) == UniqueViolation {
			return errdefs.NameTaken("a volume named %q already exists", v.Name)
		}
		return fmt.Errorf("update volume %s: %w", v.ID, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return fmt.Errorf("update volume %s: %w", v.ID, err)
	}
	if n == 0 {
		if _, err := s.GetVolume(ctx, v.ID); err != nil {
			return err
		}
		return errdefs.Conflict("volume %s was modified concurrently; reload it and retry", v.Name)
	}
	v.Generation++
	return nil
}
