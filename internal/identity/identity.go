// Package identity carries who a request acts for through the engine: the
// server's guard puts the authenticated Caller into the request's context,
// and the engine reads the tenant from it to name the owner of every store
// read. It holds no policy (that is internal/auth's); it is the seam the
// tenancy work fills in.
package identity

import "context"

// Caller is the authenticated party of a request.
type Caller struct {
	// Tenant owns what the caller may see and make; "" is the default
	// tenant, today the only one.
	Tenant string
	// Actor is recorded in events: "local", "key:<id>" or "lease:<id>".
	Actor string
	// KeyID is the API key the caller presented, if any.
	KeyID string
	// Lease is the sandbox whose lease token the caller presented, if any.
	Lease string
	// Host is the host's administrator: it reads every tenant's records
	// (and makes its own in tenant "").
	Host bool
}

type ctxKey struct{}

// With returns ctx carrying c.
func With(ctx context.Context, c Caller) context.Context {
	return context.WithValue(ctx, ctxKey{}, c)
}

// From returns the caller in ctx, and false if there is none: the
// engine's own work (reconciler, pools, recovery) runs without one.
func From(ctx context.Context) (Caller, bool) {
	c, ok := ctx.Value(ctxKey{}).(Caller)
	return c, ok
}
