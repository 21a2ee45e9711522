package storetest

import (
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/internal/store"
)

// testIDSlots: lowest free slot first, idempotent per sandbox, released
// on delete and then reused, bounded by the limit.
func testIDSlots(t *testing.T, s store.Store) {
	ctx := t.Context()
	alloc := func(id string) int {
		t.Helper()
		n, err := s.AllocateIDSlot(ctx, id, "node-a", 3)
		must(t, err)
		return n
	}
	if a, b := alloc("a"), alloc("b"); a != 0 || b != 1 {
		t.Fatalf("slots %d, %d; want 0, 1", a, b)
	}
	if again := alloc("a"); again != 0 {
		t.Fatalf("a allocated again got %d, want its own 0", again)
	}
	if c := alloc("c"); c != 2 {
		t.Fatalf("c got %d, want 2", c)
	}
	if _, err := s.AllocateIDSlot(ctx, "d", "node-a", 3); !errors.Is(err, errdefs.ErrExhausted) {
		t.Fatalf("fourth slot of three: %v, want ErrExhausted", err)
	}
	must(t, s.ReleaseIDSlot(ctx, "b"))
	must(t, s.ReleaseIDSlot(ctx, "b")) // twice is fine
	must(t, s.ReleaseIDSlot(ctx, "never-had-one"))
	if d := alloc("d"); d != 1 {
		t.Fatalf("d got %d after b released 1", d)
	}
	must(t, s.ReleaseIDSlot(ctx, "a"))
	if e := alloc("e"); e != 0 {
		t.Fatalf("e got %d after a released 0", e)
	}
	if _, err := s.AllocateIDSlot(ctx, "x", "node-b", 10); err != nil {
		t.Fatal(err)
	}
	got, err := s.ListIDSlots(ctx, "node-a")
	must(t, err)
	if fmt.Sprint(got) != fmt.Sprint(map[string]int{"c": 2, "d": 1, "e": 0}) {
		t.Fatalf("node-a slots %v", got)
	}
	all, err := s.ListIDSlots(ctx, "")
	must(t, err)
	if len(all) != 4 || all["x"] != 3 {
		t.Fatalf("all slots %v", all)
	}
}

// testIDSlotsConcurrent: many allocators at once never share a slot, and
// each sandbox gets exactly one.
func testIDSlotsConcurrent(t *testing.T, s store.Store) {
	concurrentIDSlots(t, s, s)
}

func concurrentIDSlots(t *testing.T, a, b store.Store) {
	ctx := t.Context()
	const n = 40
	slots := make([]int, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s := a
			if i%2 == 1 {
				s = b
			}
			// Each sandbox asks twice, as a retried create would.
			first, err := s.AllocateIDSlot(ctx, fmt.Sprintf("sb-%d", i), "n", 1000)
			if err == nil {
				var second int
				second, err = s.AllocateIDSlot(ctx, fmt.Sprintf("sb-%d", i), "n", 1000)
				if err == nil && second != first {
					err = fmt.Errorf("second allocation %d != first %d", second, first)
				}
			}
			slots[i], errs[i] = first, err
		}()
	}
	wg.Wait()
	seen := map[int]int{}
	for i := range n {
		if errs[i] != nil {
			t.Fatalf("sandbox %d: %v", i, errs[i])
		}
		if j, dup := seen[slots[i]]; dup {
			t.Fatalf("sandboxes %d and %d both got slot %d", j, i, slots[i])
		}
		seen[slots[i]] = i
	}
	for k := range n {
		if _, ok := seen[k]; !ok {
			t.Fatalf("slot %d skipped: %v", k, slots)
		}
	}
	all, err := b.ListIDSlots(ctx, "")
	must(t, err)
	if len(all) != n {
		t.Fatalf("%d slots listed, want %d", len(all), n)
	}
}

// testSharedIDSlots: two daemons on one store allocate from one space; a
// slot one holds is seen and kept by the other (and so by a restarted one).
func testSharedIDSlots(t *testing.T, a, b store.Store) {
	ctx := t.Context()
	n, err := a.AllocateIDSlot(ctx, "held", "node-a", 10)
	must(t, err)
	again, err := b.AllocateIDSlot(ctx, "held", "node-a", 10)
	must(t, err)
	if again != n {
		t.Fatalf("the other handle gave held slot %d, it has %d", again, n)
	}
	must(t, a.ReleaseIDSlot(ctx, "held"))
	concurrentIDSlots(t, a, b)
}
