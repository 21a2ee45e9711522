package sqlstore

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/internal/store"
)

const snapshotCols = `id, name, tenant, sandbox_id, template, layers, spec, parent, size_bytes, created_at, expires_at`

func scanSnapshot(sc scanner) (*store.Snapshot, error) {
	var (
		sn               store.Snapshot
		layers, spec     string
		created, expires int64
	)
	if err := sc.Scan(&sn.ID, &sn.Name, &sn.Tenant, &sn.SandboxID, &sn.Template, &layers, &spec, &sn.Parent,
		&sn.SizeBytes, &created, &expires); err != nil {
		return nil, err
	}
	if err := json.Unmarshal([]byte(layers), &sn.Layers); err != nil {
		return nil, fmt.Errorf("snapshot %s: layers: %w", sn.ID, err)
	}
	if err := json.Unmarshal([]byte(spec), &sn.Spec); err != nil {
		return nil, fmt.Errorf("snapshot %s: spec: %w", sn.ID, err)
	}
	sn.CreatedAt, sn.ExpiresAt = fromMicros(created), fromMicros(expires)
	return &sn, nil
}

func (s *sqlStore) CreateSnapshot(ctx context.Context, sn *store.Snapshot) error {
	layers, _ := json.Marshal(sn.Layers)
	spec, err := json.Marshal(sn.Spec)
	if err != nil {
		return err
	}
	_, err = s.exec(ctx, `INSERT INTO snapshots (`+snapshotCols+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		sn.ID, sn.Name, sn.Tenant, sn.SandboxID, sn.Template, string(layers), string(spec), sn.Parent,
		sn.SizeBytes, micros(sn.CreatedAt), micros(sn.ExpiresAt))
	if err != nil {
		if s.d.classify(err) == UniqueViolation {
			return errdefs.NameTaken("a snapshot named %q already exists", sn.Name)
		}
		return fmt.Errorf("create snapshot: %w", err)
	}
	return nil
}

func (s *sqlStore) GetSnapshot(ctx context.Context, o store.Owner, id string) (*store.Snapshot, error) {
	sn, err := scanSnapshot(s.queryRow(ctx, `SELECT `+snapshotCols+` FROM snapshots WHERE id = ?`, id))
	if err == nil && !o.Sees(sn.Tenant) {
		err = sql.ErrNoRows
	}
	if errors.Is(err, sql.ErrNoRows) {
		return nil, errdefs.NotFound("snapshot %s not found", id)
	}
	if err != nil {
		return nil, fmt.Errorf("get snapshot %s: %w", id, err)
	}
	return sn, nil
}

func (s *sqlStore) GetSnapshotByName(ctx context.Context, o store.Owner, name string) (*store.Snapshot, error) {
	q := pageQuery{base: `SELECT ` + snapshotCols + ` FROM snapshots`}
	q.and("name = ?", name)
	q.owner(o, "tenant")
	sns, _, err := listPage(ctx, s, q, bySnapshotCreated, store.Page{Limit: 2}, scanSnapshot, snapshotKey)
	switch {
	case err != nil:
		return nil, fmt.Errorf("get snapshot %q: %w", name, err)
	case len(sns) == 0:
		return nil, errdefs.NotFound("snapshot %q not found", name)
	case len(sns) > 1:
		return nil, errdefs.Conflict("snapshot name %q is taken in more than one tenant", name)
	}
	return sns[0], nil
}

func snapshotKey(sn *store.Snapshot) (int64, string) { return micros(sn.CreatedAt), sn.ID }

func (s *sqlStore) ListSnapshots(ctx context.Context, f store.SnapshotFilter, p store.Page) ([]*store.Snapshot, string, error) {
	q := pageQuery{base: `SELECT ` + snapshotCols + ` FROM snapshots`}
	q.owner(f.Owner, "tenant")
	if f.SandboxID != "" {
		q.and("sandbox_id = ?", f.SandboxID)
	}
	return listPage(ctx, s, q, bySnapshotCreated, p, scanSnapshot, snapshotKey)
}

func (s *sqlStore) DeleteSnapshot(ctx context.Context, id string) error {
	res, err := s.exec(ctx, `DELETE FROM snapshots WHERE id = ?`, id)
	if err != nil {
		return fmt.Errorf("delete snapshot %s: %w", id, err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return errdefs.NotFound("snapshot %s not found", id)
	}
	return nil
}

func (s *sqlStore) GetBuildCache(ctx context.Context, tenant, key string) (string, error) {
	var layer string
	err := s.queryRow(ctx, `SELECT layer FROM build_cache WHERE tenant = ? AND key = ?`, tenant, key).Scan(&layer)
	if errors.Is(err, sql.ErrNoRows) {
		return "", errdefs.NotFound("no cached build step")
	}
	return layer, err
}

func (s *sqlStore) PutBuildCache(ctx context.Context, tenant, key, layer string) error {
	_, err := s.exec(ctx, `INSERT INTO build_cache (tenant, key, layer, created_at) VALUES (?, ?, ?, ?)
		ON CONFLICT (tenant, key) DO UPDATE SET layer = excluded.layer, created_at = excluded.created_at`,
		tenant, key, layer, micros(time.Now()))
	return err
}

// SetPool is one statement: a reader never sees the pool without a size
// between a delete and an insert (the refill read such a gap as "no pool"
// and retired every member of a pool being resized).
func (s *sqlStore) SetPool(ctx context.Context, tenant, template string, min int) error {
	_, err := s.exec(ctx, `INSERT INTO pools (tenant, template, min_ready, updated_at) VALUES (?, ?, ?, ?)
		ON CONFLICT (tenant, template) DO UPDATE SET min_ready = excluded.min_ready, updated_at = excluded.updated_at`,
		tenant, template, min, micros(time.Now()))
	return err
}

func (s *sqlStore) ClearPool(ctx context.Context, tenant, template string) error {
	_, err := s.exec(ctx, `DELETE FROM pools WHERE tenant = ? AND template = ?`, tenant, template)
	return err
}

func (s *sqlStore) ListPools(ctx context.Context) (map[store.PoolKey]int, error) {
	rows, err := s.query(ctx, `SELECT tenant, template, min_ready FROM pools`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[store.PoolKey]int{}
	for rows.Next() {
		var k store.PoolKey
		var n int
		if err := rows.Scan(&k.Tenant, &k.Template, &n); err != nil {
			return nil, err
		}
		out[k] = n
	}
	return out, rows.Err()
}
