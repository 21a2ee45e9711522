package storetest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/berth-sh/berth/internal/sandbox"
	"github.com/berth-sh/berth/internal/store"
)

// testAdmissionLock: a tenant's admission lock excludes a second holder of
// the same tenant until unlock, a waiter gives up with its context, and
// another tenant is not held up.
func testAdmissionLock(t *testing.T, s store.Store) {
	ctx := t.Context()
	unlock, err := s.LockTenant(ctx, "t1")
	must(t, err)

	short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	_, err = s.LockTenant(short, "t1")
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("second LockTenant of a held tenant = %v, want it to wait and end with its context", err)
	}

	other, cancel := context.WithTimeout(ctx, 5*time.Second)
	unlockOther, err := s.LockTenant(other, "t2")
	cancel()
	if err != nil {
		t.Fatalf("LockTenant of another tenant while t1 is held: %v", err)
	}
	unlockOther()

	got := make(chan error, 1)
	go func() {
		u, err := s.LockTenant(ctx, "t1")
		if err == nil {
			u()
		}
		got <- err
	}()
	select {
	case err := <-got:
		t.Fatalf("LockTenant returned (%v) while the lock was held", err)
	case <-time.After(50 * time.Millisecond):
	}
	unlock()
	unlock() // a second unlock is harmless
	select {
	case err := <-got:
		must(t, err)
	case <-time.After(5 * time.Second):
		t.Fatal("LockTenant still waiting after unlock")
	}
}

// testSharedAdmission: two daemons race creates of one tenant at a limit,
// each counting the tenant's live sandboxes under LockTenant and inserting
// only below the limit (as engine.admitQuota does): exactly the limit are
// created. The pause between count and insert makes an unguarded count
// overshoot.
func testSharedAdmission(t *testing.T, a, b store.Store) {
	const limit, tries = 3, 16
	ctx := t.Context()
	var created atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, tries)
	for i := range tries {
		s := a
		if i%2 == 1 {
			s = b
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			unlock, err := s.LockTenant(ctx, "quota-tenant")
			if err != nil {
				errs <- err
				return
			}
			defer unlock()
			live, _, err := s.ListSandboxes(ctx, store.SandboxFilter{Owner: store.OwnedBy("quota-tenant")}, store.Page{})
			if err != nil {
				errs <- err
				return
			}
			if len(live) >= limit {
				return
			}
			time.Sleep(20 * time.Millisecond)
			if err := s.CreateSandbox(ctx, newSandbox(fmt.Sprintf("adm%02d", i), "quota-tenant", "", sandbox.StateRunning, at(time.Duration(i)))); err != nil {
				errs <- err
				return
			}
			created.Add(1)
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if n := created.Load(); n != limit {
		t.Errorf("%d creates admitted across two handles at a limit of %d", n, limit)
	}
	for _, s := range []store.Store{a, b} {
		live, _, err := s.ListSandboxes(ctx, store.SandboxFilter{Owner: store.OwnedBy("quota-tenant")}, store.Page{})
		must(t, err)
		if len(live) != limit {
			t.Errorf("%d live sandboxes recorded, want %d", len(live), limit)
		}
	}
}
