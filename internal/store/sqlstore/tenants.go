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

// ---- tenants ----

func (s *sqlStore) CreateTenant(ctx context.Context, t *store.Tenant) error {
	if t.Name == "" {
		return errdefs.Invalid("a tenant needs a name")
	}
	_, err := s.exec(ctx, `INSERT INTO tenants (name, created_at) VALUES (?, ?)`, t.Name, micros(t.CreatedAt))
	if err != nil {
		if s.d.classify(err) == UniqueViolation {
			return errdefs.Conflict("tenant %q already exists", t.Name)
		}
		return fmt.Errorf("create tenant %s: %w", t.Name, err)
	}
	return nil
}

func (s *sqlStore) GetTenant(ctx context.Context, name string) (*store.Tenant, error) {
	var (
		t       store.Tenant
		created int64
	)
	err := s.queryRow(ctx, `SELECT name, created_at FROM tenants WHERE name = ?`, name).Scan(&t.Name, &created)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, errdefs.NotFound("tenant %q not found", name)
	}
	if err != nil {
		return nil, fmt.Errorf("get tenant %s: %w", name, err)
	}
	t.CreatedAt = fromMicros(created)
	return &t, nil
}

func (s *sqlStore) ListTenants(ctx context.Context) ([]*store.Tenant, error) {
	rows, err := s.query(ctx, `SELECT name, created_at FROM tenants ORDER BY name`)
	if err != nil {
		return nil, fmt.Errorf("list tenants: %w", err)
	}
	defer rows.Close()
	var out []*store.Tenant
	for rows.Next() {
		var (
			t       store.Tenant
			created int64
		)
		if err := rows.Scan(&t.Name, &created); err != nil {
			return nil, fmt.Errorf("list tenants: %w", err)
		}
		t.CreatedAt = fromMicros(created)
		out = append(out, &t)
	}
	return out, rows.Err()
}

// DeleteTenant checks, revokes and deletes in one write transaction, so
// an object made concurrently either blocks the delete or fails for the
// tenant being gone (the server checks the tenant when a key is used).
func (s *sqlStore) DeleteTenant(ctx context.Context, name string, at time.Time) error {
	if at.IsZero() {
		return errdefs.Invalid("deletion time is zero")
	}
	return s.inTx(ctx, false, func(ctx context.Context, tx *sql.Tx) error {
		for _, c := range []struct{ what, q string }{
			{"sandbox", `SELECT COUNT(*) FROM sandboxes WHERE tenant = ? AND state <> 'deleted'`},
			{"volume", `SELECT COUNT(*) FROM volumes WHERE tenant = ? AND state <> 'deleted'`},
			{"snapshot", `SELECT COUNT(*) FROM snapshots WHERE tenant = ?`},
			// A tenant's own templates (deleting one removes its warm pool
			// and the pool's members): left behind, a pool would refill
			// for a tenant that is gone.
			{"template", `SELECT COUNT(*) FROM templates WHERE tenant = ?`},
		} {
			var n int64
			if err := s.txQueryRow(ctx, tx, s.d.rebind(c.q), name).Scan(&n); err != nil {
				return fmt.Errorf("delete tenant %s: %w", name, err)
			}
			if n > 0 {
				return errdefs.Conflict("tenant %q still owns %d %s(s): delete them first", name, n, c.what)
			}
		}
		res, err := s.txExec(ctx, tx, s.d.rebind(`DELETE FROM tenants WHERE name = ?`), name)
		if err != nil {
			return fmt.Errorf("delete tenant %s: %w", name, err)
		}
		if n, err := res.RowsAffected(); err != nil {
			return fmt.Errorf("delete tenant %s: %w", name, err)
		} else if n == 0 {
			return errdefs.NotFound("tenant %q not found", name)
		}
		for _, q := range []string{
			`DELETE FROM build_cache WHERE tenant = ?`,
			`DELETE FROM pools WHERE tenant = ?`,
		} {
			if _, err := s.txExec(ctx, tx, s.d.rebind(q), name); err != nil {
				return fmt.Errorf("delete tenant %s: %w", name, err)
			}
		}
		for _, q := range []string{
			`UPDATE api_keys SET revoked_at = ? WHERE tenant = ? AND revoked_at = 0`,
			`UPDATE leases SET revoked_at = ? WHERE tenant = ? AND revoked_at = 0`,
			`UPDATE port_tokens SET revoked_at = ? WHERE tenant = ? AND revoked_at = 0`,
		} {
			if _, err := s.txExec(ctx, tx, s.d.rebind(q), micros(at), name); err != nil {
				return fmt.Errorf("delete tenant %s: revoke: %w", name, err)
			}
		}
		return nil
	})
}

// ---- leases ----

const leaseCols = `id, sandbox_id, tenant, key_id, scopes, created_at, expires_at, revoked_at`

func (s *sqlStore) CreateLease(ctx context.Context, l *store.Lease) error {
	if l.ID == "" || l.SandboxID == "" {
		return errdefs.Invalid("a lease needs an id and a sandbox")
	}
	scopes, err := json.Marshal(l.Scopes)
	if err != nil {
		return err
	}
	_, err = s.exec(ctx, `INSERT INTO leases (`+leaseCols+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?)`,
		l.ID, l.SandboxID, l.Tenant, l.KeyID, string(scopes), micros(l.CreatedAt), micros(l.ExpiresAt), micros(l.RevokedAt))
	if err != nil {
		if s.d.classify(err) == UniqueViolation {
			return errdefs.Conflict("lease %s already exists", l.ID)
		}
		return fmt.Errorf("create lease: %w", err)
	}
	return nil
}

func (s *sqlStore) GetLease(ctx context.Context, id string) (*store.Lease, error) {
	var (
		l                         store.Lease
		scopes                    string
		created, expires, revoked int64
	)
	err := s.queryRow(ctx, `SELECT `+leaseCols+` FROM leases WHERE id = ?`, id).
		Scan(&l.ID, &l.SandboxID, &l.Tenant, &l.KeyID, &scopes, &created, &expires, &revoked)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, errdefs.NotFound("lease not found")
	}
	if err != nil {
		return nil, fmt.Errorf("get lease: %w", err)
	}
	if err := json.Unmarshal([]byte(scopes), &l.Scopes); err != nil {
		return nil, fmt.Errorf("lease %s: scopes: %w", l.ID, err)
	}
	l.CreatedAt, l.ExpiresAt, l.RevokedAt = fromMicros(created), fromMicros(expires), fromMicros(revoked)
	return &l, nil
}

func (s *sqlStore) RevokeLease(ctx context.Context, o store.Owner, id string, at time.Time) error {
	if at.IsZero() {
		return errdefs.Invalid("revocation time is zero")
	}
	l, err := s.GetLease(ctx, id)
	if err == nil && !o.Sees(l.Tenant) {
		err = errdefs.NotFound("lease not found")
	}
	if err != nil {
		return err
	}
	if _, err := s.exec(ctx, `UPDATE leases SET revoked_at = ? WHERE id = ? AND revoked_at = 0`, micros(at), id); err != nil {
		return fmt.Errorf("revoke lease %s: %w", id, err)
	}
	return nil
}

func (s *sqlStore) RevokeLeases(ctx context.Context, sandboxID string, at time.Time, keep ...string) (int64, error) {
	if at.IsZero() {
		return 0, errdefs.Invalid("revocation time is zero")
	}
	if len(keep) > 16 {
		return 0, errdefs.Invalid("at most 16 leases kept")
	}
	q := `UPDATE leases SET revoked_at = ? WHERE sandbox_id = ? AND revoked_at = 0`
	args := []any{micros(at), sandboxID}
	for _, k := range keep {
		q += ` AND id <> ?`
		args = append(args, k)
	}
	res, err := s.exec(ctx, q, args...)
	if err != nil {
		return 0, fmt.Errorf("revoke leases of %s: %w", sandboxID, err)
	}
	return res.RowsAffected()
}

// ---- port tokens ----

const portTokenCols = `id, sandbox_id, tenant, port, key_id, created_by, created_at, expires_at, revoked_at`

func (s *sqlStore) CreatePortToken(ctx context.Context, t *store.PortToken) error {
	if t.ID == "" || t.SandboxID == "" || t.Port < 1 || t.Port > 65535 || t.ExpiresAt.IsZero() {
		return errdefs.Invalid("a port token needs an id, a sandbox, a port and an expiry")
	}
	_, err := s.exec(ctx, `INSERT INTO port_tokens (`+portTokenCols+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		t.ID, t.SandboxID, t.Tenant, int64(t.Port), t.KeyID, t.CreatedBy, micros(t.CreatedAt), micros(t.ExpiresAt), micros(t.RevokedAt))
	if err != nil {
		if s.d.classify(err) == UniqueViolation {
			return errdefs.Conflict("port token %s already exists", t.ID)
		}
		return fmt.Errorf("create port token: %w", err)
	}
	return nil
}

func scanPortToken(row scanner) (*store.PortToken, error) {
	var (
		t                         store.PortToken
		port                      int64
		created, expires, revoked int64
	)
	if err := row.Scan(&t.ID, &t.SandboxID, &t.Tenant, &port, &t.KeyID, &t.CreatedBy, &created, &expires, &revoked); err != nil {
		return nil, err
	}
	t.Port = int(port)
	t.CreatedAt, t.ExpiresAt, t.RevokedAt = fromMicros(created), fromMicros(expires), fromMicros(revoked)
	return &t, nil
}

func (s *sqlStore) GetPortToken(ctx context.Context, o store.Owner, id string) (*store.PortToken, error) {
	t, err := scanPortToken(s.queryRow(ctx, `SELECT `+portTokenCols+` FROM port_tokens WHERE id = ?`, id))
	if err == nil && !o.Sees(t.Tenant) {
		err = sql.ErrNoRows
	}
	if errors.Is(err, sql.ErrNoRows) {
		return nil, errdefs.NotFound("port token %s not found", id)
	}
	if err != nil {
		return nil, fmt.Errorf("get port token %s: %w", id, err)
	}
	return t, nil
}

func (s *sqlStore) ListPortTokens(ctx context.Context, o store.Owner, sandboxID string) ([]*store.PortToken, error) {
	q := `SELECT ` + portTokenCols + ` FROM port_tokens WHERE sandbox_id = ?`
	args := []any{sandboxID}
	if tenant, ok := o.Tenant(); ok {
		q += ` AND tenant = ?`
		args = append(args, tenant)
	}
	rows, err := s.query(ctx, q+` ORDER BY created_at, id`, args...)
	if err != nil {
		return nil, fmt.Errorf("list port tokens: %w", err)
	}
	defer rows.Close()
	var out []*store.PortToken
	for rows.Next() {
		t, err := scanPortToken(rows)
		if err != nil {
			return nil, fmt.Errorf("list port tokens: %w", err)
		}
		out = append(out, t)
	}
	return out, rows.Err()
}

// RevokePortToken is idempotent: revoking a revoked token keeps the first
// time.
func (s *sqlStore) RevokePortToken(ctx context.Context, o store.Owner, id string, at time.Time) error {
	if at.IsZero() {
		return errdefs.Invalid("revocation time is zero")
	}
	if _, err := s.GetPortToken(ctx, o, id); err != nil {
		return err
	}
	if _, err := s.exec(ctx, `UPDATE port_tokens SET revoked_at = ? WHERE id = ? AND revoked_at = 0`, micros(at), id); err != nil {
		return fmt.Errorf("revoke port token %s: %w", id, err)
	}
	return nil
}
