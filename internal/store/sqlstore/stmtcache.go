package sqlstore

import (
	"context"
	"database/sql"
	"sync"
)

// stmtCache keeps one prepared statement per query text and database
// handle, for drivers without a statement cache of their own
// (Dialect.PrepareOnce: modernc's SQLite parses every statement it is
// given; pgx caches its own). A burst of creates spent a sixth of the
// daemon's CPU in SQLite's parser before it. database/sql prepares a
// cached statement once per connection and reuses it in transactions on
// that connection (Tx.StmtContext).
//
// Only the queries the store writes as constants are many times the
// same; the list queries built from filters vary, so the cache stops
// taking new texts at maxCachedStmts and those run unprepared.
type stmtCache struct {
	mu        sync.Mutex
	m         map[stmtKey]*sql.Stmt
	preparing map[stmtKey]bool // cached's background prepares in flight
	closed    bool
}

type stmtKey struct {
	db *sql.DB
	q  string
}

const maxCachedStmts = 512

// get returns db's prepared statement for q, or nil when it is not kept
// (the cache is full, or preparing failed: the caller runs q itself and
// meets the error there).
func (c *stmtCache) get(ctx context.Context, db *sql.DB, q string) *sql.Stmt {
	k := stmtKey{db, q}
	c.mu.Lock()
	st, ok := c.m[k]
	full := len(c.m) >= maxCachedStmts
	c.mu.Unlock()
	if ok || full {
		return st
	}
	st, err := db.PrepareContext(context.WithoutCancel(ctx), q)
	if err != nil {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed { // the store closed while this was prepared
		st.Close()
		return nil
	}
	if c.m == nil {
		c.m = map[stmtKey]*sql.Stmt{}
	}
	if prev, ok := c.m[k]; ok { // another caller prepared it meanwhile
		st.Close()
		return prev
	}
	if len(c.m) >= maxCachedStmts { // others filled it meanwhile
		st.Close()
		return nil
	}
	c.m[k] = st
	return st
}

// cached returns db's prepared statement for q if it is kept, and
// otherwise has it prepared in the background for the next caller: a
// transaction holds its connection (the writer's only one, with SQLite),
// so preparing on db from inside it would wait for itself.
func (c *stmtCache) cached(db *sql.DB, q string) *sql.Stmt {
	k := stmtKey{db, q}
	c.mu.Lock()
	defer c.mu.Unlock()
	if st, ok := c.m[k]; ok || len(c.m) >= maxCachedStmts || c.preparing[k] {
		return st
	}
	if c.preparing == nil {
		c.preparing = map[stmtKey]bool{}
	}
	c.preparing[k] = true
	go func() {
		c.get(context.Background(), db, q)
		c.mu.Lock()
		delete(c.preparing, k)
		c.mu.Unlock()
	}()
	return nil
}

func (c *stmtCache) close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closed = true
	for k, st := range c.m {
		st.Close()
		delete(c.m, k)
	}
}

// prepared returns the kept statement for q on db when the dialect keeps
// them, else nil.
func (s *sqlStore) prepared(ctx context.Context, db *sql.DB, q string) *sql.Stmt {
	if !s.d.PrepareOnce {
		return nil
	}
	return s.stmts.get(ctx, db, q)
}

// forTx returns the writer's kept statement for q, for a transaction: one
// not kept yet is prepared after it (stmtCache.cached).
func (s *sqlStore) forTx(q string) *sql.Stmt {
	if !s.d.PrepareOnce {
		return nil
	}
	return s.stmts.cached(s.w, q)
}

// txExec is tx.ExecContext through the writer's kept statement for q.
func (s *sqlStore) txExec(ctx context.Context, tx *sql.Tx, q string, args ...any) (sql.Result, error) {
	if st := s.forTx(q); st != nil {
		return tx.StmtContext(ctx, st).ExecContext(ctx, args...)
	}
	return tx.ExecContext(ctx, q, args...)
}

// txQueryRow is tx.QueryRowContext through the writer's kept statement.
func (s *sqlStore) txQueryRow(ctx context.Context, tx *sql.Tx, q string, args ...any) *sql.Row {
	if st := s.forTx(q); st != nil {
		return tx.StmtContext(ctx, st).QueryRowContext(ctx, args...)
	}
	return tx.QueryRowContext(ctx, q, args...)
}

// txQuery is tx.QueryContext through the writer's kept statement.
func (s *sqlStore) txQuery(ctx context.Context, tx *sql.Tx, q string, args ...any) (*sql.Rows, error) {
	if st := s.forTx(q); st != nil {
		return tx.StmtContext(ctx, st).QueryContext(ctx, args...)
	}
	return tx.QueryContext(ctx, q, args...)
}
