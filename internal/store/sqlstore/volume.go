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

func (s *sqlStore) GetVolume(ctx context.Context, o store.Owner, id string) (*store.Volume, error) {
	v, err := scanVolume(s.queryRow(ctx, `SELECT `+volumeCols+` FROM volumes WHERE id = ?`, id))
	if err == nil && !o.Sees(v.Tenant) {
		err = sql.ErrNoRows
	}
	if errors.Is(err, sql.ErrNoRows) {
		return nil, errdefs.NotFound("volume %s not found", id)
	}
	if err != nil {
		return nil, fmt.Errorf("get volume %s: %w", id, err)
	}
	return v, nil
}

func (s *sqlStore) GetVolumeByName(ctx context.Context, o store.Owner, name string) (*store.Volume, error) {
	q := pageQuery{base: `SELECT ` + volumeCols + ` FROM volumes`}
	q.and("name = ? AND state <> ?", name, store.VolumeDeleted)
	q.owner(o, "tenant")
	vs, _, err := listPage(ctx, s, q, byVolumeCreated, store.Page{Limit: 2}, scanVolume, volumeKey)
	switch {
	case err != nil:
		return nil, fmt.Errorf("get volume %q: %w", name, err)
	case len(vs) == 0:
		return nil, errdefs.NotFound("volume %q not found", name)
	case len(vs) > 1:
		return nil, errdefs.Conflict("volume name %q is live in more than one tenant", name)
	}
	return vs[0], nil
}

func volumeKey(v *store.Volume) (int64, string) { return micros(v.CreatedAt), v.ID }

func (s *sqlStore) ListVolumes(ctx context.Context, f store.VolumeFilter, p store.Page) ([]*store.Volume, string, error) {
	q := pageQuery{base: `SELECT ` + volumeCols + ` FROM volumes`}
	q.owner(f.Owner, "tenant")
	if !f.IncludeDeleted {
		q.and("state <> ?", store.VolumeDeleted)
	}
	return listPage(ctx, s, q, byVolumeCreated, p, scanVolume, volumeKey)
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
		if _, err := s.GetVolume(ctx, store.AnyOwner, v.ID); err != nil {
			return err
		}
		return errdefs.Modified("volume %s was modified concurrently; reload it and retry", v.Name)
	}
	v.Generation++
	return nil
}
