// Package postgres is berth's shared store: store.Store on PostgreSQL, for
// several berth daemons (or one that outlives its host) sharing one database.
// It supplies only a connection pool and a sqlstore.Dialect; the queries, the
// schema and the conformance behaviour are those of package sqlstore, shared
// with the embedded SQLite store.
//
// Open takes a libpq-style URL or keyword/value string, e.g.
//
//	postgres://berth:secret@db.internal:5432/berth?sslmode=verify-full
//
// as understood by github.com/jackc/pgx/v5 (PG* environment variables and
// ~/.pgpass fill in what it leaves out). The extra parameter pool_max_conns
// caps the connection pool (default: max(8, 2×GOMAXPROCS)). For PgBouncer in
// transaction mode add default_query_exec_mode=exec, since pgx otherwise
// caches prepared statements per connection. Errors never include the
// password.
//
// # Migrations
//
// Open migrates the database before returning. The schema is the numbered SQL
// files embedded in package migrations (0001_init.sql, ...; the {{identity}}
// macro becomes BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY). They are
// applied by sqlstore.Migrate in a single transaction that first takes
// pg_advisory_xact_lock on a fixed key, then creates schema_migrations
// (version, name, applied_at) if missing, reads it, and applies and records
// each pending file. So:
//
//   - a database is always at one known version: all pending files are
//     applied or none (PostgreSQL DDL is transactional), and re-opening a
//     current database changes nothing;
//   - two daemons starting at once on one fresh database do not race: the
//     advisory lock (scoped to this database, released at commit or
//     rollback) makes the second wait, after which it sees the first's
//     committed schema and has nothing to do;
//   - a database migrated by a newer berth is refused with an error wrapping
//     sqlstore.ErrSchemaTooNew, as is one whose recorded migrations differ
//     from this binary's, rather than being read with a schema this binary
//     does not understand. Upgrade every daemon sharing a database before (or
//     together with) the first one that migrates it.
//
// To change the schema, add the next numbered file to
// internal/store/migrations; never edit a released one.
//
// # Several daemons on one database
//
// Every connection runs at READ COMMITTED (Open sets
// default_transaction_isolation, overriding a server default), and every
// sandbox update is a compare-and-swap on its generation: a single
//
//	UPDATE sandboxes SET ..., generation = generation + 1
//	WHERE id = $n AND generation = $m
//
// When two daemons (or goroutines) update from the same generation, the
// second UPDATE blocks on the row lock until the first commits, then
// re-checks its WHERE clause against the committed row, finds the generation
// moved on, and updates nothing, which the store reports as
// errdefs.ErrConflict. So exactly one of them wins each transition and the
// loser must reload: no lost update is possible, and no serialization
// failure can occur, so there is nothing to retry. Volumes are updated the
// same way. Live sandbox and volume names are kept unique by partial unique
// indexes, which settle concurrent creates or renames the same way (the loser
// gets ErrConflict). storetest.RunShared checks all of this with two Store
// handles (two pools) on one database.
//
// Event ids come from an identity column, whose values can commit out of
// order under concurrent writers; a reader following events with an id
// cursor (webhook delivery via ListEventsSince) would then skip an event for
// ever. So each AppendEvent runs in a short transaction behind a second
// advisory lock (the dialect's EventOrderLock): appends to one database are
// serialized and their ids become visible in increasing order.
//
// Every other write is a single autocommitted statement, except PurgeSandbox,
// whose transaction deletes events before their sandbox.
//
// Driver errors are classified by SQLSTATE: 23505 (unique_violation) becomes
// errdefs.ErrConflict and 23503 (foreign_key_violation, an event for a
// missing sandbox) errdefs.ErrNotFound.
package postgres

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/berth-sh/berth/internal/store"
	"github.com/berth-sh/berth/internal/store/sqlstore"
)

// migrationLockKey is the pg_advisory_xact_lock key that serializes
// migrations of one database ("berth" in ASCII). Advisory locks are scoped to
// a database, so it only competes with other berths on the same database.
const migrationLockKey int64 = 0x6265727468

// eventLockKey is the pg_advisory_xact_lock key that orders event appends
// ("berthev"): see sqlstore.Dialect.EventOrderLock.
const eventLockKey int64 = 0x62657274686576

// dialect is PostgreSQL's sqlstore.Dialect.
var dialect = sqlstore.Dialect{
	Name:           "postgres",
	Identity:       "BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY",
	Rebind:         sqlstore.DollarPlaceholders,
	Classify:       classify,
	MigrationLock:  "SELECT pg_advisory_xact_lock(" + strconv.FormatInt(migrationLockKey, 10) + ")",
	EventOrderLock: "SELECT pg_advisory_xact_lock(" + strconv.FormatInt(eventLockKey, 10) + ")",
	// clock_timestamp, not now(): now() is the transaction's start, and a
	// fenced write's transaction may have waited on a row lock since.
	NowMillis: "CAST(EXTRACT(EPOCH FROM clock_timestamp()) * 1000 AS BIGINT)",
	ShareLock: " FOR SHARE",
}

// SQLSTATE codes the store acts on.
const (
	codeUniqueViolation     = "23505"
	codeForeignKeyViolation = "23503"
)

// Open connects to the PostgreSQL database at url, checks it is reachable and
// migrates it (see the package documentation). The database must exist and
// the user must be allowed to create tables in its default schema.
func Open(ctx context.Context, url string) (store.Store, error) {
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		// pgconn redacts the password from its parse errors.
		return nil, fmt.Errorf("postgres store: bad connection string: %w", err)
	}
	poolSize := max(8, 2*runtime.GOMAXPROCS(0))
	if v, ok := cfg.RuntimeParams["pool_max_conns"]; ok {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			return nil, fmt.Errorf("postgres store: bad pool_max_conns %q: want a positive integer", v)
		}
		poolSize = n
		delete(cfg.RuntimeParams, "pool_max_conns")
	}
	if cfg.RuntimeParams["application_name"] == "" {
		cfg.RuntimeParams["application_name"] = "berth"
	}
	// The compare-and-swap updates rely on READ COMMITTED: a blocked UPDATE
	// re-evaluates its WHERE clause instead of failing to serialize.
	cfg.RuntimeParams["default_transaction_isolation"] = "read committed"

	where := fmt.Sprintf("%s@%s:%d/%s", cfg.User, cfg.Host, cfg.Port, cfg.Database)
	db := stdlib.OpenDB(*cfg)
	db.SetMaxOpenConns(poolSize)
	db.SetMaxIdleConns(poolSize)
	db.SetConnMaxIdleTime(5 * time.Minute)
	db.SetConnMaxLifetime(time.Hour)
	if err := db.PingContext(ctx); err != nil {
		db.Close()
		return nil, fmt.Errorf("postgres store %s: connect: %w", where, err)
	}
	if _, err := sqlstore.Migrate(ctx, db, dialect); err != nil {
		db.Close()
		return nil, fmt.Errorf("postgres store %s: %w", where, err)
	}
	d := dialect
	d.TenantLock = tenantLock(poolSize / 2)
	return sqlstore.New(db, db, d, db.Close), nil
}

// classify maps a PostgreSQL error to the constraint it reports violated.
func classify(err error) sqlstore.Violation {
	var e *pgconn.PgError
	if !errors.As(err, &e) {
		return sqlstore.NoViolation
	}
	switch e.Code {
	case codeUniqueViolation:
		return sqlstore.UniqueViolation
	case codeForeignKeyViolation:
		return sqlstore.ForeignKeyViolation
	}
	return sqlstore.NoViolation
}
