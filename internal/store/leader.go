package store

import (
	"context"
	"errors"
	"time"
)

// ReconcileLeases is the store's side of leader election among replicas
// sharing one database (package leader): a named lease row with its holder,
// a fencing token and an expiry measured by the database's clock.
type ReconcileLeases interface {
	// TakeReconcileLease acquires lease name for holder, or renews it when holder
	// already has it, until ttl from now by the database's clock. It
	// succeeds when the lease is free, expired or holder's; the epoch is
	// incremented whenever the holder changes. It returns the lease as it
	// stands after the attempt: Holder says who won.
	TakeReconcileLease(ctx context.Context, name, holder string, ttl time.Duration) (LeaseRecord, error)
	// ReleaseReconcileLease expires lease name now if holder still holds it at
	// epoch (a graceful hand-over); otherwise it changes nothing.
	ReleaseReconcileLease(ctx context.Context, name, holder string, epoch int64) error
	// GetReconcileLease returns lease name (ErrNotFound if never taken).
	GetReconcileLease(ctx context.Context, name string) (LeaseRecord, error)
	// PurgeReconcileLeases deletes the leases whose names start with
	// prefix and that expired more than after ago by the database's
	// clock, returning how many. Only for leases whose epoch nothing
	// fences with (the replicas' presence leases): a deleted row starts
	// again at epoch 1.
	PurgeReconcileLeases(ctx context.Context, prefix string, after time.Duration) (int64, error)
}

// LeaseRecord is a lease as stored.
type LeaseRecord struct {
	Name   string
	Holder string
	Epoch  int64
	// Expires is the expiry by the database's clock; Remaining is what
	// was left of it when it was read (negative: expired), which a
	// replica can use without comparing its own clock with the database's.
	Expires   time.Time
	Remaining time.Duration
}

// Fence is the proof a write carries that its writer holds a lease: the
// store refuses the write (a conflict with reason ErrLeaseLost) unless lease Name is held by
// Holder at Epoch and unexpired when the write commits.
type Fence struct {
	Name   string
	Holder string
	Epoch  int64
}

type fenceKey struct{}

// WithFence returns ctx whose sandbox updates (UpdateSandbox) are fenced
// by f: the reconciler's transitions carry it, so a replica that lost its
// lease while stalled cannot record an action after it wakes.
func WithFence(ctx context.Context, f Fence) context.Context {
	return context.WithValue(ctx, fenceKey{}, f)
}

// FenceFrom returns the fence ctx carries, if any.
func FenceFrom(ctx context.Context) (Fence, bool) {
	f, ok := ctx.Value(fenceKey{}).(Fence)
	return f, ok
}

// ErrLeaseLost is the reason of the conflict a fenced write gets when its
// fence no longer holds: another replica took the lease, or it expired.
var ErrLeaseLost = errors.New("lease lost")
