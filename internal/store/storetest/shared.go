package storetest

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/internal/sandbox"
	"github.com/berth-sh/berth/internal/store"
)

// RunShared runs the cases about two daemons sharing one database: open must
// return two independently opened Store handles (separate connection pools,
// as two processes would have) on the same new, empty database. RunShared
// closes both when the sub-test ends.
//
// What it proves: every update is a compare-and-swap on the sandbox's
// generation, so two handles can never both win a transition, each sees the
// other's committed writes, and live-name uniqueness holds across handles.
func RunShared(t *testing.T, open func(t *testing.T) (a, b store.Store)) {
	for _, tc := range []struct {
		name string
		fn   func(t *testing.T, a, b store.Store)
	}{
		{"SharedCAS", testSharedCAS},
		{"SharedConcurrentUpdates", testSharedConcurrentUpdates},
		{"SharedNameUnique", testSharedNameUnique},
		{"SharedEventCursor", testSharedEventCursor},
		{"SharedAllEvents", testSharedAllEvents},
		{"SharedIDSlots", testSharedIDSlots},
		{"SharedAuditChain", auditRace},
		{"SharedAdmission", testSharedAdmission},
		{"SharedReconcileLease", testSharedReconcileLease},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, b := open(t)
			t.Cleanup(func() {
				if err := errors.Join(a.Close(), b.Close()); err != nil {
					t.Errorf("Close: %v", err)
				}
			})
			tc.fn(t, a, b)
		})
	}
}

// testSharedCAS: two daemons load the same record; the first to write wins
// and the other's stale write is refused until it reloads.
func testSharedCAS(t *testing.T, a, b store.Store) {
	ctx := t.Context()
	must(t, a.CreateSandbox(ctx, newSandbox("shared", "t", "s", sandbox.StateCreating, at(0))))
	fromA, err := a.GetSandbox(ctx, store.AnyOwner, "shared")
	must(t, err)
	fromB, err := b.GetSandbox(ctx, store.AnyOwner, "shared")
	must(t, err)
	checkSandbox(t, fromB, fromA)

	must(t, fromB.Transition(sandbox.StateRunning, sandbox.CauseReconciler, "started by b", at(time.Second)))
	must(t, b.UpdateSandbox(ctx, fromB))

	must(t, fromA.Transition(sandbox.StateFailed, sandbox.CauseReconciler, "a thinks it failed", at(2*time.Second)))
	wantCategory(t, a.UpdateSandbox(ctx, fromA), errdefs.ErrConflict, "shared", "modified concurrently")
	if fromA.Generation != 1 {
		t.Errorf("refused update changed Generation to %d", fromA.Generation)
	}
	got, err := a.GetSandbox(ctx, store.AnyOwner, "shared")
	must(t, err)
	checkSandbox(t, got, fromB)

	// a reloads and retries; now b's copy is the stale one.
	must(t, got.Transition(sandbox.StatePaused, sandbox.CauseUser, "pause", at(3*time.Second)))
	must(t, a.UpdateSandbox(ctx, got))
	fromB.Reason = "stale"
	wantCategory(t, b.UpdateSandbox(ctx, fromB), errdefs.ErrConflict, "shared")
	final, err := b.GetSandbox(ctx, store.AnyOwner, "shared")
	must(t, err)
	checkSandbox(t, final, got)
	if final.Generation != 3 {
		t.Errorf("Generation = %d, want 3", final.Generation)
	}

	// Events and purges are visible across handles too.
	ev := newEvent("shared", 1)
	must(t, b.AppendEvent(ctx, ev))
	evs, err := listEvents(ctx, a, "shared", 0, 0)
	must(t, err)
	if len(evs) != 1 || evs[0].ID != ev.ID {
		t.Errorf("events through the other handle = %v, want [%d]", evs, ev.ID)
	}
	must(t, a.PurgeSandbox(ctx, "shared"))
	_, err = b.GetSandbox(ctx, store.AnyOwner, "shared")
	wantCategory(t, err, errdefs.ErrNotFound, "shared")
}

// testSharedConcurrentUpdates is ConcurrentUpdates with the 20 writers split
// across the two handles: still exactly one winner per generation.
func testSharedConcurrentUpdates(t *testing.T, a, b store.Store) {
	raceUpdates(t, []store.Store{a, b})
}

// testSharedNameUnique races creates of one live name through both handles:
// exactly one succeeds.
func testSharedNameUnique(t *testing.T, a, b store.Store) {
	ctx := t.Context()
	const workers = 10
	var (
		wg        sync.WaitGroup
		start     = make(chan struct{})
		mu        sync.Mutex
		wins      int
		conflicts int
		others    []error
	)
	for i := range workers {
		s := []store.Store{a, b}[i%2]
		wg.Go(func() {
			sb := newSandbox(fmt.Sprintf("dup-%d", i), "t", "web", sandbox.StateCreating, at(time.Duration(i)))
			<-start
			err := s.CreateSandbox(ctx, sb)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				wins++
			case errors.Is(err, errdefs.ErrConflict):
				conflicts++
			default:
				others = append(others, err)
			}
		})
	}
	close(start)
	wg.Wait()
	if len(others) > 0 {
		t.Fatalf("unexpected errors: %v", errors.Join(others...))
	}
	if wins != 1 || conflicts != workers-1 {
		t.Fatalf("%d creates won and %d conflicted, want 1 and %d", wins, conflicts, workers-1)
	}
	for _, s := range []store.Store{a, b} {
		all, err := listSandboxes(ctx, s, store.SandboxFilter{Owner: store.AnyOwner, IncludeDeleted: true})
		must(t, err)
		if len(all) != 1 {
			t.Errorf("%d records after the race, want 1: %v", len(all), ids(all))
		}
	}
}

// testSharedEventCursor appends events through both handles while a reader
// follows them with a cursor, as the webhook deliverer does with
// ListEventsSince: the reader must see every event. So event ids must become
// visible in id order: an id above the cursor that committed after the
// reader passed it would be skipped for ever.
func testSharedEventCursor(t *testing.T, a, b store.Store) {
	ctx := t.Context()
	const writers, each = 8, 40
	for w := range writers {
		must(t, a.CreateSandbox(ctx, newSandbox(fmt.Sprintf("ev-%d", w), "t", "", sandbox.StateRunning, at(0))))
	}
	var (
		wg   sync.WaitGroup
		errc = make(chan error, writers)
		done = make(chan struct{})
	)
	for w := range writers {
		s := []store.Store{a, b}[w%2]
		wg.Go(func() {
			for i := range each {
				if err := s.AppendEvent(ctx, newEvent(fmt.Sprintf("ev-%d", w), i)); err != nil {
					errc <- err
					return
				}
			}
		})
	}
	go func() { wg.Wait(); close(done) }()

	seen := map[int64]bool{}
	var cursor int64
	poll := func(s store.Store) {
		evs, err := s.ListEventsSince(ctx, cursor, 50)
		must(t, err)
		for _, ev := range evs {
			if ev.ID <= cursor {
				t.Fatalf("ListEventsSince(%d) returned id %d", cursor, ev.ID)
			}
			seen[ev.ID] = true
			cursor = ev.ID
		}
	}
	for finished := false; !finished; {
		select {
		case <-done:
			finished = true
		default:
		}
		poll([]store.Store{a, b}[len(seen)%2])
	}
	close(errc)
	for err := range errc {
		t.Fatal(err)
	}
	for before := -1; before != len(seen); {
		before = len(seen)
		poll(b)
	}
	var total int
	for w := range writers {
		evs, err := listEvents(ctx, b, fmt.Sprintf("ev-%d", w), 0, 0)
		must(t, err)
		total += len(evs)
		for _, ev := range evs {
			if !seen[ev.ID] {
				t.Errorf("the cursor skipped event %d of %s: it became visible after a later id", ev.ID, ev.SandboxID)
			}
		}
	}
	if total != writers*each {
		t.Errorf("%d events stored, want %d", total, writers*each)
	}
}
