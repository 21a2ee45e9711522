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

const idemCols = `scope, route, idem_key, request_hash, ids, owner, state, status, content_type, body, created_at, expires_at`

const (
	idemPending = "pending"
	idemDone    = "done"
)

func scanIdem(sc scanner) (*store.IdempotencyKey, error) {
	var (
		k                store.IdempotencyKey
		ids, state, body string
		created, expires int64
	)
	if err := sc.Scan(&k.Scope, &k.Route, &k.Key, &k.RequestHash, &ids, &k.Owner, &state, &k.Status,
		&k.ContentType, &body, &created, &expires); err != nil {
		return nil, err
	}
	if err := json.Unmarshal([]byte(ids), &k.IDs); err != nil {
		return nil, fmt.Errorf("idempotency key %q: ids: %w", k.Key, err)
	}
	k.Done = state == idemDone
	if body != "" {
		k.Body = []byte(body)
	}
	k.CreatedAt, k.ExpiresAt = fromMicros(created), fromMicros(expires)
	return &k, nil
}

func idemState(done bool) string {
	if done {
		return idemDone
	}
	return idemPending
}

func idsJSON(ids []string) string {
	if ids == nil {
		ids = []string{}
	}
	b, _ := json.Marshal(ids)
	return string(b)
}

// PutIdempotencyKey is an INSERT that collides on the primary key: of
// concurrent puts the database lets exactly one in. A stored key that has
// expired (not yet purged) is removed and the insert tried again.
func (s *sqlStore) PutIdempotencyKey(ctx context.Context, k *store.IdempotencyKey) (*store.IdempotencyKey, bool, error) {
	if k.Scope == "" || k.Route == "" || k.Key == "" {
		return nil, false, errdefs.Invalid("idempotency key: scope, route and key are required")
	}
	for attempt := 0; ; attempt++ {
		_, err := s.exec(ctx, `INSERT INTO idempotency_keys (`+idemCols+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
			k.Scope, k.Route, k.Key, k.RequestHash, idsJSON(k.IDs), k.Owner, idemState(k.Done), k.Status,
			k.ContentType, string(k.Body), micros(k.CreatedAt), micros(k.ExpiresAt))
		if err == nil {
			return k, true, nil
		}
		if s.d.classify(err) != UniqueViolation || attempt >= 10 {
			return nil, false, fmt.Errorf("put idempotency key: %w", err)
		}
		cur, err := s.GetIdempotencyKey(ctx, k.Scope, k.Route, k.Key)
		if errors.Is(err, errdefs.ErrNotFound) {
			continue // removed in between (an attempt that failed): try again
		} else if err != nil {
			return nil, false, err
		}
		if !cur.ExpiresAt.IsZero() && !cur.ExpiresAt.After(k.CreatedAt) {
			// Expired: gone as far as callers are concerned.
			if _, err := s.exec(ctx, `DELETE FROM idempotency_keys WHERE scope = ? AND route = ? AND idem_key = ? AND expires_at = ?`,
				k.Scope, k.Route, k.Key, micros(cur.ExpiresAt)); err != nil {
				return nil, false, fmt.Errorf("removing expired idempotency key: %w", err)
			}
			continue
		}
		return cur, false, nil
	}
}

func (s *sqlStore) GetIdempotencyKey(ctx context.Context, scope, route, key string) (*store.IdempotencyKey, error) {
	k, err := scanIdem(s.queryRow(ctx, `SELECT `+idemCols+` FROM idempotency_keys WHERE scope = ? AND route = ? AND idem_key = ?`,
		scope, route, key))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, errdefs.NotFound("idempotency key %q not found", key)
	}
	return k, err
}

func (s *sqlStore) UpdateIdempotencyKey(ctx context.Context, k *store.IdempotencyKey, owner string) error {
	res, err := s.exec(ctx, `UPDATE idempotency_keys SET ids = ?, owner = ?, state = ?, status = ?, content_type = ?, body = ?
		WHERE scope = ? AND route = ? AND idem_key = ? AND owner = ? AND state = ?`,
		idsJSON(k.IDs), k.Owner, idemState(k.Done), k.Status, k.ContentType, string(k.Body),
		k.Scope, k.Route, k.Key, owner, idemPending)
	if err != nil {
		return fmt.Errorf("update idempotency key: %w", err)
	}
	if n, err := res.RowsAffected(); err != nil {
		return err
	} else if n == 0 {
		if _, err := s.GetIdempotencyKey(ctx, k.Scope, k.Route, k.Key); err != nil {
			return err
		}
		return errdefs.Conflict("idempotency key %q is held by another attempt or done", k.Key)
	}
	return nil
}

func (s *sqlStore) DeleteIdempotencyKey(ctx context.Context, scope, route, key, owner string) error {
	if _, err := s.exec(ctx, `DELETE FROM idempotency_keys WHERE scope = ? AND route = ? AND idem_key = ? AND owner = ? AND state = ?`,
		scope, route, key, owner, idemPending); err != nil {
		return fmt.Errorf("delete idempotency key: %w", err)
	}
	return nil
}

func (s *sqlStore) PurgeIdempotencyKeys(ctx context.Context, now time.Time) (int64, error) {
	res, err := s.exec(ctx, `DELETE FROM idempotency_keys WHERE expires_at > 0 AND expires_at <= ?`, micros(now))
	if err != nil {
		return 0, fmt.Errorf("purge idempotency keys: %w", err)
	}
	return res.RowsAffected()
}
