package storetest

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/internal/sandbox"
	"github.com/berth-sh/berth/internal/store"
)

// testReconcileLeases: a lease is taken by one holder at a time, renewed
// by it at the same epoch, taken over with a new epoch only once expired
// by the database's clock, and released at once on hand-over.
func testReconcileLeases(t *testing.T, s store.Store) {
	ctx := t.Context()
	if _, err := s.GetReconcileLease(ctx, "node:x"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("lease never taken: %v, want not found", err)
	}
	a, err := s.TakeReconcileLease(ctx, "node:x", "a", time.Minute)
	must(t, err)
	if a.Holder != "a" || a.Epoch != 1 || a.Remaining <= 50*time.Second || a.Remaining > time.Minute {
		t.Fatalf("first take: %+v, want a at epoch 1 with about a minute left", a)
	}
	if r, err := s.TakeReconcileLease(ctx, "node:x", "a", time.Minute); err != nil || r.Holder != "a" || r.Epoch != 1 {
		t.Fatalf("renewal: %+v %v, want a still at epoch 1", r, err)
	}
	if r, err := s.TakeReconcileLease(ctx, "node:x", "b", time.Minute); err != nil || r.Holder != "a" || r.Epoch != 1 {
		t.Fatalf("b while a holds: %+v %v, want a at epoch 1 unchanged", r, err)
	}
	// Another name is another lease.
	if r, err := s.TakeReconcileLease(ctx, "store", "b", time.Minute); err != nil || r.Holder != "b" || r.Epoch != 1 {
		t.Fatalf("b takes another lease: %+v %v", r, err)
	}
	// A release by a stale epoch or another holder changes nothing.
	must(t, s.ReleaseReconcileLease(ctx, "node:x", "a", 7))
	must(t, s.ReleaseReconcileLease(ctx, "node:x", "b", 1))
	if r, _ := s.GetReconcileLease(ctx, "node:x"); r.Holder != "a" || r.Remaining <= 0 {
		t.Fatalf("after foreign releases: %+v, want a's unexpired lease", r)
	}
	must(t, s.ReleaseReconcileLease(ctx, "node:x", "a", 1))
	if r, err := s.TakeReconcileLease(ctx, "node:x", "b", time.Minute); err != nil || r.Holder != "b" || r.Epoch != 2 {
		t.Fatalf("b after a released: %+v %v, want b at epoch 2", r, err)
	}
	// Expiry by the database's clock: a short lease lapses by itself.
	if r, err := s.TakeReconcileLease(ctx, "short", "a", 150*time.Millisecond); err != nil || r.Holder != "a" {
		t.Fatalf("short take: %+v %v", r, err)
	}
	if r, _ := s.TakeReconcileLease(ctx, "short", "b", time.Minute); r.Holder != "a" {
		t.Fatalf("b before the short lease expired: %+v", r)
	}
	time.Sleep(300 * time.Millisecond)
	if r, err := s.TakeReconcileLease(ctx, "short", "b", time.Minute); err != nil || r.Holder != "b" || r.Epoch != 2 {
		t.Fatalf("b after expiry: %+v %v, want b at epoch 2", r, err)
	}
	if _, err := s.TakeReconcileLease(ctx, "x", "", time.Minute); !errors.Is(err, errdefs.ErrInvalid) {
		t.Errorf("empty holder: %v, want invalid", err)
	}
}

// testFencedUpdate: an update carrying a fence commits only while the
// fence's lease is held at its epoch; otherwise it is refused with
// ErrLeaseLost and changes nothing, even from the right generation.
func testFencedUpdate(t *testing.T, s store.Store) {
	ctx := t.Context()
	must(t, s.CreateSandbox(ctx, newSandbox("fenced", "t", "f", sandbox.StateRunning, at(0))))
	a, err := s.TakeReconcileLease(ctx, "node:x", "a", 200*time.Millisecond)
	must(t, err)
	fa := store.Fence{Name: "node:x", Holder: "a", Epoch: a.Epoch}
	sb, err := s.GetSandbox(ctx, store.AnyOwner, "fenced")
	must(t, err)
	sb.Reason = "by a, holding"
	must(t, s.UpdateSandbox(store.WithFence(ctx, fa), sb))

	time.Sleep(300 * time.Millisecond) // a's lease expires; no one took it yet
	sb.Reason = "by a, expired"
	gen := sb.Generation
	if err := s.UpdateSandbox(store.WithFence(ctx, fa), sb); !errors.Is(err, store.ErrLeaseLost) || !errors.Is(err, errdefs.ErrConflict) {
		t.Fatalf("update under an expired fence: %v, want a conflict with ErrLeaseLost", err)
	}
	if sb.Generation != gen {
		t.Fatalf("refused update moved the generation %d -> %d", gen, sb.Generation)
	}
	b, err := s.TakeReconcileLease(ctx, "node:x", "b", time.Minute)
	must(t, err)
	// a renewing now is too late: b holds it, at a new epoch.
	if r, _ := s.TakeReconcileLease(ctx, "node:x", "a", time.Minute); r.Holder != "b" {
		t.Fatalf("a took back b's lease: %+v", r)
	}
	if err := s.UpdateSandbox(store.WithFence(ctx, fa), sb); !errors.Is(err, store.ErrLeaseLost) {
		t.Fatalf("update under a's fence with b holding: %v, want ErrLeaseLost", err)
	}
	got, err := s.GetSandbox(ctx, store.AnyOwner, "fenced")
	must(t, err)
	if got.Reason != "by a, holding" {
		t.Fatalf("stored reason %q: a fenced-off write landed", got.Reason)
	}
	sb.Reason = "by b"
	must(t, s.UpdateSandbox(store.WithFence(ctx, store.Fence{Name: "node:x", Holder: "b", Epoch: b.Epoch}), sb))
	// Without a fence, the generation alone decides, as before.
	sb.Reason = "unfenced"
	must(t, s.UpdateSandbox(ctx, sb))
}

// testSharedReconcileLease: two handles (two replicas) race to take one
// free lease many times over; each round exactly one wins.
func testSharedReconcileLease(t *testing.T, a, b store.Store) {
	ctx := t.Context()
	for round := range 20 {
		name := "race-" + string(rune('a'+round))
		var wg sync.WaitGroup
		res := make([]store.LeaseRecord, 2)
		errs := make([]error, 2)
		for i, s := range []store.Store{a, b} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				res[i], errs[i] = s.TakeReconcileLease(ctx, name, []string{"a", "b"}[i], time.Minute)
			}()
		}
		wg.Wait()
		must(t, errors.Join(errs...))
		if res[0].Holder != res[1].Holder || res[0].Epoch != 1 || res[1].Epoch != 1 {
			t.Fatalf("round %d: a sees %+v, b sees %+v: want one holder at epoch 1 for both", round, res[0], res[1])
		}
	}
}

// testReplicaPresence: a sandbox keeps the replica of its last write
// through create, update and list; presence leases ("replica:<id>")
// expired long enough are purged by prefix, and nothing else is: not an
// unexpired one, not a recently expired one, not another prefix's, and
// '_' in the prefix is no wildcard.
func testReplicaPresence(t *testing.T, s store.Store) {
	ctx := t.Context()
	sb := newSandbox("rep", "t", "", sandbox.StateCreating, at(0))
	sb.Replica = "pod-a/0001"
	must(t, s.CreateSandbox(ctx, sb))
	got, err := s.GetSandbox(ctx, store.AnyOwner, "rep")
	must(t, err)
	if got.Replica != "pod-a/0001" {
		t.Fatalf("created replica %q, want pod-a/0001", got.Replica)
	}
	got.Replica = "pod-b/0002"
	must(t, s.UpdateSandbox(ctx, got))
	lst, _, err := s.ListSandboxes(ctx, store.SandboxFilter{Owner: store.AnyOwner}, store.Page{})
	must(t, err)
	if len(lst) != 1 || lst[0].Replica != "pod-b/0002" {
		t.Fatalf("listed %+v, want one sandbox of replica pod-b/0002", lst)
	}

	for _, name := range []string{"replica:old", "replica:live", "replicaXold", "node:x"} {
		ttl := 50 * time.Millisecond
		if name == "replica:live" {
			ttl = time.Minute
		}
		_, err := s.TakeReconcileLease(ctx, name, "h", ttl)
		must(t, err)
	}
	time.Sleep(300 * time.Millisecond)
	if n, err := s.PurgeReconcileLeases(ctx, "replica:", time.Hour); err != nil || n != 0 {
		t.Fatalf("purge of leases expired over an hour: %d %v, want none", n, err)
	}
	n, err := s.PurgeReconcileLeases(ctx, "replica:", 100*time.Millisecond)
	if err != nil || n != 1 {
		t.Fatalf("purge: %d %v, want 1 (replica:old)", n, err)
	}
	if _, err := s.GetReconcileLease(ctx, "replica:old"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("replica:old after purge: %v, want not found", err)
	}
	for _, name := range []string{"replica:live", "replicaXold", "node:x"} {
		if _, err := s.GetReconcileLease(ctx, name); err != nil {
			t.Errorf("%s after purge: %v, want kept", name, err)
		}
	}
	if n, err := s.PurgeReconcileLeases(ctx, "replica_", 0); err != nil || n != 0 {
		t.Errorf("purge of prefix replica_: %d %v, want none ('_' is no wildcard)", n, err)
	}
	if _, err := s.PurgeReconcileLeases(ctx, "", 0); !errors.Is(err, errdefs.ErrInvalid) {
		t.Errorf("empty prefix: %v, want invalid", err)
	}
}
