package sqlstore

import (
	"cmp"
	"context"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
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
	w, r    *sql.DB
	d       Dialect
	close   func() error
	written broadcast  // closed at each commit that appended events
	batch   batcher    // group commit (batch.go), with Dialect.GroupCommit
	stmts   stmtCache  // prepared statements, with Dialect.PrepareOnce
	heads   auditHeads // chain heads as last written, with Dialect.GroupCommit (audit.go)
}

// broadcast wakes every waiter at once: fire closes the channel wait
// handed out, and the next wait makes a new one. A writer never blocks
// on a waiter.
type broadcast struct {
	mu sync.Mutex
	ch chan struct{}
}

func (b *broadcast) wait() <-chan struct{} {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.ch == nil {
		b.ch = make(chan struct{})
	}
	return b.ch
}

func (b *broadcast) fire() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.ch != nil {
		close(b.ch)
		b.ch = nil
	}
}

func (s *sqlStore) Close() error {
	s.stmts.close()
	if s.close == nil {
		return nil
	}
	return s.close()
}

func (s *sqlStore) exec(ctx context.Context, q string, args ...any) (sql.Result, error) {
	if s.d.GroupCommit {
		var res result
		err := s.inBatch(ctx, false, func(ctx context.Context, tx *sql.Tx) error {
			r, err := s.txExec(ctx, tx, s.d.rebind(q), args...)
			if err != nil {
				return err
			}
			// Read now: a driver result asked later waits for the
			// connection, which the next batch holds.
			res.id, res.idErr = r.LastInsertId()
			res.rows, res.rowsErr = r.RowsAffected()
			return nil
		})
		return res, err
	}
	return s.w.ExecContext(ctx, s.d.rebind(q), args...)
}

// result is an sql.Result read while its statement's connection was held.
type result struct {
	id, rows       int64
	idErr, rowsErr error
}

func (r result) LastInsertId() (int64, error) { return r.id, r.idErr }
func (r result) RowsAffected() (int64, error) { return r.rows, r.rowsErr }

func (s *sqlStore) query(ctx context.Context, q string, args ...any) (*sql.Rows, error) {
	q = s.d.rebind(q)
	if st := s.prepared(ctx, s.r, q); st != nil {
		return st.QueryContext(ctx, args...)
	}
	return s.r.QueryContext(ctx, q, args...)
}

func (s *sqlStore) queryRow(ctx context.Context, q string, args ...any) *sql.Row {
	q = s.d.rebind(q)
	if st := s.prepared(ctx, s.r, q); st != nil {
		return st.QueryRowContext(ctx, args...)
	}
	return s.r.QueryRowContext(ctx, q, args...)
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

const sandboxCols = `id, tenant, name, state, spec, created_at, updated_at, started_at, deleted_at, cause, reason, error, generation, last_activity_at, paused_at, stopped_at, prev_state, node, replica`

func scanSandbox(sc scanner) (*sandbox.Sandbox, error) {
	var (
		sb                                      sandbox.Sandbox
		state, spec, cause, prev                string
		created, updated, started, deleted, gen int64
		activity, paused, stopped               int64
	)
	if err := sc.Scan(&sb.ID, &sb.Tenant, &sb.Name, &state, &spec, &created, &updated, &started, &deleted,
		&cause, &sb.Reason, &sb.Error, &gen, &activity, &paused, &stopped, &prev, &sb.Node, &sb.Replica); err != nil {
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

func (s *sqlStore) CreateSandbox(ctx context.Context, sb *sandbox.Sandbox, events ...*sandbox.Event) error {
	if sb.ID == "" {
		return errdefs.Invalid("sandbox id is empty")
	}
	spec, err := json.Marshal(sb.Spec)
	if err != nil {
		return fmt.Errorf("sandbox %s: encode spec: %w", sb.ID, err)
	}
	var (
		unique bool
		ids    []int64
	)
	err = s.inTx(ctx, len(events) > 0, func(ctx context.Context, tx *sql.Tx) error {
		_, err := s.txExec(ctx, tx, s.d.rebind(`INSERT INTO sandboxes (`+sandboxCols+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 1, ?, ?, ?, ?, ?, ?)`),
			sb.ID, sb.Tenant, sb.Name, string(sb.State), string(spec),
			micros(sb.CreatedAt), micros(sb.UpdatedAt), micros(sb.StartedAt), micros(sb.DeletedAt),
			string(sb.Cause), sb.Reason, sb.Error,
			micros(sb.LastActivityAt), micros(sb.PausedAt), micros(sb.StoppedAt), string(sb.PrevState), sb.Node, sb.Replica)
		if err != nil {
			unique = s.d.classify(err) == UniqueViolation
			return fmt.Errorf("create sandbox %s: %w", sb.ID, err)
		}
		ids, err = s.insertEvents(ctx, tx, sb.ID, events)
		return err
	})
	if unique {
		return s.sandboxConflict(ctx, sb)
	}
	if err != nil {
		return err
	}
	setEventIDs(events, sb.ID, ids)
	sb.Generation = 1
	return nil
}

// inTx runs fn in a write transaction, committed if fn returns nil. events
// says fn appends events: then it starts behind the dialect's
// EventOrderLock (see AppendEvent). fn runs its statements with the ctx it
// is given: with Dialect.GroupCommit, its caller's values without its
// cancellation, as one write of a batch (batch.go).
func (s *sqlStore) inTx(ctx context.Context, events bool, fn func(ctx context.Context, tx *sql.Tx) error) (err error) {
	if s.d.GroupCommit {
		return s.inBatch(ctx, events, fn)
	}
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	defer func() {
		if err != nil {
			_ = tx.Rollback()
		}
	}()
	if events && s.d.EventOrderLock != "" {
		if _, err := s.txExec(ctx, tx, s.d.EventOrderLock); err != nil {
			return fmt.Errorf("event order lock: %w", err)
		}
	}
	if err := fn(ctx, tx); err != nil {
		return err
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	if events {
		s.written.fire()
	}
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

func (s *sqlStore) GetSandbox(ctx context.Context, o store.Owner, id string) (*sandbox.Sandbox, error) {
	sb, err := scanSandbox(s.queryRow(ctx, `SELECT `+sandboxCols+` FROM sandboxes WHERE id = ?`, id))
	if err == nil && !o.Sees(sb.Tenant) {
		err = sql.ErrNoRows
	}
	if errors.Is(err, sql.ErrNoRows) {
		return nil, errdefs.NotFound("sandbox %s not found", id)
	}
	if err != nil {
		return nil, fmt.Errorf("get sandbox %s: %w", id, err)
	}
	return sb, nil
}

func (s *sqlStore) GetSandboxByName(ctx context.Context, o store.Owner, name string) (*sandbox.Sandbox, error) {
	if name == "" {
		return nil, errdefs.NotFound("sandbox with an empty name not found")
	}
	q := pageQuery{base: `SELECT ` + sandboxCols + ` FROM sandboxes`}
	q.and("name = ? AND state <> ?", name, string(sandbox.StateDeleted))
	q.owner(o, "tenant")
	// Two at most: a name is unique per tenant, so a second match is
	// another tenant's (AnyOwner).
	sbs, _, err := listPage(ctx, s, q, bySandboxCreated, store.Page{Limit: 2}, scanSandbox, sandboxKey)
	switch {
	case err != nil:
		return nil, fmt.Errorf("get sandbox %q: %w", name, err)
	case len(sbs) == 0:
		return nil, errdefs.NotFound("sandbox %q not found", name)
	case len(sbs) > 1:
		return nil, errdefs.Conflict("sandbox name %q is live in more than one tenant", name)
	}
	return sbs[0], nil
}

func sandboxKey(sb *sandbox.Sandbox) (int64, string) { return micros(sb.CreatedAt), sb.ID }

func (s *sqlStore) ListSandboxes(ctx context.Context, f store.SandboxFilter, p store.Page) ([]*sandbox.Sandbox, string, error) {
	q := pageQuery{base: `SELECT ` + sandboxCols + ` FROM sandboxes`}
	q.owner(f.Owner, "tenant")
	if f.Node != "" {
		q.and("node = ?", f.Node)
	}
	if !f.IncludeDeleted {
		q.and("state <> ?", string(sandbox.StateDeleted))
	}
	in := func(states []sandbox.State) (string, []any) {
		args := make([]any, 0, len(states))
		for _, st := range states {
			args = append(args, string(st))
		}
		return "state IN (?" + strings.Repeat(", ?", len(states)-1) + ")", args
	}
	switch {
	case len(f.KeptRootStates) > 0:
		kept, kargs := in(f.KeptRootStates)
		cond := "(" + kept + " AND " + s.specTrue("persistent") + " AND " + s.specTrue("persist_root") + ")"
		if len(f.States) > 0 {
			st, args := in(f.States)
			q.and("("+st+" OR "+cond+")", append(args, kargs...)...)
		} else {
			q.and(cond, kargs...)
		}
	case len(f.States) > 0:
		st, args := in(f.States)
		q.and(st, args...)
	}
	keys := make([]string, 0, len(f.Labels))
	for k := range f.Labels {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		expr, arg := s.specLabel(k)
		q.and(expr+" = ?", arg, f.Labels[k])
	}
	if f.Template != "" {
		q.and(s.specText("template")+" = ?", f.Template)
	}
	if !f.StartedAfter.IsZero() {
		q.and("started_at >= ?", micros(f.StartedAfter))
	}
	if !f.StartedBefore.IsZero() {
		q.and("started_at <> 0 AND started_at < ?", micros(f.StartedBefore))
	}
	if f.NoPool {
		q.and("COALESCE(" + s.specText("pool") + ", '') = ''")
	}
	if f.Pool != "" {
		q.and(s.specText("pool")+" = ?", f.Pool)
	}
	if f.Pooled {
		q.and("COALESCE(" + s.specText("pool") + ", '') <> ''")
	}
	o := bySandboxCreated
	if f.Newest {
		o = bySandboxNewest
	}
	return listPage(ctx, s, q, o, p, scanSandbox, sandboxKey)
}

// specText is the SQL of a top-level text field of the sandboxes' spec
// column (JSON); field is a constant of this package, never input.
func (s *sqlStore) specText(field string) string {
	if s.d.Name == "postgres" {
		return "(spec::jsonb ->> '" + field + "')"
	}
	return "json_extract(spec, '$." + field + "')"
}

// specTrue is the SQL condition that the spec's boolean field is true.
func (s *sqlStore) specTrue(field string) string {
	if s.d.Name == "postgres" {
		return "COALESCE((spec::jsonb ->> '" + field + "') = 'true', FALSE)"
	}
	return "COALESCE(json_extract(spec, '$." + field + "'), 0) = 1"
}

// specLabel is the SQL of label key k of the spec and its bound argument
// (the key is an argument, never spliced into the query).
func (s *sqlStore) specLabel(k string) (string, any) {
	if s.d.Name == "postgres" {
		return "(spec::jsonb -> 'labels' ->> ?)", k
	}
	return "json_extract(spec, ?)", `$.labels."` + strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(k) + `"`
}

func (s *sqlStore) UpdateSandbox(ctx context.Context, sb *sandbox.Sandbox, events ...*sandbox.Event) error {
	spec, err := json.Marshal(sb.Spec)
	if err != nil {
		return fmt.Errorf("sandbox %s: encode spec: %w", sb.ID, err)
	}
	var (
		unique bool
		ids    []int64
	)
	fence, fenceArgs := s.fenceClause(ctx)
	err = s.inTx(ctx, len(events) > 0, func(ctx context.Context, tx *sql.Tx) error {
		res, err := s.txExec(ctx, tx, s.d.rebind(`UPDATE sandboxes SET tenant = ?, name = ?, state = ?, spec = ?,
		created_at = ?, updated_at = ?, started_at = ?, deleted_at = ?,
		cause = ?, reason = ?, error = ?, generation = generation + 1,
		last_activity_at = ?, paused_at = ?, stopped_at = ?, prev_state = ?, node = ?, replica = ?
		WHERE id = ? AND generation = ?`+fence),
			append([]any{sb.Tenant, sb.Name, string(sb.State), string(spec),
				micros(sb.CreatedAt), micros(sb.UpdatedAt), micros(sb.StartedAt), micros(sb.DeletedAt),
				string(sb.Cause), sb.Reason, sb.Error,
				micros(sb.LastActivityAt), micros(sb.PausedAt), micros(sb.StoppedAt), string(sb.PrevState), sb.Node, sb.Replica,
				sb.ID, sb.Generation}, fenceArgs...)...)
		if err != nil {
			unique = s.d.classify(err) == UniqueViolation
			return fmt.Errorf("update sandbox %s: %w", sb.ID, err)
		}
		n, err := res.RowsAffected()
		if err != nil {
			return fmt.Errorf("update sandbox %s: %w", sb.ID, err)
		}
		if n == 0 {
			if ok, err := s.fenceHolds(ctx, tx); err != nil {
				return fmt.Errorf("update sandbox %s: %w", sb.ID, err)
			} else if !ok {
				f, _ := store.FenceFrom(ctx)
				return leaseLost(f)
			}
			// Tell a vanished record from a stale copy.
			var gen int64
			err := s.txQueryRow(ctx, tx, s.d.rebind(`SELECT generation FROM sandboxes WHERE id = ?`), sb.ID).Scan(&gen)
			switch {
			case errors.Is(err, sql.ErrNoRows):
				return errdefs.NotFound("sandbox %s not found", sb.ID)
			case err != nil:
				return fmt.Errorf("update sandbox %s: %w", sb.ID, err)
			}
			return errdefs.Modified("sandbox %s was modified concurrently (have generation %d, stored %d); reload it and retry",
				sb.ID, sb.Generation, gen)
		}
		if sb.State == sandbox.StateDeleted {
			// Their env goes with the sandbox, not with its tombstone.
			if err := s.deleteProcesses(ctx, tx, sb.ID); err != nil {
				return err
			}
		}
		ids, err = s.insertEvents(ctx, tx, sb.ID, events)
		return err
	})
	if unique {
		return errdefs.NameTaken("a sandbox named %q already exists; choose another name or remove it first", sb.Name)
	}
	if err != nil {
		return err
	}
	setEventIDs(events, sb.ID, ids)
	sb.Generation++
	return nil
}

func (s *sqlStore) PurgeSandbox(ctx context.Context, id string) error {
	return s.inTx(ctx, false, func(ctx context.Context, tx *sql.Tx) error { return s.purgeSandbox(ctx, tx, id) })
}

// purgeSandbox removes sandbox id with its events, their webhook
// deliveries, its flows and its supervised processes.
func (s *sqlStore) purgeSandbox(ctx context.Context, tx *sql.Tx, id string) error {
	// Explicit rather than relying on ON DELETE CASCADE, which needs
	// foreign-key enforcement switched on.
	for _, q := range []string{
		`DELETE FROM webhook_deliveries WHERE event_id IN (SELECT id FROM events WHERE sandbox_id = ?)`,
		`DELETE FROM events WHERE sandbox_id = ?`,
		`DELETE FROM flows WHERE sandbox_id = ?`,
		`DELETE FROM supervised_processes WHERE sandbox_id = ?`,
	} {
		if _, err := s.txExec(ctx, tx, s.d.rebind(q), id); err != nil {
			return fmt.Errorf("purge sandbox %s: %w", id, err)
		}
	}
	res, err := s.txExec(ctx, tx, s.d.rebind(`DELETE FROM sandboxes WHERE id = ?`), id)
	if err != nil {
		return fmt.Errorf("purge sandbox %s: %w", id, err)
	}
	if n, err := res.RowsAffected(); err != nil {
		return fmt.Errorf("purge sandbox %s: %w", id, err)
	} else if n == 0 {
		return errdefs.NotFound("sandbox %s not found", id)
	}
	return nil
}

// ---- events ----

const eventCols = `id, sandbox_id, at, type, from_state, to_state, actor, cause, reason, outcome, message`

func scanEvent(sc scanner) (*sandbox.Event, error) {
	var (
		ev              sandbox.Event
		at              int64
		from, to, cause string
	)
	if err := sc.Scan(&ev.ID, &ev.SandboxID, &at, &ev.Type, &from, &to, &ev.Actor, &cause,
		&ev.Reason, &ev.Outcome, &ev.Message); err != nil {
		return nil, err
	}
	ev.Time = fromMicros(at)
	ev.From, ev.To, ev.Cause = sandbox.State(from), sandbox.State(to), sandbox.Cause(cause)
	return &ev, nil
}

func eventKey(ev *sandbox.Event) (int64, string) { return ev.ID, "" }

// AppendEvent runs the insert in a transaction behind the dialect's
// EventOrderLock, so ids commit in the order they are drawn: readers follow
// events with an id cursor and would skip for ever an id that commits after
// a higher one.
func (s *sqlStore) AppendEvent(ctx context.Context, ev *sandbox.Event) error {
	var ids []int64
	err := s.inTx(ctx, true, func(ctx context.Context, tx *sql.Tx) (err error) {
		ids, err = s.insertEvents(ctx, tx, ev.SandboxID, []*sandbox.Event{ev})
		return err
	})
	if err != nil {
		return err
	}
	ev.ID = ids[0]
	return nil
}

// insertEvents appends events in tx (which holds the EventOrderLock) and
// returns their ids; an event without a SandboxID is sandboxID's. The
// caller sets the ids once tx committed (setEventIDs).
func (s *sqlStore) insertEvents(ctx context.Context, tx *sql.Tx, sandboxID string, events []*sandbox.Event) ([]int64, error) {
	const cols = `INSERT INTO events
		(sandbox_id, at, type, from_state, to_state, actor, cause, reason, outcome, message)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`
	ids := make([]int64, len(events))
	for i, ev := range events {
		sid := cmp.Or(ev.SandboxID, sandboxID)
		args := []any{sid, micros(ev.Time), ev.Type, string(ev.From), string(ev.To), ev.Actor,
			string(ev.Cause), ev.Reason, ev.Outcome, ev.Message}
		var err error
		if s.d.LastInsertID {
			var res sql.Result
			if res, err = s.txExec(ctx, tx, cols, args...); err == nil {
				ids[i], err = res.LastInsertId()
			}
		} else {
			err = s.txQueryRow(ctx, tx, s.d.rebind(cols+` RETURNING id`), args...).Scan(&ids[i])
		}
		if err != nil {
			if s.d.classify(err) == ForeignKeyViolation {
				return nil, errdefs.NotFound("event of sandbox %s: sandbox not found", sid)
			}
			return nil, fmt.Errorf("append event to sandbox %s: %w", sid, err)
		}
	}
	return ids, nil
}

func setEventIDs(events []*sandbox.Event, sandboxID string, ids []int64) {
	for i, ev := range events {
		ev.SandboxID = cmp.Or(ev.SandboxID, sandboxID)
		ev.ID = ids[i]
	}
}

func (s *sqlStore) ListEvents(ctx context.Context, o store.Owner, sandboxID string, afterID int64, p store.Page) ([]*sandbox.Event, string, error) {
	q := pageQuery{base: `SELECT ` + eventCols + ` FROM events`}
	q.and("sandbox_id = ? AND id > ?", sandboxID, afterID)
	if t, ok := o.Tenant(); ok {
		q.and("sandbox_id IN (SELECT id FROM sandboxes WHERE id = ? AND tenant = ?)", sandboxID, t)
	}
	return listPage(ctx, s, q, byEventID, p, scanEvent, eventKey)
}

func (s *sqlStore) ListAllEvents(ctx context.Context, f store.EventFilter, p store.Page) ([]*sandbox.Event, string, error) {
	q := pageQuery{base: `SELECT ` + eventCols + ` FROM events`}
	q.and("id > ?", f.AfterID)
	if len(f.SandboxIDs) > 0 {
		q.and("sandbox_id IN ("+placeholders(len(f.SandboxIDs))+")", anys(f.SandboxIDs)...)
	}
	if len(f.Types) > 0 {
		q.and("type IN ("+placeholders(len(f.Types))+")", anys(f.Types)...)
	}
	if t, ok := f.Owner.Tenant(); ok {
		q.and("sandbox_id IN (SELECT id FROM sandboxes WHERE tenant = ?)", t)
	}
	return listPage(ctx, s, q, byAllEventsID, p, scanEvent, eventKey)
}

func (s *sqlStore) EventsWritten() <-chan struct{} { return s.written.wait() }

func (s *sqlStore) LatestEventID(ctx context.Context) (int64, error) {
	var id int64
	err := s.queryRow(ctx, `SELECT COALESCE(MAX(id), 0) FROM events`).Scan(&id)
	return id, err
}

// placeholders is n comma-separated parameters.
func placeholders(n int) string { return "?" + strings.Repeat(", ?", n-1) }

func anys(vs []string) []any {
	out := make([]any, len(vs))
	for i, v := range vs {
		out[i] = v
	}
	return out
}

// ---- templates ----

const templateCols = `tenant, name, layers, config, builtin, source, size, created_at`

func scanTemplate(sc scanner) (*store.Template, error) {
	var (
		t              store.Template
		layers, config string
		created        int64
	)
	if err := sc.Scan(&t.Tenant, &t.Name, &layers, &config, &t.Builtin, &t.Source, &t.Size, &created); err != nil {
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
	_, err = s.exec(ctx, `INSERT INTO templates (`+templateCols+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?)
		ON CONFLICT (tenant, name) DO UPDATE SET layers = excluded.layers, config = excluded.config,
		builtin = excluded.builtin, source = excluded.source, size = excluded.size,
		created_at = excluded.created_at`,
		t.Tenant, t.Name, string(layers), string(config), t.Builtin, t.Source, t.Size, micros(t.CreatedAt))
	if err != nil {
		return fmt.Errorf("put template %s: %w", t.Name, err)
	}
	return nil
}

func (s *sqlStore) GetTemplate(ctx context.Context, name string) (*store.Template, error) {
	return s.GetTenantTemplate(ctx, "", name)
}

func (s *sqlStore) GetTenantTemplate(ctx context.Context, tenant, name string) (*store.Template, error) {
	t, err := scanTemplate(s.queryRow(ctx, `SELECT `+templateCols+` FROM templates WHERE tenant = ? AND name = ?`, tenant, name))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, errdefs.NotFound("template %q not found", name)
	}
	if err != nil {
		return nil, fmt.Errorf("get template %s: %w", name, err)
	}
	return t, nil
}

func (s *sqlStore) ResolveTemplate(ctx context.Context, tenant, name string) (*store.Template, error) {
	// The caller's own row sorts after the shared one ('' is the least
	// string), so ORDER BY tenant DESC puts it first.
	t, err := scanTemplate(s.queryRow(ctx, `SELECT `+templateCols+` FROM templates
		WHERE name = ? AND (tenant = ? OR tenant = '') ORDER BY tenant DESC LIMIT 1`, name, tenant))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, errdefs.NotFound("template %q not found", name)
	}
	if err != nil {
		return nil, fmt.Errorf("resolve template %s: %w", name, err)
	}
	return t, nil
}

func (s *sqlStore) ListTemplates(ctx context.Context, p store.Page) ([]*store.Template, string, error) {
	return s.ListTenantTemplates(ctx, "", p)
}

func (s *sqlStore) ListTenantTemplates(ctx context.Context, tenant string, p store.Page) ([]*store.Template, string, error) {
	q := pageQuery{base: `SELECT ` + templateCols + ` FROM templates`}
	if tenant == "" {
		q.and("tenant = ''")
	} else {
		q.and("(tenant = ? OR (tenant = '' AND name NOT IN (SELECT name FROM templates WHERE tenant = ?)))", tenant, tenant)
	}
	return listPage(ctx, s, q, byTemplateName, p, scanTemplate,
		func(t *store.Template) (int64, string) { return 0, t.Name })
}

func (s *sqlStore) DeleteTemplate(ctx context.Context, name string) error {
	return s.DeleteTenantTemplate(ctx, "", name)
}

func (s *sqlStore) DeleteTenantTemplate(ctx context.Context, tenant, name string) error {
	res, err := s.exec(ctx, `DELETE FROM templates WHERE tenant = ? AND name = ?`, tenant, name)
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

func (s *sqlStore) TemplateLayers(ctx context.Context) ([]string, error) {
	rows, err := s.query(ctx, `SELECT layers FROM templates`)
	if err != nil {
		return nil, fmt.Errorf("template layers: %w", err)
	}
	defer rows.Close()
	seen := map[string]bool{}
	var out []string
	for rows.Next() {
		var js string
		if err := rows.Scan(&js); err != nil {
			return nil, fmt.Errorf("template layers: %w", err)
		}
		var ls []string
		if err := json.Unmarshal([]byte(js), &ls); err != nil {
			return nil, fmt.Errorf("template layers: decode: %w", err)
		}
		for _, l := range ls {
			if !seen[l] {
				seen[l] = true
				out = append(out, l)
			}
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("template layers: %w", err)
	}
	return out, nil
}

// ---- API keys ----

const apiKeyCols = `id, name, tenant, hash, scopes, created_at, revoked_at, role, expires_at, prefix, created_by`

func scanAPIKey(sc scanner) (*store.APIKey, error) {
	var (
		k                         store.APIKey
		hash, scopes              string
		created, revoked, expires int64
	)
	if err := sc.Scan(&k.ID, &k.Name, &k.Tenant, &hash, &scopes, &created, &revoked, &k.Role, &expires,
		&k.Prefix, &k.CreatedBy); err != nil {
		return nil, err
	}
	var err error
	if k.Hash, err = hex.DecodeString(hash); err != nil {
		return nil, fmt.Errorf("api key %s: decode hash: %w", k.ID, err)
	}
	if err := json.Unmarshal([]byte(scopes), &k.Scopes); err != nil {
		return nil, fmt.Errorf("api key %s: decode scopes: %w", k.ID, err)
	}
	k.CreatedAt, k.RevokedAt, k.ExpiresAt = fromMicros(created), fromMicros(revoked), fromMicros(expires)
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
	_, err = s.exec(ctx, `INSERT INTO api_keys (`+apiKeyCols+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		k.ID, k.Name, k.Tenant, hex.EncodeToString(k.Hash), string(scopes), micros(k.CreatedAt), micros(k.RevokedAt),
		k.Role, micros(k.ExpiresAt), k.Prefix, k.CreatedBy)
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

func (s *sqlStore) GetAPIKey(ctx context.Context, o store.Owner, id string) (*store.APIKey, error) {
	k, err := scanAPIKey(s.queryRow(ctx, `SELECT `+apiKeyCols+` FROM api_keys WHERE id = ?`, id))
	if err == nil && !o.Sees(k.Tenant) {
		err = sql.ErrNoRows
	}
	if errors.Is(err, sql.ErrNoRows) {
		return nil, errdefs.NotFound("api key %s not found", id)
	}
	if err != nil {
		return nil, fmt.Errorf("get api key %s: %w", id, err)
	}
	return k, nil
}

func (s *sqlStore) ListAPIKeys(ctx context.Context, o store.Owner, p store.Page) ([]*store.APIKey, string, error) {
	q := pageQuery{base: `SELECT ` + apiKeyCols + ` FROM api_keys`}
	q.owner(o, "tenant")
	return listPage(ctx, s, q, byAPIKeyCreated, p, scanAPIKey,
		func(k *store.APIKey) (int64, string) { return micros(k.CreatedAt), k.ID })
}

// RevokeAPIKey is idempotent: revoking a revoked key keeps the first time.
// The leases and port tokens the key minted are revoked with it, in one
// transaction.
func (s *sqlStore) RevokeAPIKey(ctx context.Context, id string, at time.Time) error {
	if at.IsZero() {
		return errdefs.Invalid("revocation time is zero")
	}
	return s.inTx(ctx, false, func(ctx context.Context, tx *sql.Tx) error {
		var one int
		err := s.txQueryRow(ctx, tx, s.d.rebind(`SELECT 1 FROM api_keys WHERE id = ?`), id).Scan(&one)
		if errors.Is(err, sql.ErrNoRows) {
			return errdefs.NotFound("api key %s not found", id)
		}
		if err != nil {
			return fmt.Errorf("revoke api key %s: %w", id, err)
		}
		if _, err := s.txExec(ctx, tx, s.d.rebind(`UPDATE api_keys SET revoked_at = ? WHERE id = ? AND revoked_at = 0`),
			micros(at), id); err != nil {
			return fmt.Errorf("revoke api key %s: %w", id, err)
		}
		if _, err := s.txExec(ctx, tx, s.d.rebind(`UPDATE leases SET revoked_at = ? WHERE key_id = ? AND revoked_at = 0`),
			micros(at), id); err != nil {
			return fmt.Errorf("revoke the leases of api key %s: %w", id, err)
		}
		if _, err := s.txExec(ctx, tx, s.d.rebind(`UPDATE port_tokens SET revoked_at = ? WHERE key_id = ? AND revoked_at = 0`),
			micros(at), id); err != nil {
			return fmt.Errorf("revoke the port tokens of api key %s: %w", id, err)
		}
		return nil
	})
}
