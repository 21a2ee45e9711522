// Package leader decides which of several berth replicas sharing one store
// runs a kind of background work: the reconciler's passes over a node's
// sandboxes (policies, teardown retries, dead sandboxes, pool refills,
// snapshot expiry, the backend's sweeps) and the store-wide jobs
// (retention, expired idempotency keys, webhook delivery). Each kind has a
// named lease; exactly one replica holds it at a time, and the work runs
// only there.
//
// # Why a lease row, not an advisory lock
//
// PostgreSQL's session advisory lock, held on a dedicated connection, is
// released when that connection ends — but only when the server notices.
// A holder that is stalled (SIGSTOP, a long GC or VM pause) or cut off by
// a partition keeps its TCP connection open from the server's side until
// keepalives give up, minutes by default, and nothing bounds the takeover;
// worse, the lock gives the holder nothing to prove, after it wakes, that
// it still holds it, and nothing to attach to its writes. So the lease is
// a row (store.ReconcileLeases, table reconcile_leases): holder, epoch and
// expiry. Expiry is measured by the database's clock only, so the
// replicas' clocks never need to agree; the holder renews every TTL/3.
//
//   - Takeover is bounded: when the holder dies, stalls or loses its
//     database, its row expires at most TTL after its last renewal, and the
//     next replica to try (every TTL/3) takes it, with the epoch
//     incremented. A graceful stop releases the row (expires it now), so a
//     rolling update hands over within one retry period.
//   - The holder stops acting as soon as it cannot prove it holds the
//     lease: it believes it holds it until TTL after it *sent* its last
//     successful renewal (by its own monotonic clock: the database's
//     expiry, computed when the statement ran, is later), and every pass
//     checks Held first. A holder whose renewals fail — its connection is
//     cut — stops within TTL, before any other replica can take over.
//   - Writes where a double action matters are fenced: the reconciler's
//     state transitions carry the lease's epoch (store.WithFence), and the
//     store commits them only while that epoch holds the lease by the
//     database's clock. A replica stalled between its check and its write
//     — the one case the check cannot cover — finds its write refused
//     (store.ErrLeaseLost) when it wakes.
//
// On a node several replicas share, each replica also keeps a presence
// lease of its own (ReplicaLeaseName; no one else takes it), and the
// records name the replica of their last transition: the node lease's
// holder reads the presence (Present) to tell a create in flight on a live
// replica from one whose replica is gone, and finishes the latter.
//
// Where contention cannot happen the lease is trivial (Always): one daemon
// on an embedded SQLite store runs the store-wide jobs, and the local
// backend's node is one daemon's by construction (its name is derived from
// the data dir), so its node lease is always its own.
package leader

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/internal/store"
)

// Lease says whether this replica may run one kind of background work now.
type Lease interface {
	// Held reports whether this replica holds the lease at this moment,
	// with the fence its writes carry. It is false as soon as the
	// replica cannot prove it: never taken, taken by another, or the last
	// successful renewal older than the TTL.
	Held() (store.Fence, bool)
	// Status describes the lease for doctor and metrics.
	Status() Status
}

// Status is a lease as this replica sees it.
type Status struct {
	Name string `json:"name"`
	// Holder is the replica holding it as last read ("" if unknown), Self
	// this replica's own identity, Held whether this replica holds it now.
	Holder string `json:"holder"`
	Self   string `json:"self"`
	Held   bool   `json:"held"`
	Epoch  int64  `json:"epoch"`
	// Remaining is what was left of the holder's lease when last read.
	Remaining time.Duration `json:"remaining"`
	// Trivial says no other replica can contend (Always).
	Trivial bool `json:"trivial,omitempty"`
	// Error is the last failure to reach the store, if the latest attempt failed.
	Error string `json:"error,omitempty"`
}

// Always is a lease no other replica can contend: always held. Its fence
// is empty: there is no row to check a write against (Fenced adds none).
func Always(name, self string) Lease { return always{name, self} }

type always struct{ name, self string }

func (a always) Held() (store.Fence, bool) { return store.Fence{}, true }

func (a always) Status() Status {
	return Status{Name: a.name, Holder: a.self, Self: a.self, Held: true, Epoch: 1, Trivial: true}
}

// DefaultTTL is a lease's lifetime without renewal: the bound on a
// takeover after the holder dies, stalls or loses its database.
const DefaultTTL = 15 * time.Second

// Keeper takes and renews one lease in the store (Run) and answers Held.
type Keeper struct {
	st   store.ReconcileLeases
	name string
	self string
	ttl  time.Duration
	log  *slog.Logger
	now  func() time.Time // monotonic readings only: never compared with the database's

	mu        sync.Mutex
	fence     store.Fence
	heldUntil time.Time // by now(); zero: not held
	last      store.LeaseRecord
	lastErr   error
	onChange  []func(held bool)
	wasHeld   bool
}

// Option configures a Keeper.
type Option func(*Keeper)

// WithTTL sets the lease's lifetime (default DefaultTTL); renewals run
// every third of it.
func WithTTL(d time.Duration) Option { return func(k *Keeper) { k.ttl = d } }

// WithLogger sets the logger.
func WithLogger(l *slog.Logger) Option { return func(k *Keeper) { k.log = l } }

// OnChange registers fn, called (from Run's goroutine) whenever this
// replica gains or loses the lease.
func OnChange(fn func(held bool)) Option {
	return func(k *Keeper) { k.onChange = append(k.onChange, fn) }
}

// New returns a Keeper of lease name for the replica self (unique per
// process: e.g. the pod name and a random boot id). Run takes the lease.
func New(st store.ReconcileLeases, name, self string, opts ...Option) *Keeper {
	k := &Keeper{st: st, name: name, self: self, ttl: DefaultTTL, log: slog.Default(), now: time.Now}
	for _, o := range opts {
		o(k)
	}
	return k
}

// Held implements Lease.
func (k *Keeper) Held() (store.Fence, bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.heldUntil.IsZero() || !k.now().Before(k.heldUntil) {
		return store.Fence{}, false
	}
	return k.fence, true
}

// Status implements Lease.
func (k *Keeper) Status() Status {
	_, held := k.Held()
	k.mu.Lock()
	defer k.mu.Unlock()
	s := Status{Name: k.name, Holder: k.last.Holder, Self: k.self, Held: held, Epoch: k.last.Epoch, Remaining: k.last.Remaining}
	if k.lastErr != nil {
		s.Error = k.lastErr.Error()
	}
	return s
}

// Run takes the lease and keeps renewing it until ctx ends, then releases
// it if held, so another replica takes over at its next try.
func (k *Keeper) Run(ctx context.Context) {
	period := max(k.ttl/3, time.Millisecond)
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			k.release()
			return
		case <-t.C:
		}
		k.try(ctx)
		t.Reset(period)
	}
}

// try makes one take-or-renew attempt and records what it proves.
func (k *Keeper) try(ctx context.Context) {
	sent := k.now()
	actx, cancel := context.WithTimeout(ctx, k.ttl/3+time.Second)
	rec, err := k.st.TakeReconcileLease(actx, k.name, k.self, k.ttl)
	cancel()
	k.mu.Lock()
	k.lastErr = err
	switch {
	case err != nil:
		// Nothing proven: the belief from the last success runs out on
		// its own, before the row can expire for the others.
	case rec.Holder == k.self:
		k.last = rec
		k.fence = store.Fence{Name: k.name, Holder: k.self, Epoch: rec.Epoch}
		k.heldUntil = sent.Add(k.ttl)
	default:
		k.last = rec
		k.heldUntil = time.Time{}
	}
	held := !k.heldUntil.IsZero() && k.now().Before(k.heldUntil)
	changed := held != k.wasHeld
	k.wasHeld = held
	fns := k.onChange
	k.mu.Unlock()
	if err != nil {
		k.log.Warn("lease: cannot reach the store", "lease", k.name, "err", err)
	}
	if changed {
		if held {
			k.log.Info("lease taken: this replica runs its work", "lease", k.name, "epoch", rec.Epoch)
		} else {
			k.log.Info("lease not held: another replica runs its work", "lease", k.name, "holder", rec.Holder)
		}
		for _, fn := range fns {
			fn(held)
		}
	}
}

func (k *Keeper) release() {
	f, ok := k.Held()
	k.mu.Lock()
	k.heldUntil = time.Time{}
	k.mu.Unlock()
	if !ok {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := k.st.ReleaseReconcileLease(ctx, f.Name, f.Holder, f.Epoch); err != nil {
		k.log.Warn("lease: release", "lease", k.name, "err", err)
	}
}

// Fenced returns ctx whose sandbox updates carry f (store.WithFence), or
// ctx itself for the empty fence of a trivial lease.
func Fenced(ctx context.Context, f store.Fence) context.Context {
	if f.Name == "" {
		return ctx
	}
	return store.WithFence(ctx, f)
}

// NodeLeaseName is the name of the lease over node's sandboxes.
func NodeLeaseName(node string) string { return "node:" + node }

// StoreLeaseName is the name of the lease over the store-wide jobs.
const StoreLeaseName = "store"

// ReplicaLeaseName is the name of replica's presence lease: on a node
// several replicas share, each keeps its own (no one else takes it), and
// the node lease's holder reads it to tell whether the replica that left
// a create or start in flight is still there (Present).
func ReplicaLeaseName(replica string) string { return ReplicaLeasePrefix + replica }

// ReplicaLeasePrefix begins every presence lease's name.
const ReplicaLeasePrefix = "replica:"

// WaitHeld waits until l is held, up to within: a replica takes its
// presence lease before it serves, since a create it records before the
// lease's row exists reads, to the node lease's holder, as left by a
// replica that is gone (Present), and is finished or failed under it.
func WaitHeld(ctx context.Context, l Lease, within time.Duration) error {
	deadline := time.Now().Add(within)
	for {
		if _, ok := l.Held(); ok {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("lease %s not taken within %s", l.Status().Name, within)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// Present reports whether replica still keeps its presence lease: its row
// unexpired by the database's clock. A row never taken, released (a
// graceful stop) or expired (a crash, a stall or a lost database past the
// TTL) is absence; an empty replica (a record written before replicas
// were recorded) is absent too.
func Present(ctx context.Context, st store.ReconcileLeases, replica string) (bool, error) {
	if replica == "" {
		return false, nil
	}
	rec, err := st.GetReconcileLease(ctx, ReplicaLeaseName(replica))
	if errors.Is(err, errdefs.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return rec.Holder == replica && rec.Remaining > 0, nil
}
