// Package sqlite is berth's embedded store: store.Store on a single SQLite
// file, through the pure-Go modernc.org/sqlite driver (no cgo).
//
// The database runs in WAL mode with synchronous=NORMAL, foreign keys on and
// a 5 s busy timeout. The WAL is checkpointed by a goroutine of its own
// (checkpoint.go), not by the committing writer. Writes go through a pool
// of exactly one connection that begins transactions with BEGIN
// IMMEDIATE, so goroutines of this process queue for the write lock
// instead of failing with SQLITE_BUSY; reads use a separate read-only pool
// and run concurrently with each other and with the writer. Another process on the same file waits up to the busy timeout.
//
// # Migrations
//
// Open migrates the database before returning: the numbered SQL files of
// package migrations are applied by sqlstore.Migrate in one transaction and
// recorded in the schema_migrations table, so a database is always at one
// known version, re-opening is a no-op, and a failed upgrade leaves the file
// as it was. A database migrated by a newer berth is refused with an error
// wrapping sqlstore.ErrSchemaTooNew rather than being read with a schema this
// binary does not understand. To change the schema, add the next numbered file
// to internal/store/migrations; never edit a released one.
package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"runtime"
	"strings"

	msqlite "modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/berth-sh/berth/internal/store"
	"github.com/berth-sh/berth/internal/store/sqlstore"
)

// dialect is SQLite's sqlstore.Dialect.
var dialect = sqlstore.Dialect{
	Name:     "sqlite",
	Identity: "INTEGER PRIMARY KEY AUTOINCREMENT",
	Classify: classify,
	// unixepoch('subsec') is the statement's time, with milliseconds.
	NowMillis: "CAST(unixepoch('subsec') * 1000 AS INTEGER)",
	// One writer at a time: the writes waiting for it commit together.
	GroupCommit:  true,
	PrepareOnce:  true,
	LastInsertID: true,
}

const (
	common = "_busy_timeout=5000&_foreign_keys=1&_synchronous=NORMAL"
	// The writer never checkpoints the WAL itself (checkpointer does, off
	// the write path): an automatic checkpoint runs in the committing
	// transaction and fsyncs the database file, which held a burst's
	// group commits for tens of milliseconds.
	writeDSN = common + "&_journal_mode=WAL&_txlock=immediate&_pragma=wal_autocheckpoint(0)"
	// The checkpointer's own connection.
	checkpointDSN = common + "&_journal_mode=WAL"
	readDSN       = common + "&_query_only=1"
)

// Open opens (creating it with mode 0600 if needed) and migrates the SQLite
// database at path. The directory must exist.
func Open(ctx context.Context, path string) (store.Store, error) {
	if path == "" || strings.ContainsAny(path, "?#") || strings.HasPrefix(path, "file:") || path == ":memory:" {
		return nil, fmt.Errorf("sqlite store: bad database path %q: want a plain file path", path)
	}
	if err := ensureFile(path); err != nil {
		return nil, fmt.Errorf("sqlite store: %w", err)
	}
	w, err := sql.Open("sqlite", path+"?"+writeDSN)
	if err != nil {
		return nil, fmt.Errorf("sqlite store: open %s: %w", path, err)
	}
	// One writer connection, kept forever: database/sql queues writers.
	w.SetMaxOpenConns(1)
	w.SetMaxIdleConns(1)
	w.SetConnMaxLifetime(0)
	w.SetConnMaxIdleTime(0)
	if _, err := sqlstore.Migrate(ctx, w, dialect); err != nil {
		w.Close()
		return nil, fmt.Errorf("sqlite store %s: %w", path, err)
	}
	r, err := sql.Open("sqlite", path+"?"+readDSN)
	if err != nil {
		w.Close()
		return nil, fmt.Errorf("sqlite store: open %s: %w", path, err)
	}
	n := max(4, runtime.GOMAXPROCS(0))
	r.SetMaxOpenConns(n)
	r.SetMaxIdleConns(n)
	if err := r.PingContext(ctx); err != nil {
		r.Close()
		w.Close()
		return nil, fmt.Errorf("sqlite store: open %s: %w", path, err)
	}
	cp, err := sql.Open("sqlite", path+"?"+checkpointDSN)
	if err != nil {
		r.Close()
		w.Close()
		return nil, fmt.Errorf("sqlite store: open %s: %w", path, err)
	}
	cp.SetMaxOpenConns(1)
	ck := startCheckpointer(cp, checkpointEvery)
	d := dialect
	d.TenantLock = tenantLock(path + "-admission")
	return sqlstore.New(w, r, d, func() error {
		ck.stop()
		return errors.Join(cp.Close(), r.Close(), w.Close())
	}), nil
}

// ensureFile creates the database file with mode 0600, or tightens an
// existing one to it: it holds API key hashes. SQLite gives the -wal and -shm
// files the same mode.
func ensureFile(path string) error {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("%s is not a regular file", path)
	}
	if fi.Mode().Perm() != 0o600 {
		return f.Chmod(0o600)
	}
	return nil
}

func classify(err error) sqlstore.Violation {
	var e *msqlite.Error
	if !errors.As(err, &e) {
		return sqlstore.NoViolation
	}
	switch e.Code() {
	case sqlite3.SQLITE_CONSTRAINT_UNIQUE, sqlite3.SQLITE_CONSTRAINT_PRIMARYKEY:
		return sqlstore.UniqueViolation
	case sqlite3.SQLITE_CONSTRAINT_FOREIGNKEY:
		return sqlstore.ForeignKeyViolation
	}
	return sqlstore.NoViolation
}
