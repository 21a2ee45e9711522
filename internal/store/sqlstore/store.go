package sqlstore

import (
	"context"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/internal/sandbox"
	"github.com/berth-sh/berth/internal/store"
)

// New returns a Store over already migrated databases. Every write goes
// through writer and every read through reader; they may be the same pool.
// SQLite passes a one-connection writer so in-process writers queue in
// database/sql instead of failing with SQLITE_BUSY. close runs on Close.
func New(writer, reader *sql.DB, d Dialect, close func() error) store.Store {
	return &sqlStore{w: writer, r: reader, d: d, close: close}
}

type sqlStore struct {
	w, r  *sql.DB
	d     Dialect
	close func() error
}

func (s *sqlStore) Close() error {
	if s.close == nil {
		return nil
	}
	return s.close()
}

func (s *sqlStore) exec(ctx context.Context, q string, args ...any) (sql.Result, error) {
	return s.w.ExecContext(ctx, s.d.rebind(q), args...)
}

func (s *sqlStore) query(ctx context.Context, q string, args ...any) (*sql.Rows, error) {
	return s.r.QueryContext(ctx, s.d.rebind(q), args...)
}

func (s *sqlStore) queryRow(ctx context.Context, q string, args ...any) *sql.Row {
	return s.r.QueryRowContext(ctx, s.d.rebind(q), args...)
}

// micros encodes t as unix microseconds in UTC; the zero time is 0.
func micros(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMicro()
}

// fromMicros is the inverse of micros.
func fromMicros(us int64) time.Time {
	if us == 0 {
		return time.Time{}
	}
	return time.UnixMicro(us).UTC()
}

// scanner is a *sql.Row or *sql.Rows.
type scanner interface{ Scan(dest ...any) error }

// ---- sandboxes ----

const sandboxCols = `id, tenant, name, state, spec, created_at, updated_at, started_at, deleted_at, cause, reason, error, generation, last_activity_at, paused_at, stopped_at, prev_state, node`

func scanSandbox(sc scanner) (*sandbox.Sandbox, error) {
	var (
		sb                                      sandbox.Sandbox
		state, spec, cause, prev                string
		created, updated, started, deleted, gen int64
		activity, paused, stopped               int64
	)
	if err := sc.Scan(&sb.ID, &sb.Tenant, &sb.Name, &state, &spec, &created, &updated, &started, &deleted,
		&cause, &sb.Reason, &sb.Error, &gen, &activity, &paused, &stopped, &prev, &sb.Node); err != nil {
		return nil, err
	}
	if err := json.Unmarshal([]byte(spec), &sb.Spec); err != nil {
		return nil, fmt.Errorf("sandbox %s: decode spec: %w", sb.ID, err)
	}
	sb.State = sandbox.State(state)
	sb.Cause = sandbox.Cause(cause)
	sb.CreatedAt, sb.UpdatedAt = fromMicros(created), fromMicros(updated)
	sb.StartedAt, sb.DeletedAt = fromMicros(started), fromMicros(deleted)
	sb.Generation = gen
	sb.LastActivityAt, sb.PausedAt, sb.StoppedAt = fromMicros(activity), fromMicros(paused), fromMicros(stopped)
	sb.PrevState = sandbox.State(prev)
	return &sb, nil
}

func (s *sqlStore) CreateSandbox(ctx context.Context, sb *sandbox.Sandbox) error {
	if sb.ID == "" {
		return errdefs.Invalid("sandbox id is empty")
	}
	spec, err := json.Marshal(sb.Spec)
	if err != nil {
		return fmt.Errorf("sandbox %s: encode spec: %w", sb.ID, err)
	}
	_, err = s.exec(ctx, `INSERT INTO sandboxes (`+sandboxCols+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 1, ?, ?, ?, ?, ?)`,
		sb.ID, sb.Tenant, sb.Name, string(sb.State), string(spec),
		micros(sb.CreatedAt), micros(sb.UpdatedAt), micros(sb.StartedAt), micros(sb.DeletedAt),
		string(sb.Cause), sb.Reason, sb.Error,
		micros(sb.LastActivityAt), micros(sb.PausedAt), micros(sb.StoppedAt), string(sb.PrevState), sb.Node)
	if err != nil {
		if s.d.classify(err) == UniqueViolation {
			return s.sandboxConflict(ctx, sb)
		}
		return fmt.Errorf("create sandbox %s: %w", sb.ID, err)
	}
	sb.Generation = 1
	return nil
}

// sandboxConflict explains a unique violation on sandboxes: either the id or
// the live name is taken.
func (s *sqlStore) sandboxConflict(ctx context.Context, sb *sandbox.Sandbox) error {
	var one int
	err := s.w.QueryRowContext(ctx, s.d.rebind(`SELECT 1 FROM sandboxes WHERE id = ?`), sb.ID).Scan(&one)
	if err == nil {
		return errdefs.Conflict("sandbox %s already exists", sb.ID)
	}
	return errdefs.NameTaken("a sandbox named %q already exists; choose another name or remove it first", sb.Name)
}

func (s *sqlStore) GetSandbox(ctx context.Context, id string) (*sandbox.Sandbox, error) {
	sb, err := scanSandbox(s.queryRow(ctx, `SELECT `+sandboxCols+` FROM sandboxes WHERE id = ?`, id))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, errdefs.NotFound("sandbox %s not found", id)
	}
	if err != nil {
		return nil, fmt.Errorf("get sandbox %s: %w", id, err)
	}
	return sb, nil
}

func (s *sqlStore) GetSandboxByName(ctx context.Context, tenant, name string) (*sandbox.Sandbox, error) {
	if name == "" {
		return nil, errdefs.NotFound("sandbox with an empty name not found")
	}
	sb, err := scanSandbox(s.queryRow(ctx, `SELECT `+sandboxCols+` FROM sandboxes
		WHERE tenant = ? AND name = ? AND state <> ?`, tenant, name, string(sandbox.StateDeleted)))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, errdefs.NotFound("sandbox %q not found", name)
	}
	if err != nil {
		return nil, fmt.Errorf("get sandbox %q: %w", name, err)
	}
	return sb, nil
}

func (s *sqlStore) ListSandboxes(ctx context.Context, f store.SandboxFilter) ([]*sandbox.Sandbox, error) {
	var (
		where []string
		args  []any
	)
	if f.Tenant != "" {
		where = append(where, "tenant = ?")
		args = append(args, f.Tenant)
	}
	if f.Node != "" {
		where = append(where, "node = ?")
		args = append(args, f.Node)
	}
	if !f.IncludeDeleted {
		where = append(where, "state <> ?")
		args = append(args, string(sandbox.StateDeleted))
	}
	if len(f.States) > 0 {
		where = append(where, "state IN (?"+strings.Repeat(", ?", len(f.States)-1)+")")
		for _, st := range f.States {
			args = append(args, string(st))
		}
	}
	q := `SELECT ` + sandboxCols + ` FROM sandboxes`
	if len(where) > 0 {
		q += ` WHERE ` + strings.Join(where, " AND ")
	}
	q += ` ORDER BY created_at, id`
	if f.Limit > 0 {
		q += ` LIMIT ?`
		args = append(args, f.Limit)
	}
	rows, err := s.query(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("list sandboxes: %w", err)
	}
	defer rows.Close()
	var out []*sandbox.Sandbox
	for rows.Next() {
		sb, err := scanSandbox(rows)
		if err != nil {
			return nil, fmt.Errorf("list sandboxes: %w", err)
		}
		out = append(out, sb)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list sandboxes: %w", err)
	}
	return out, nil
}

func (s *sqlStore) UpdateSandbox(ctx context.Context, sb *sandbox.Sandbox) error {
	spec, err := json.Marshal(sb.Spec)
	if err != nil {
		return fmt.Errorf("sandbox %s: encode spec: %w", sb.ID, err)
	}
	res, err := s.exec(ctx, `UPDATE sandboxes SET tenant = ?, name = ?, state = ?, spec = ?,
		created_at = ?, updated_at = ?, started_at = ?, deleted_at = ?,
		cause = ?, reason = ?, error = ?, generation = generation + 1,
		last_activity_at = ?, paused_at = ?, stopped_at = ?, prev_state = ?, node = ?
		WHERE id = ? AND generation = ?`,
		sb.Tenant, sb.Name, string(sb.State), string(spec),
		micros(sb.CreatedAt), micros(sb.UpdatedAt), micros(sb.StartedAt), micros(sb.DeletedAt),
		string(sb.Cause), sb.Reason, sb.Error,
		micros(sb.LastActivityAt), micros(sb.PausedAt), micros(sb.StoppedAt), string(sb.PrevState), sb.Node,
		sb.ID, sb.Generation)
	if err != nil {
		if s.d.classify(err) == UniqueViolation {
			return errdefs.NameTaken("a sandbox named %q already exists; choose another name or remove it first", sb.Name)
		}
		return fmt.Errorf("update sandbox %s: %w", sb.ID, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return fmt.Errorf("update sandbox %s: %w", sb.ID, err)
	}
	if n == 0 {
		// Tell a vanished record from a stale copy.
		var gen int64
		err := s.w.QueryRowContext(ctx, s.d.rebind(`SELECT generation FROM sandboxes WHERE id = ?`), sb.ID).Scan(&gen)
		switch {
		case errors.Is(err, sql.ErrNoRows):
			return errdefs.NotFound("sandbox %s not found", sb.ID)
		case err != nil:
			return fmt.Errorf("update sandbox %s: %w", sb.ID, err)
		}
		return errdefs.Conflict("sandbox %s was modified concurrently (have generation %d, stored %d); reload it and retry",
			sb.ID, sb.Generation, gen)
	}
	sb.Generation++
	return nil
}

func (s *sqlStore) PurgeSandbox(ctx context.Context, id string) (err error) {
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("purge sandbox %s: %w", id, err)
	}
	defer func() {
		if err != nil {
			_ = tx.Rollback()
		}
	}()
	// Explicit rather than relying on ON DELETE CASCADE, which needs
	// foreign-key enforcement switched on.
	if _, err := tx.ExecContext(ctx, s.d.rebind(`DELETE FROM events WHERE sandbox_id = ?`), id); err != nil {
		return fmt.Errorf("purge sandbox %s: events: %w", id, err)
	}
	if _, err := tx.ExecContext(ctx, s.d.rebind(`DELETE FROM flows WHERE sandbox_id = ?`), id); err != nil {
		return fmt.Errorf("purge sandbox %s: flows: %w", id, err)
	}
	res, err := tx.ExecContext(ctx, s.d.rebind(`DELETE FROM sandboxes WHERE id = ?`), id)
	if err != nil {
		return fmt.Errorf("purge sandbox %s: %w", id, err)
	}
	if n, err := res.RowsAffected(); err != nil {
		return fmt.Errorf("purge sandbox %s: %w", id, err)
	} else if n == 0 {
		return errdefs.NotFound("sandbox %s not found", id)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("purge sandbox %s: commit: %w", id, err)
	}
	return nil
}

// ---- events ----

func (s *sqlStore) AppendEvent(ctx context.Context, ev *sandbox.Event) error {
	var id int64
	q := s.d.rebind(`INSERT INTO events
		(sandbox_id, at, type, from_state, to_state, actor, cause, reason, outcome, message)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?) RETURNING id`)
	args := []any{ev.SandboxID, micros(ev.Time), ev.Type, string(ev.From), string(ev.To), ev.Actor,
		string(ev.Cause), ev.Reason, ev.Outcome, ev.Message}
	var err error
	if s.d.EventOrderLock == "" {
		err = s.w.QueryRowContext(ctx, q, args...).Scan(&id)
	} else {
		err = s.appendEventLocked(ctx, q, args, &id)
	}
	if err != nil {
		if s.d.classify(err) == ForeignKeyViolation {
			return errdefs.NotFound("sandbox %s not found", ev.SandboxID)
		}
		return fmt.Errorf("append event to sandbox %s: %w", ev.SandboxID, err)
	}
	ev.ID = id
	return nil
}

// appendEventLocked runs the insert in a transaction behind the dialect's
// EventOrderLock, so ids commit in the order they are drawn.
func (s *sqlStore) appendEventLocked(ctx context.Context, q string, args []any, id *int64) (err error) {
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			_ = tx.Rollback()
		}
	}()
	if _, err := tx.ExecContext(ctx, s.d.EventOrderLock); err != nil {
		return fmt.Errorf("lock: %w", err)
	}
	if err := tx.QueryRowContext(ctx, q, args...).Scan(id); err != nil {
		return err
	}
	return tx.Commit()
}

func (s *sqlStore) ListEvents(ctx context.Context, sandboxID string, afterID int64, limit int) ([]*sandbox.Event, error) {
	q := `SELECT id, sandbox_id, at, type, from_state, to_state, actor, cause, reason, outcome, message
		FROM events WHERE sandbox_id = ? AND id > ? ORDER BY id`
	args := []any{sandboxID, afterID}
	if limit > 0 {
		q += ` LIMIT ?`
		args = append(args, limit)
	}
	rows, err := s.query(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("list events of sandbox %s: %w", sandboxID, err)
	}
	defer rows.Close()
	var out []*sandbox.Event
	for rows.Next() {
		var (
			ev              sandbox.Event
			at              int64
			from, to, cause string
		)
		if err := rows.Scan(&ev.ID, &ev.SandboxID, &at, &ev.Type, &from, &to, &ev.Actor, &cause,
			&ev.Reason, &ev.Outcome, &ev.Message); err != nil {
			return nil, fmt.Errorf("list events of sandbox %s: %w", sandboxID, err)
		}
		ev.Time = fromMicros(at)
		ev.From, ev.To, ev.Cause = sandbox.State(from), sandbox.State(to), sandbox.Cause(cause)
		out = append(out, &ev)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list events of sandbox %s: %w", sandboxID, err)
	}
	return out, nil
}

// ---- templates ----

const templateCols = `name, layers, config, builtin, source, size, created_at`

func scanTemplate(sc scanner) (*store.Template, error) {
	var (
		t              store.Template
		layers, config string
		created        int64
	)
	if err := sc.Scan(&t.Name, &layers, &config, &t.Builtin, &t.Source, &t.Size, &created); err != nil {
		return nil, err
	}
	if err := json.Unmarshal([]byte(layers), &t.Layers); err != nil {
		return nil, fmt.Errorf("template %s: decode layers: %w", t.Name, err)
	}
	if err := json.Unmarshal([]byte(config), &t.Config); err != nil {
		return nil, fmt.Errorf("template %s: decode config: %w", t.Name, err)
	}
	t.CreatedAt = fromMicros(created)
	return &t, nil
}

func (s *sqlStore) PutTemplate(ctx context.Context, t *store.Template) error {
	if t.Name == "" {
		return errdefs.Invalid("template name is empty")
	}
	layers, err := json.Marshal(t.Layers)
	if err != nil {
		return fmt.Errorf("template %s: encode layers: %w", t.Name, err)
	}
	config, err := json.Marshal(t.Config)
	if err != nil {
		return fmt.Errorf("template %s: encode config: %w", t.Name, err)
	}
	_, err = s.exec(ctx, `INSERT INTO templates (`+templateCols+`) VALUES (?, ?, ?, ?, ?, ?, ?)
		ON CONFLICT (name) DO UPDATE SET layers = excluded.layers, config = excluded.config,
		builtin = excluded.builtin, source = excluded.source, size = excluded.size,
		created_at = excluded.created_at`,
		t.Name, string(layers), string(config), t.Builtin, t.Source, t.Size, micros(t.CreatedAt))
	if err != nil {
		return fmt.Errorf("put template %s: %w", t.Name, err)
	}
	return nil
}

func (s *sqlStore) GetTemplate(ctx context.Context, name string) (*store.Template, error) {
	t, err := scanTemplate(s.queryRow(ctx, `SELECT `+templateCols+` FROM templates WHERE name = ?`, name))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, errdefs.NotFound("template %q not found", name)
	}
	if err != nil {
		return nil, fmt.Errorf("get template %s: %w", name, err)
	}
	return t, nil
}

func (s *sqlStore) ListTemplates(ctx context.Context) ([]*store.Template, error) {
	rows, err := s.query(ctx, `SELECT `+templateCols+` FROM templates ORDER BY name`)
	if err != nil {
		return nil, fmt.Errorf("list templates: %w", err)
	}
	defer rows.Close()
	var out []*store.Template
	for rows.Next() {
		t, err := scanTemplate(rows)
		if err != nil {
			return nil, fmt.Errorf("list templates: %w", err)
		}
		out = append(out, t)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list templates: %w", err)
	}
	return out, nil
}

func (s *sqlStore) DeleteTemplate(ctx context.Context, name string) error {
	res, err := s.exec(ctx, `DELETE FROM templates WHERE name = ?`, name)
	if err != nil {
		return fmt.Errorf("delete template %s: %w", name, err)
	}
	if n, err := res.RowsAffected(); err != nil {
		return fmt.Errorf("delete template %s: %w", name, err)
	} else if n == 0 {
		return errdefs.NotFound("template %q not found", name)
	}
	return nil
}

// ---- API keys ----

const apiKeyCols = `id, name, tenant, hash, scopes, created_at, revoked_at`

func scanAPIKey(sc scanner) (*store.APIKey, error) {
	var (
		k                store.APIKey
		hash, scopes     string
		created, revoked int64
	)
	if err := sc.Scan(&k.ID, &k.Name, &k.Tenant, &hash, &scopes, &created, &revoked); err != nil {
		return nil, err
	}
	var err error
	if k.Hash, err = hex.DecodeString(hash); err != nil {
		return nil, fmt.Errorf("api key %s: decode hash: %w", k.ID, err)
	}
	if err := json.Unmarshal([]byte(scopes), &k.Scopes); err != nil {
		return nil, fmt.Errorf("api key %s: decode scopes: %w", k.ID, err)
	}
	k.CreatedAt, k.RevokedAt = fromMicros(created), fromMicros(revoked)
	return &k, nil
}

func (s *sqlStore) CreateAPIKey(ctx context.Context, k *store.APIKey) error {
	if k.ID == "" || len(k.Hash) == 0 {
		return errdefs.Invalid("api key needs an id and a hash")
	}
	scopes, err := json.Marshal(k.Scopes)
	if err != nil {
		return fmt.Errorf("api key %s: encode scopes: %w", k.ID, err)
	}
	_, err = s.exec(ctx, `INSERT INTO api_keys (`+apiKeyCols+`) VALUES (?, ?, ?, ?, ?, ?, ?)`,
		k.ID, k.Name, k.Tenant, hex.EncodeToString(k.Hash), string(scopes), micros(k.CreatedAt), micros(k.RevokedAt))
	if err != nil {
		if s.d.classify(err) == UniqueViolation {
			return errdefs.Conflict("an api key with id %s or the same secret already exists", k.ID)
		}
		return fmt.Errorf("create api key %s: %w", k.ID, err)
	}
	return nil
}

func (s *sqlStore) GetAPIKeyByHash(ctx context.Context, hash []byte) (*store.APIKey, error) {
	k, err := scanAPIKey(s.queryRow(ctx, `SELECT `+apiKeyCols+` FROM api_keys WHERE hash = ?`, hex.EncodeToString(hash)))
	if errors.Is(err, sql.ErrNoRows) {
		// The hash identifies a secret: keep it out of the message.
		return nil, errdefs.NotFound("api key not found")
	}
	if err != nil {
		return nil, fmt.Errorf("get api key: %w", err)
	}
	return k, nil
}

func (s *sqlStore) ListAPIKeys(ctx context.Context, tenant string) ([]*store.APIKey, error) {
	q, args := `SELECT `+apiKeyCols+` FROM api_keys`, []any{}
	if tenant != "" {
		q += ` WHERE tenant = ?`
		args = append(args, tenant)
	}
	rows, err := s.query(ctx, q+` ORDER BY created_at, id`, args...)
	if err != nil {
		return nil, fmt.Errorf("list api keys: %w", err)
	}
	defer rows.Close()
	var out []*store.APIKey
	for rows.Next() {
		k, err := scanAPIKey(rows)
		if err != nil {
			return nil, fmt.Errorf("list api keys: %w", err)
		}
		out = append(out, k)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list api keys: %w", err)
	}
	return out, nil
}

// RevokeAPIKey is idempotent: revoking a revoked key keeps the first time.
func (s *sqlStore) RevokeAPIKey(ctx context.Context, id string, at time.Time) error {
	if at.IsZero() {
		return errdefs.Invalid("revocation time is zero")
	}
	res, err := s.exec(ctx, `UPDATE api_keys SET revoked_at = ? WHERE id = ? AND revoked_at = 0`, micros(at), id)
	if err != nil {
		return fmt.Errorf("revoke api key %s: %w", id, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return fmt.Errorf("revoke api key %s: %w", id, err)
	}
	if n == 0 {
		var one int
		err := s.w.QueryRowContext(ctx, s.d.rebind(`SELECT 1 FROM api_keys WHERE id = ?`), id).Scan(&one)
		if errors.Is(err, sql.ErrNoRows) {
			return errdefs.NotFound("api key %s not found", id)
		}
		if err != nil {
			return fmt.Errorf("revoke api key %s: %w", id, err)
		}
	}
	return nil
}
