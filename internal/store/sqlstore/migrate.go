package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/berth-sh/berth/internal/store/migrations"
)

// ErrSchemaTooNew is wrapped by Migrate when the database was migrated by a
// newer berth than this one.
var ErrSchemaTooNew = errors.New("database schema is newer than this berth")

// Migrate brings the schema of db up to migrations.Latest and returns the
// versions it applied (none when the database is current).
//
// It runs in one transaction: it creates schema_migrations (version, name,
// applied_at) if missing, reads the applied versions, refuses a database whose
// version is newer than this binary knows (ErrSchemaTooNew) or whose applied
// migrations differ from the embedded ones, then runs each pending migration
// and records it. Either every pending migration is applied or none is, and
// running it again is a no-op. Concurrent openers must serialize: either
// BeginTx takes the write lock up front (SQLite: BEGIN IMMEDIATE) or the
// dialect's MigrationLock takes a transaction-scoped lock (PostgreSQL: an
// advisory lock) before anything else is read or written.
func Migrate(ctx context.Context, db *sql.DB, d Dialect) (applied []int, err error) {
	ms, err := migrations.All()
	if err != nil {
		return nil, err
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("migrate: begin: %w", err)
	}
	defer func() {
		if err != nil {
			_ = tx.Rollback()
		}
	}()
	if d.MigrationLock != "" {
		if _, err := tx.ExecContext(ctx, d.MigrationLock); err != nil {
			return nil, fmt.Errorf("migrate: lock: %w", err)
		}
	}
	if _, err := tx.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (
		version    BIGINT NOT NULL PRIMARY KEY,
		name       TEXT   NOT NULL,
		applied_at BIGINT NOT NULL
	)`); err != nil {
		return nil, fmt.Errorf("migrate: create schema_migrations: %w", err)
	}
	have, err := appliedVersions(ctx, tx)
	if err != nil {
		return nil, err
	}
	latest := len(ms)
	for v, name := range have {
		if v > latest {
			return nil, fmt.Errorf("migrate: database has schema version %d but this berth knows only up to %d; run a newer berth: %w",
				maxKey(have), latest, ErrSchemaTooNew)
		}
		if want := ms[v-1].Name; name != want {
			return nil, fmt.Errorf("migrate: database records migration %d as %q, this berth has %q: the database was written by an incompatible build", v, name, want)
		}
	}
	now := time.Now().UnixMicro()
	for _, m := range ms {
		if _, ok := have[m.Version]; ok {
			continue
		}
		if _, err := tx.ExecContext(ctx, d.expand(m.SQL)); err != nil {
			return nil, fmt.Errorf("migrate: apply %04d_%s: %w", m.Version, m.Name, err)
		}
		if _, err := tx.ExecContext(ctx, d.rebind(`INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, ?, ?)`),
			m.Version, m.Name, now); err != nil {
			return nil, fmt.Errorf("migrate: record %04d_%s: %w", m.Version, m.Name, err)
		}
		applied = append(applied, m.Version)
	}
	if err := tx.Commit(); err != nil {
		return nil, fmt.Errorf("migrate: commit: %w", err)
	}
	return applied, nil
}

func appliedVersions(ctx context.Context, tx *sql.Tx) (map[int]string, error) {
	rows, err := tx.QueryContext(ctx, `SELECT version, name FROM schema_migrations`)
	if err != nil {
		return nil, fmt.Errorf("migrate: read schema_migrations: %w", err)
	}
	defer rows.Close()
	have := map[int]string{}
	for rows.Next() {
		var v int
		var name string
		if err := rows.Scan(&v, &name); err != nil {
			return nil, fmt.Errorf("migrate: read schema_migrations: %w", err)
		}
		have[v] = name
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("migrate: read schema_migrations: %w", err)
	}
	return have, nil
}

func maxKey(m map[int]string) int {
	n := 0
	for k := range m {
		n = max(n, k)
	}
	return n
}
