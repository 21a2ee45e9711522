//go:build !race

// One goroutine writing 2,000 create/delete cycles: pure computation the
// race detector has nothing to find in, and with it the slowest test of
// the unit step (30 s of CPU). `make unit` runs it in its pass without
// -race (UNIT_NORACE_TESTS).

package sqlite

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/berth-sh/berth/internal/store"
)

// TestGrowthPerCycle measures what a create/delete cycle costs the
// database file: without the retention sweep every cycle's records stay
// for ever; with it, pages freed by purged tombstones are reused and the
// file stops growing.
func TestGrowthPerCycle(t *testing.T) {
	ctx := context.Background()
	const n = 500
	measure := func(purge bool) float64 {
		path := filepath.Join(t.TempDir(), "berth.db")
		var s store.Store
		open := func() {
			var err error
			if s, err = Open(ctx, path); err != nil {
				t.Fatal(err)
			}
		}
		open()
		now := time.Now()
		run := func(from int) {
			for i := from; i < from+n; i++ {
				cycle(ctx, t, s, i, now)
				if purge && i%100 == 99 {
					// A retention window of 100 cycles: everything deleted
					// before this batch goes.
					for {
						r, err := s.Purge(ctx, store.PurgeRequest{Before: now.Add(time.Second)})
						if err != nil {
							t.Fatal(err)
						}
						if !r.Full(0) {
							break
						}
					}
				}
			}
		}
		// Sizes are measured closed: the WAL checkpointed into the file
		// and truncated, whenever the background checkpoints ran.
		run(0) // warm up: the schema, the first pages of each table
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		start := dbSize(t, path)
		open()
		run(n)
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		return float64(dbSize(t, path)-start) / n
	}
	without, with := measure(false), measure(true)
	t.Logf("database growth per create/delete cycle: %.0f bytes without the retention sweep, %.0f bytes with it", without, with)
	if with > without/10 {
		t.Errorf("with retention the database still grows %.0f bytes a cycle (without: %.0f)", with, without)
	}
}
