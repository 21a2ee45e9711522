package store

import "context"

// Admission serialises quota admission of one tenant across every handle
// on the database: several daemons sharing one PostgreSQL store, or two
// processes on one SQLite file. The engine holds a tenant's admission lock
// from the usage count to the end of the write it admits (the record
// insert, or a pool claim), so a count can never miss a record another
// daemon is about to commit.
type Admission interface {
	// LockTenant blocks until it holds tenant's admission lock, or ctx
	// ends (then the error wraps ctx.Err()). unlock releases it and must be
	// called exactly once; different tenants never wait for each other.
	LockTenant(ctx context.Context, tenant string) (unlock func(), err error)
}
