// Package sqlstore implements store.Store on database/sql in portable SQL, so
// that every SQL backend shares one implementation and one schema: a backend
// package (sqlite, later postgres) opens the connections, configures the
// driver and supplies a Dialect for the few differences.
//
// Queries are written with ? placeholders; Dialect.Rebind turns them into the
// driver's style. Timestamps are stored as BIGINT unix microseconds in UTC,
// with 0 meaning the zero time.Time. Driver errors never leave the package:
// "no rows" becomes errdefs.ErrNotFound and constraint violations become
// errdefs.ErrConflict (or ErrNotFound for a missing parent).
package sqlstore

import (
	"context"
	"database/sql"
	"strconv"
	"strings"
)

// Violation is the kind of constraint a failed statement broke.
type Violation int

const (
	NoViolation Violation = iota
	// UniqueViolation covers primary keys and unique indexes.
	UniqueViolation
	ForeignKeyViolation
)

// Dialect describes what differs between SQL backends.
type Dialect struct {
	Name string
	// Identity is the column definition that replaces the {{identity}} macro
	// in migrations: an auto-incrementing 64-bit primary key whose values are
	// never reused.
	Identity string
	// Rebind rewrites a query written with ? placeholders; nil leaves it as is.
	Rebind func(query string) string
	// Classify reports which constraint, if any, err says was violated.
	Classify func(err error) Violation
	// MigrationLock, if set, is the first statement Migrate runs in its
	// transaction, to serialize concurrent migrators on backends whose
	// BeginTx does not already take a database-wide write lock (PostgreSQL:
	// SELECT pg_advisory_xact_lock(n)). The lock must last until the
	// transaction ends.
	MigrationLock string
	// EventOrderLock, if set, is the first statement of the transaction that
	// appends an event, and must hold a lock until that transaction ends, so
	// that event ids become visible in id order. Readers follow events with
	// an id cursor (ListEventsSince, ListEvents with afterID) and would skip
	// for ever an id that commits after a higher one. Backends whose identity
	// values can commit out of order under concurrent writers need it
	// (PostgreSQL: SELECT pg_advisory_xact_lock(n)); SQLite serializes
	// writers and leaves it empty.
	EventOrderLock string
	// PrepareOnce keeps a prepared statement per query text (stmtcache.go):
	// for drivers that parse every statement they are given.
	PrepareOnce bool
	// TenantLock takes a tenant's quota admission lock across every handle
	// on the database (store.Admission.LockTenant); w is the writer pool.
	// PostgreSQL: a transaction-scoped advisory lock on
	// hashtext('berth-quota:'||tenant), held by a transaction kept open
	// until unlock; SQLite: a byte-range lock on a file beside the database.
	TenantLock func(ctx context.Context, w *sql.DB, tenant string) (unlock func(), err error)
	// NowMillis is an SQL expression for the database's current time in
	// unix milliseconds: reconcile leases expire by the database's clock,
	// the one clock every replica shares.
	NowMillis string
	// ShareLock, if set, ends the fence's sub-select of the lease row
	// (PostgreSQL: " FOR SHARE"), so that a takeover cannot commit between
	// a fenced write's check and its commit; SQLite serializes writers.
	ShareLock string
	// GroupCommit runs the writes waiting for the one writer together, in
	// one transaction with a savepoint each (batch.go): for a database
	// with one writer at a time (SQLite).
	GroupCommit bool
	// LastInsertID: the driver's Result.LastInsertId is the identity of
	// the row an INSERT made (SQLite), so an insert needs no RETURNING,
	// whose result set costs a cursor in the database and in
	// database/sql (an event append took several times as long).
	LastInsertID bool
}

func (d Dialect) rebind(q string) string {
	if d.Rebind == nil {
		return q
	}
	return d.Rebind(q)
}

func (d Dialect) classify(err error) Violation {
	if err == nil || d.Classify == nil {
		return NoViolation
	}
	return d.Classify(err)
}

// expand replaces the dialect macros of a migration.
func (d Dialect) expand(sql string) string {
	return strings.ReplaceAll(sql, "{{identity}}", d.Identity)
}

// DollarPlaceholders rewrites ? placeholders as $1, $2, ... (PostgreSQL),
// leaving question marks inside quoted strings, quoted identifiers and
// comments alone.
func DollarPlaceholders(q string) string {
	var b strings.Builder
	b.Grow(len(q) + 8)
	n := 0
	for i := 0; i < len(q); i++ {
		c := q[i]
		switch {
		case c == '\'' || c == '"':
			j := strings.IndexByte(q[i+1:], c)
			if j < 0 {
				b.WriteString(q[i:])
				return b.String()
			}
			b.WriteString(q[i : i+j+2])
			i += j + 1
		case c == '-' && i+1 < len(q) && q[i+1] == '-':
			j := strings.IndexByte(q[i:], '\n')
			if j < 0 {
				b.WriteString(q[i:])
				return b.String()
			}
			b.WriteString(q[i : i+j+1])
			i += j
		case c == '?':
			n++
			b.WriteByte('$')
			b.WriteString(strconv.Itoa(n))
		default:
			b.WriteByte(c)
		}
	}
	return b.String()
}
