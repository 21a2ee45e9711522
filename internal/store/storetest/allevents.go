package storetest

import (
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/berth-sh/berth/internal/sandbox"
	"github.com/berth-sh/berth/internal/store"
)

// testAllEvents: ListAllEvents reads the events of every sandbox its owner
// sees, filtered by sandbox, type and id, in id order and paged; a commit
// that appends events closes the channel EventsWritten handed out before.
func testAllEvents(t *testing.T, s store.Store) {
	ctx := t.Context()
	for _, sb := range []struct{ id, tenant string }{{"a1", "a"}, {"a2", "a"}, {"b1", "b"}, {"h1", ""}} {
		must(t, s.CreateSandbox(ctx, newSandbox(sb.id, sb.tenant, "", sandbox.StateRunning, at(0)),
			&sandbox.Event{Type: "state", To: sandbox.StateRunning}))
	}
	for i := range 3 {
		for _, id := range []string{"a1", "a2", "b1", "h1"} {
			ev := newEvent(id, i)
			if i == 1 {
				ev.Type = "exec"
			}
			must(t, s.AppendEvent(ctx, ev))
		}
	}
	ids := func(evs []*sandbox.Event) []string {
		var out []string
		for _, ev := range evs {
			out = append(out, ev.SandboxID+"/"+ev.Type)
		}
		return out
	}
	list := func(f store.EventFilter, limit int) []*sandbox.Event {
		t.Helper()
		var out []*sandbox.Event
		p := store.Page{Limit: limit}
		for {
			evs, next, err := s.ListAllEvents(ctx, f, p)
			must(t, err)
			for i, ev := range evs {
				if i > 0 && ev.ID <= evs[i-1].ID {
					t.Fatalf("ListAllEvents out of id order: %d after %d", ev.ID, evs[i-1].ID)
				}
			}
			out = append(out, evs...)
			if next == "" {
				return out
			}
			p.Cursor = next
		}
	}
	everything := list(store.EventFilter{Owner: store.AnyOwner}, 0)
	if len(everything) != 16 {
		t.Fatalf("AnyOwner: %d events, want 16: %v", len(everything), ids(everything))
	}
	for _, tc := range []struct {
		name string
		f    store.EventFilter
		want []string
	}{
		{"tenant a", store.EventFilter{Owner: store.OwnedBy("a")},
			[]string{"a1/state", "a2/state", "a1/state", "a2/state", "a1/exec", "a2/exec", "a1/state", "a2/state"}},
		{"tenant b, paged", store.EventFilter{Owner: store.OwnedBy("b")},
			[]string{"b1/state", "b1/state", "b1/exec", "b1/state"}},
		{"host tenant", store.EventFilter{Owner: store.OwnedBy("")},
			[]string{"h1/state", "h1/state", "h1/exec", "h1/state"}},
		{"no such tenant", store.EventFilter{Owner: store.OwnedBy("c")}, nil},
		{"one sandbox", store.EventFilter{Owner: store.OwnedBy("a"), SandboxIDs: []string{"a2"}},
			[]string{"a2/state", "a2/state", "a2/exec", "a2/state"}},
		{"another tenant's sandbox", store.EventFilter{Owner: store.OwnedBy("a"), SandboxIDs: []string{"b1"}}, nil},
		{"two sandboxes, one type", store.EventFilter{Owner: store.AnyOwner, SandboxIDs: []string{"a1", "b1"}, Types: []string{"exec"}},
			[]string{"a1/exec", "b1/exec"}},
		{"after", store.EventFilter{Owner: store.OwnedBy("a"), AfterID: everything[11].ID},
			[]string{"a1/state", "a2/state"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, limit := range []int{0, 1, 3} {
				if got := ids(list(tc.f, limit)); !slices.Equal(got, tc.want) {
					t.Errorf("limit %d: got %v, want %v", limit, got, tc.want)
				}
			}
		})
	}
	// A cursor of another list is refused.
	_, next, err := s.ListEvents(ctx, store.AnyOwner, "a1", 0, store.Page{Limit: 1})
	must(t, err)
	if _, _, err := s.ListAllEvents(ctx, store.EventFilter{Owner: store.AnyOwner}, store.Page{Limit: 1, Cursor: next}); err == nil {
		t.Error("ListAllEvents took a cursor of ListEvents")
	}

	// EventsWritten: closed by a commit with events, not before.
	ch := s.EventsWritten()
	select {
	case <-ch:
		t.Fatal("EventsWritten closed before any write")
	default:
	}
	sb, err := s.GetSandbox(ctx, store.AnyOwner, "a1")
	must(t, err)
	must(t, s.UpdateSandbox(ctx, sb)) // no event: no wake-up needed
	must(t, s.AppendEvent(ctx, newEvent("a1", 9)))
	select {
	case <-ch:
	case <-time.After(5 * time.Second):
		t.Fatal("EventsWritten not closed by AppendEvent")
	}
	if again := s.EventsWritten(); again == ch {
		t.Fatal("EventsWritten handed out a closed channel again")
	}
}

// testSharedAllEvents: a follower on one handle, reading a tenant's events
// with ListAllEvents after the last id it saw, never skips nor repeats one
// while writers on both handles append concurrently (ids drawn at insert
// become visible in id order: see AppendEvent).
func testSharedAllEvents(t *testing.T, a, b store.Store) {
	ctx := t.Context()
	const writers, each = 6, 30
	for w := range writers {
		tenant := []string{"x", "y"}[w%2]
		must(t, a.CreateSandbox(ctx, newSandbox(fmt.Sprintf("ae-%d", w), tenant, "", sandbox.StateRunning, at(0))))
	}
	var wg sync.WaitGroup
	errc := make(chan error, writers)
	done := make(chan struct{})
	for w := range writers {
		s := []store.Store{a, b}[w/2%2]
		wg.Go(func() {
			for i := range each {
				if err := s.AppendEvent(ctx, newEvent(fmt.Sprintf("ae-%d", w), i)); err != nil {
					errc <- err
					return
				}
			}
		})
	}
	go func() { wg.Wait(); close(done) }()
	seen := map[int64]bool{}
	var cursor int64
	poll := func() {
		evs, _, err := b.ListAllEvents(ctx, store.EventFilter{Owner: store.OwnedBy("x"), AfterID: cursor}, store.Page{Limit: 7})
		must(t, err)
		for _, ev := range evs {
			if ev.ID <= cursor || seen[ev.ID] {
				t.Fatalf("event %d read twice or out of order (cursor %d)", ev.ID, cursor)
			}
			if ev.SandboxID != "ae-0" && ev.SandboxID != "ae-2" && ev.SandboxID != "ae-4" {
				t.Fatalf("tenant x read event %d of %s", ev.ID, ev.SandboxID)
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
		poll()
	}
	close(errc)
	for err := range errc {
		t.Fatal(err)
	}
	for before := -1; before != len(seen); {
		before = len(seen)
		poll()
	}
	if want := writers / 2 * each; len(seen) != want {
		t.Fatalf("the follower saw %d of tenant x's %d events: one became visible after a later id", len(seen), want)
	}
}
