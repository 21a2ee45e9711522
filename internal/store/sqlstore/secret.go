package sqlstore

import (
	"context"
	"database/sql"
	"encoding/base64"
	"errors"
	"fmt"

	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/internal/secrets"
	"github.com/berth-sh/berth/internal/store"
)

const secretCols = `tenant, name, ciphertext, nonce, wrapped_key, key_id, created_at, updated_at`

var b64 = base64.StdEncoding

func scanSecret(sc scanner) (*store.Secret, error) {
	var (
		s                  store.Secret
		ct, nonce, wrapped string
		created, updated   int64
	)
	if err := sc.Scan(&s.Tenant, &s.Name, &ct, &nonce, &wrapped, &s.Sealed.KeyID, &created, &updated); err != nil {
		return nil, err
	}
	var err1, err2, err3 error
	s.Sealed.Ciphertext, err1 = b64.DecodeString(ct)
	s.Sealed.Nonce, err2 = b64.DecodeString(nonce)
	s.Sealed.WrappedKey, err3 = b64.DecodeString(wrapped)
	if err := errors.Join(err1, err2, err3); err != nil {
		return nil, fmt.Errorf("secret %s: decode sealed value: %w", s.Name, err)
	}
	s.CreatedAt, s.UpdatedAt = fromMicros(created), fromMicros(updated)
	return &s, nil
}

func scanSecretMeta(sc scanner) (*store.Secret, error) {
	var (
		s                store.Secret
		created, updated int64
	)
	if err := sc.Scan(&s.Tenant, &s.Name, &s.Sealed.KeyID, &created, &updated); err != nil {
		return nil, err
	}
	s.CreatedAt, s.UpdatedAt = fromMicros(created), fromMicros(updated)
	return &s, nil
}

func checkSecret(sec *store.Secret) error {
	if err := secrets.CheckName(sec.Name); err != nil {
		return err
	}
	if len(sec.Sealed.Ciphertext) == 0 || len(sec.Sealed.Nonce) == 0 || len(sec.Sealed.WrappedKey) == 0 || sec.Sealed.KeyID == "" {
		return errdefs.Invalid("secret %s: a sealed value is required", sec.Name)
	}
	return nil
}

// PutSecret updates first and inserts if nothing was there; an insert that
// loses to a concurrent one updates instead.
func (s *sqlStore) PutSecret(ctx context.Context, sec *store.Secret) (bool, error) {
	if err := checkSecret(sec); err != nil {
		return false, err
	}
	ct, nonce, wrapped := b64.EncodeToString(sec.Sealed.Ciphertext), b64.EncodeToString(sec.Sealed.Nonce), b64.EncodeToString(sec.Sealed.WrappedKey)
	for attempt := 0; ; attempt++ {
		res, err := s.exec(ctx, `UPDATE secrets SET ciphertext = ?, nonce = ?, wrapped_key = ?, key_id = ?, updated_at = ? WHERE tenant = ? AND name = ?`,
			ct, nonce, wrapped, sec.Sealed.KeyID, micros(sec.UpdatedAt), sec.Tenant, sec.Name)
		if err != nil {
			return false, fmt.Errorf("put secret %s: %w", sec.Name, err)
		}
		if n, err := res.RowsAffected(); err != nil {
			return false, fmt.Errorf("put secret %s: %w", sec.Name, err)
		} else if n > 0 {
			return false, nil
		}
		_, err = s.exec(ctx, `INSERT INTO secrets (`+secretCols+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?)`,
			sec.Tenant, sec.Name, ct, nonce, wrapped, sec.Sealed.KeyID, micros(sec.CreatedAt), micros(sec.UpdatedAt))
		if err == nil {
			return true, nil
		}
		if s.d.classify(err) != UniqueViolation || attempt >= 10 {
			return false, fmt.Errorf("put secret %s: %w", sec.Name, err)
		}
	}
}

func (s *sqlStore) GetSecret(ctx context.Context, o store.Owner, name string) (*store.Secret, error) {
	q := `SELECT ` + secretCols + ` FROM secrets WHERE name = ?`
	args := []any{name}
	if t, ok := o.Tenant(); ok {
		q += ` AND tenant = ?`
		args = append(args, t)
	} else {
		return nil, errdefs.Invalid("secret %s: a tenant is required", name)
	}
	sec, err := scanSecret(s.queryRow(ctx, q, args...))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, errdefs.NotFound("secret %q not found", name)
	}
	if err != nil {
		return nil, fmt.Errorf("get secret %s: %w", name, err)
	}
	return sec, nil
}

// ListSecrets pages by name, which is unique only within a tenant, so it
// needs one.
func (s *sqlStore) ListSecrets(ctx context.Context, o store.Owner, p store.Page) ([]*store.Secret, string, error) {
	if _, ok := o.Tenant(); !ok {
		return nil, "", errdefs.Invalid("listing secrets needs a tenant")
	}
	q := pageQuery{base: `SELECT tenant, name, key_id, created_at, updated_at FROM secrets`}
	q.owner(o, "tenant")
	return listPage(ctx, s, q, bySecretName, p, scanSecretMeta,
		func(sec *store.Secret) (int64, string) { return 0, sec.Name })
}

func (s *sqlStore) DeleteSecret(ctx context.Context, o store.Owner, name string) error {
	t, ok := o.Tenant()
	if !ok {
		return errdefs.Invalid("secret %s: a tenant is required", name)
	}
	res, err := s.exec(ctx, `DELETE FROM secrets WHERE tenant = ? AND name = ?`, t, name)
	if err != nil {
		return fmt.Errorf("delete secret %s: %w", name, err)
	}
	if n, err := res.RowsAffected(); err != nil {
		return fmt.Errorf("delete secret %s: %w", name, err)
	} else if n == 0 {
		return errdefs.NotFound("secret %q not found", name)
	}
	return nil
}

func (s *sqlStore) SecretsNotUnder(ctx context.Context, keyID string, limit int) ([]*store.Secret, error) {
	if limit <= 0 {
		return nil, errdefs.Invalid("secrets to re-wrap: a positive limit is required")
	}
	rows, err := s.query(ctx, `SELECT `+secretCols+` FROM secrets WHERE key_id <> ? ORDER BY tenant, name LIMIT ?`, keyID, limit)
	if err != nil {
		return nil, fmt.Errorf("secrets to re-wrap: %w", err)
	}
	defer rows.Close()
	var out []*store.Secret
	for rows.Next() {
		sec, err := scanSecret(rows)
		if err != nil {
			return nil, fmt.Errorf("secrets to re-wrap: %w", err)
		}
		out = append(out, sec)
	}
	return out, rows.Err()
}

func (s *sqlStore) SecretKeyIDs(ctx context.Context) ([]string, error) {
	rows, err := s.query(ctx, `SELECT DISTINCT key_id FROM secrets ORDER BY key_id`)
	if err != nil {
		return nil, fmt.Errorf("secrets' key ids: %w", err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return nil, fmt.Errorf("secrets' key ids: %w", err)
		}
		out = append(out, id)
	}
	return out, rows.Err()
}

func (s *sqlStore) RewrapSecret(ctx context.Context, sec *store.Secret, prev secrets.Sealed) error {
	if err := checkSecret(sec); err != nil {
		return err
	}
	res, err := s.exec(ctx, `UPDATE secrets SET wrapped_key = ?, key_id = ? WHERE tenant = ? AND name = ? AND wrapped_key = ?`,
		b64.EncodeToString(sec.Sealed.WrappedKey), sec.Sealed.KeyID, sec.Tenant, sec.Name, b64.EncodeToString(prev.WrappedKey))
	if err != nil {
		return fmt.Errorf("re-wrap secret %s: %w", sec.Name, err)
	}
	if n, err := res.RowsAffected(); err != nil {
		return fmt.Errorf("re-wrap secret %s: %w", sec.Name, err)
	} else if n == 0 {
		return errdefs.Conflict("secret %q changed or went while it was re-wrapped", sec.Name)
	}
	return nil
}
