package leader_test

import (
	"context"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/berth-sh/berth/internal/leader"
	"github.com/berth-sh/berth/internal/store/postgres"
	"github.com/berth-sh/berth/internal/testenv/pgtest"
)

func TestMain(m *testing.M) {
	code := m.Run()
	pgtest.Stop()
	os.Exit(code)
}

// TestHolderLosesDatabase: two keepers on one real PostgreSQL; the
// holder's database goes away (its pool closed while its process lives
// on). It stops believing it holds the lease on its own, before the other
// can take it, and the other takes it within TTL + TTL/3 of the loss.
func TestHolderLosesDatabase(t *testing.T) {
	const ttl = 600 * time.Millisecond
	url := pgtest.Database(t)
	quiet := leader.WithLogger(slog.New(slog.DiscardHandler))
	type keeper struct {
		k    *leader.Keeper
		stop func()
	}
	start := func(name string) (keeper, func() error) {
		st, err := postgres.Open(t.Context(), url)
		if err != nil {
			t.Fatal(err)
		}
		k := leader.New(st, leader.StoreLeaseName, name, leader.WithTTL(ttl), quiet)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { defer close(done); k.Run(ctx) }()
		stop := func() { cancel(); <-done }
		t.Cleanup(func() { stop(); st.Close() })
		return keeper{k, stop}, st.Close
	}
	a, cutA := start("a")
	for _, ok := a.k.Held(); !ok; _, ok = a.k.Held() {
		time.Sleep(5 * time.Millisecond)
	}
	b, _ := start("b")
	time.Sleep(2 * ttl)
	if _, ok := b.k.Held(); ok {
		t.Fatal("b holds the lease while a renews it")
	}
	if st := b.k.Status(); st.Holder != "a" || st.Held || st.Epoch != 1 {
		t.Fatalf("b's view: %+v, want a at epoch 1", st)
	}

	if err := cutA(); err != nil {
		t.Fatal(err)
	}
	cut := time.Now()
	var aLost, bTook time.Duration
	for aLost == 0 || bTook == 0 {
		_, aHeld := a.k.Held()
		_, bHeld := b.k.Held()
		if aHeld && bHeld {
			t.Fatal("both keepers hold the lease")
		}
		if !aHeld && aLost == 0 {
			aLost = time.Since(cut)
		}
		if bHeld && bTook == 0 {
			bTook = time.Since(cut)
		}
		if time.Since(cut) > 5*ttl {
			t.Fatalf("after the cut: a lost it after %v, b took it after %v (0: not yet)", aLost, bTook)
		}
		time.Sleep(2 * time.Millisecond)
	}
	// a's belief ends within the TTL of its last renewal, before the cut;
	// what this loop sees of it lags by its polling on a loaded machine,
	// so the check is the order that matters: a stopped before b began.
	if aLost > bTook {
		t.Errorf("a stopped believing after %v, b took over after %v: a must stop first", aLost, bTook)
	}
	if bTook > ttl+ttl/3+200*time.Millisecond {
		t.Errorf("b took over after %v, want within TTL + TTL/3", bTook)
	}
	if st := b.k.Status(); st.Epoch != 2 {
		t.Errorf("epoch after the takeover: %d, want 2", st.Epoch)
	}
	if st := a.k.Status(); st.Held || st.Error == "" {
		t.Errorf("a's status after the cut: %+v, want not held with the store's error", st)
	}
	t.Logf("a stopped after %v, b took over after %v (TTL %v)", aLost.Round(time.Millisecond), bTook.Round(time.Millisecond), ttl)
}
