package storetest

import (
	"context"
	"errors"
	"testing"

	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/internal/sandbox"
	"github.com/berth-sh/berth/internal/store"
)

// testAtomicEvents: a state change and its events commit together or not
// at all (events are the webhook outbox).
func testAtomicEvents(t *testing.T, s store.Store) {
	ctx := context.Background()
	evCount := func(id string) int {
		t.Helper()
		evs, err := listEvents(ctx, s, id, 0, 0)
		must(t, err)
		return len(evs)
	}

	// Create with its first event: both written, ids and sandbox id set.
	sb := newSandbox("at1", "t", "atomic", sandbox.StateCreating, at(0))
	first := &sandbox.Event{Type: "state", To: sandbox.StateCreating, Time: at(0)}
	must(t, s.CreateSandbox(ctx, sb, first))
	if first.ID == 0 || first.SandboxID != "at1" || sb.Generation != 1 {
		t.Fatalf("after create: event %+v, generation %d", first, sb.Generation)
	}
	if evs, _ := listEvents(ctx, s, "at1", 0, 0); len(evs) != 1 || evs[0].ID != first.ID || evs[0].To != sandbox.StateCreating {
		t.Fatalf("events after create = %+v", evs)
	}

	// Update with two events.
	sb.State = sandbox.StateRunning
	e1 := &sandbox.Event{Type: "state", From: sandbox.StateCreating, To: sandbox.StateRunning, Time: at(1)}
	e2 := &sandbox.Event{Type: "note", Time: at(2)}
	must(t, s.UpdateSandbox(ctx, sb, e1, e2))
	if sb.Generation != 2 || e1.ID <= first.ID || e2.ID <= e1.ID {
		t.Fatalf("after update: generation %d, ids %d %d %d", sb.Generation, first.ID, e1.ID, e2.ID)
	}
	if n := evCount("at1"); n != 3 {
		t.Fatalf("%d events after update, want 3", n)
	}

	// A failing compare-and-swap writes neither the record nor its event.
	stale := *sb
	stale.Generation = 1
	stale.State = sandbox.StateStopped
	lost := &sandbox.Event{Type: "state", From: sandbox.StateRunning, To: sandbox.StateStopped, Time: at(3)}
	wantCategory(t, s.UpdateSandbox(ctx, &stale, lost), errdefs.ErrConflict)
	if lost.ID != 0 || stale.Generation != 1 {
		t.Errorf("failed update set event id %d, generation %d", lost.ID, stale.Generation)
	}
	if n := evCount("at1"); n != 3 {
		t.Errorf("%d events after a failed compare-and-swap, want 3", n)
	}
	// Nor does an update of a record that is gone.
	ghost := newSandbox("ghost", "t", "", sandbox.StateRunning, at(0))
	ghost.Generation = 1
	wantCategory(t, s.UpdateSandbox(ctx, ghost, &sandbox.Event{SandboxID: "at1", Type: "x"}), errdefs.ErrNotFound)
	if n := evCount("at1"); n != 3 {
		t.Errorf("%d events after updating a missing record, want 3", n)
	}

	// An event that cannot be written (its sandbox does not exist: a
	// foreign-key violation) rolls the update back, the events before it
	// included.
	sb.State = sandbox.StatePaused
	ok := &sandbox.Event{Type: "state", To: sandbox.StatePaused, Time: at(4)}
	bad := &sandbox.Event{SandboxID: "no-such-sandbox", Type: "state", Time: at(4)}
	wantCategory(t, s.UpdateSandbox(ctx, sb, ok, bad), errdefs.ErrNotFound)
	if sb.Generation != 2 || ok.ID != 0 {
		t.Errorf("rolled-back update: generation %d, event id %d", sb.Generation, ok.ID)
	}
	got, err := s.GetSandbox(ctx, store.AnyOwner, "at1")
	must(t, err)
	if got.State != sandbox.StateRunning || got.Generation != 2 {
		t.Errorf("rolled-back update was stored: state %s generation %d", got.State, got.Generation)
	}
	if n := evCount("at1"); n != 3 {
		t.Errorf("%d events after a rolled-back update, want 3", n)
	}
	// The record is still writable at its generation.
	must(t, s.UpdateSandbox(ctx, sb, ok))
	if sb.Generation != 3 || ok.ID == 0 {
		t.Errorf("retry: generation %d, event id %d", sb.Generation, ok.ID)
	}

	// A create whose event fails leaves no record; its name stays free.
	nb := newSandbox("at2", "t", "second", sandbox.StateCreating, at(5))
	wantCategory(t, s.CreateSandbox(ctx, nb, &sandbox.Event{SandboxID: "no-such-sandbox", Type: "state"}), errdefs.ErrNotFound)
	if _, err := s.GetSandbox(ctx, store.AnyOwner, "at2"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("create with a failed event left the record: %v", err)
	}
	must(t, s.CreateSandbox(ctx, nb))
	// A create that conflicts writes no event.
	dup := newSandbox("at3", "t", "second", sandbox.StateCreating, at(6))
	wantCategory(t, s.CreateSandbox(ctx, dup, &sandbox.Event{Type: "state"}), errdefs.ErrConflict)
	if n := evCount("at3"); n != 0 {
		t.Errorf("conflicting create wrote %d events", n)
	}
	// Events written together with a state change reach the outbox in id
	// order, like appended ones.
	all, err := s.ListEventsSince(ctx, 0, 100)
	must(t, err)
	for i := 1; i < len(all); i++ {
		if all[i].ID <= all[i-1].ID {
			t.Errorf("outbox out of order: %d after %d", all[i].ID, all[i-1].ID)
		}
	}
	if len(all) != 4 {
		t.Errorf("outbox holds %d events, want 4", len(all))
	}
}
