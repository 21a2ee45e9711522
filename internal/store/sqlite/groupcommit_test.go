package sqlite

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/internal/sandbox"
	"github.com/berth-sh/berth/internal/store"
)

// TestGroupCommit: writes that wait for the one writer commit together
// (sqlstore/batch.go), and each keeps its own outcome: of 240 concurrent
// writes, the 20 duplicate tenant names fail alone as conflicts, every
// other write (tenants, sandboxes with their events) is kept, and a write
// whose caller's context ended first writes nothing.
func TestGroupCommit(t *testing.T) {
	ctx := t.Context()
	s, err := Open(ctx, filepath.Join(t.TempDir(), "berth.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	now := time.Now()
	var wg sync.WaitGroup
	var mu sync.Mutex
	conflicts, failures := 0, []error{}
	run := func(fn func() error) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := fn(); err != nil {
				mu.Lock()
				defer mu.Unlock()
				if errors.Is(err, errdefs.ErrConflict) {
					conflicts++
				} else {
					failures = append(failures, err)
				}
			}
		}()
	}
	for i := range 100 {
		run(func() error { return s.CreateTenant(ctx, &store.Tenant{Name: fmt.Sprintf("t%d", i), CreatedAt: now}) })
		run(func() error {
			sb := &sandbox.Sandbox{ID: fmt.Sprintf("sb%03d", i), State: sandbox.StateCreating, Node: "n", CreatedAt: now, UpdatedAt: now}
			return s.CreateSandbox(ctx, sb, &sandbox.Event{SandboxID: sb.ID, Time: now, Type: "state", To: sandbox.StateCreating})
		})
	}
	for range 20 {
		run(func() error { return s.CreateTenant(ctx, &store.Tenant{Name: "t5", CreatedAt: now}) })
	}
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	if err := s.CreateTenant(cancelled, &store.Tenant{Name: "never", CreatedAt: now}); !errors.Is(err, context.Canceled) {
		t.Errorf("a write with an ended context: %v, want context.Canceled", err)
	}
	wg.Wait()
	if conflicts != 20 || len(failures) != 0 {
		t.Fatalf("%d conflicts (want 20), failures %v", conflicts, failures)
	}
	tenants, err := s.ListTenants(ctx)
	if err != nil || len(tenants) != 100 {
		t.Fatalf("%d tenants kept (want 100): %v", len(tenants), err)
	}
	if _, err := s.GetTenant(ctx, "never"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("the cancelled write was kept: %v", err)
	}
	sbs, _, err := s.ListSandboxes(ctx, store.SandboxFilter{Owner: store.AnyOwner}, store.Page{})
	if err != nil || len(sbs) != 100 {
		t.Fatalf("%d sandboxes kept (want 100): %v", len(sbs), err)
	}
	evs, err := s.ListEventsSince(ctx, 0, 1000)
	if err != nil || len(evs) != 100 {
		t.Fatalf("%d events kept (want 100): %v", len(evs), err)
	}
}
