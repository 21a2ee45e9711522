// Package storetest is the conformance suite of store.Store: every backend
// runs Run from its own tests, and passing it is what "implements the store"
// means.
package storetest

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/internal/sandbox"
	"github.com/berth-sh/berth/internal/store"
)

// Run runs the conformance suite. open must return a new, empty store for
// each call; Run closes it when the sub-test ends.
func Run(t *testing.T, open func(t *testing.T) store.Store) {
	for _, tc := range []struct {
		name string
		fn   func(t *testing.T, s store.Store)
	}{
		{"SandboxCRUD", testSandboxCRUD},
		{"SandboxZeroTimes", testSandboxZeroTimes},
		{"SandboxDuplicateID", testSandboxDuplicateID},
		{"SandboxNameUnique", testSandboxNameUnique},
		{"SandboxCAS", testSandboxCAS},
		{"SandboxFilters", testSandboxFilters},
		{"SandboxSpecFilters", testSandboxSpecFilters},
		{"Events", testEvents},
		{"AllEvents", testAllEvents},
		{"PurgeRemovesEvents", testPurgeRemovesEvents},
		{"Templates", testTemplates},
		{"APIKeys", testAPIKeys},
		{"Tenants", testTenants},
		{"PortTokens", testPortTokens},
		{"Processes", testProcesses},
		{"Leases", testLeases},
		{"ConcurrentUpdates", testConcurrentUpdates},
		{"ConcurrentWriters", testConcurrentWriters},
		{"NotFound", testNotFound},
		{"Volumes", testVolumes},
		{"SandboxLifecycleTimes", testSandboxLifecycleTimes},
		{"WebhookOutbox", testWebhookOutbox},
		{"Snapshots", testSnapshots},
		{"PoolResizeAtomic", testPoolResizeAtomic},
		{"Peers", testPeers},
		{"Flows", testFlows},
		{"IDSlots", testIDSlots},
		{"IDSlotsConcurrent", testIDSlotsConcurrent},
		{"IdempotencyKeys", testIdempotencyKeys},
		{"IdempotencyConcurrent", testIdempotencyConcurrent},
		{"AtomicEvents", testAtomicEvents},
		{"Paging", testPaging},
		{"PagingConcurrentInserts", testPagingConcurrentInserts},
		{"Retention", testRetention},
		{"OwnerIsolation", testOwnerIsolation},
		{"Audit", testAudit},
		{"AuditConcurrent", testAuditConcurrent},
		{"Quotas", testQuotas},
		{"Secrets", testSecrets},
		{"TenantTemplates", testTenantTemplates},
		{"TenantBuildCache", testTenantBuildCache},
		{"AdmissionLock", testAdmissionLock},
		{"ReconcileLeases", testReconcileLeases},
		{"FencedUpdate", testFencedUpdate},
		{"ReplicaPresence", testReplicaPresence},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := open(t)
			t.Cleanup(func() {
				if err := s.Close(); err != nil {
					t.Errorf("Close: %v", err)
				}
			})
			tc.fn(t, s)
		})
	}
}

// base is a fixed instant with sub-microsecond digits and a non-UTC zone, so
// round trips show both truncation to microseconds and conversion to UTC.
var base = time.Date(2025, 3, 14, 15, 9, 26, 535897932, time.FixedZone("X", 5*3600))

func at(d time.Duration) time.Time { return base.Add(d) }

// stored is what a time looks like after a round trip.
func stored(t time.Time) time.Time {
	if t.IsZero() {
		return time.Time{}
	}
	return t.Truncate(time.Microsecond).UTC()
}

func newSandbox(id, tenant, name string, state sandbox.State, created time.Time) *sandbox.Sandbox {
	return &sandbox.Sandbox{
		ID:     id,
		Name:   name,
		Tenant: tenant,
		State:  state,
		Spec: sandbox.Spec{
			Template:   "base",
			Persistent: true,
			Resources:  sandbox.Resources{CPUs: 1.5, MemoryBytes: 512 << 20, Pids: 256},
			Env:        map[string]string{"A": "1", "B": "two"},
			Labels:     map[string]string{"team": "x"},
			Timeout:    90 * time.Minute,
			Network:    "none",
			Runtime:    "runc",
			Workdir:    "/work",
			OneShot:    false,
		},
		CreatedAt: created,
		UpdatedAt: created.Add(time.Second),
		StartedAt: created.Add(2 * time.Second),
		Cause:     sandbox.CauseUser,
		Reason:    "created by test",
		Error:     "teardown: device busy",
	}
}

// wantSandbox is sb as the store should return it.
func wantSandbox(sb *sandbox.Sandbox) *sandbox.Sandbox {
	c := *sb
	c.CreatedAt, c.UpdatedAt = stored(c.CreatedAt), stored(c.UpdatedAt)
	c.StartedAt, c.DeletedAt = stored(c.StartedAt), stored(c.DeletedAt)
	c.LastActivityAt, c.PausedAt, c.StoppedAt = stored(c.LastActivityAt), stored(c.PausedAt), stored(c.StoppedAt)
	return &c
}

func checkSandbox(t *testing.T, got, want *sandbox.Sandbox) {
	t.Helper()
	w := wantSandbox(want)
	if !reflect.DeepEqual(got, w) {
		t.Errorf("sandbox mismatch:\n got %+v\nwant %+v", got, w)
	}
	for _, tm := range []time.Time{got.CreatedAt, got.UpdatedAt, got.StartedAt, got.DeletedAt} {
		if !tm.IsZero() && tm.Location() != time.UTC {
			t.Errorf("time %v is not in UTC", tm)
		}
	}
}

func ids(sbs []*sandbox.Sandbox) []string {
	out := []string{}
	for _, sb := range sbs {
		out = append(out, sb.ID)
	}
	return out
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// wantCategory checks that err is in category cat, that its message
// contains every one of msgs, and that no driver error leaks through.
func wantCategory(t *testing.T, err, cat error, msgs ...string) {
	t.Helper()
	if !errors.Is(err, cat) {
		t.Fatalf("err = %v, want category %v", err, cat)
	}
	if errors.Is(err, sql.ErrNoRows) {
		t.Errorf("err %v leaks sql.ErrNoRows", err)
	}
	for _, m := range msgs {
		if !strings.Contains(err.Error(), m) {
			t.Errorf("err %q does not mention %q", err, m)
		}
	}
}

func testSandboxCRUD(t *testing.T, s store.Store) {
	ctx := t.Context()
	sb := newSandbox("sb-1", "t1", "alpha", sandbox.StateCreating, at(0))
	sb.Generation = 42 // ignored: a new record starts at 1
	must(t, s.CreateSandbox(ctx, sb))
	if sb.Generation != 1 {
		t.Fatalf("Generation after create = %d, want 1", sb.Generation)
	}

	got, err := s.GetSandbox(ctx, store.AnyOwner, "sb-1")
	must(t, err)
	checkSandbox(t, got, sb)

	got, err = s.GetSandboxByName(ctx, store.OwnedBy("t1"), "alpha")
	must(t, err)
	checkSandbox(t, got, sb)
	if _, err := s.GetSandboxByName(ctx, store.OwnedBy("t2"), "alpha"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("GetSandboxByName in another tenant: err = %v, want not found", err)
	}

	// Update every mutable field.
	upd := *got
	upd.State = sandbox.StateDeleted
	upd.Spec.Env = map[string]string{"C": "3"}
	upd.Spec.OneShot = true
	upd.UpdatedAt = at(time.Hour)
	upd.DeletedAt = at(time.Hour + time.Nanosecond)
	upd.Cause = sandbox.CausePolicy
	upd.Reason = "idle"
	upd.Error = ""
	must(t, s.UpdateSandbox(ctx, &upd))
	if upd.Generation != 2 {
		t.Errorf("Generation after update = %d, want 2", upd.Generation)
	}
	got, err = s.GetSandbox(ctx, store.AnyOwner, "sb-1")
	must(t, err)
	checkSandbox(t, got, &upd)

	// A tombstone is no longer found by name, but still by id.
	if _, err := s.GetSandboxByName(ctx, store.OwnedBy("t1"), "alpha"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("GetSandboxByName of a tombstone: err = %v, want not found", err)
	}

	must(t, s.PurgeSandbox(ctx, "sb-1"))
	_, err = s.GetSandbox(ctx, store.AnyOwner, "sb-1")
	wantCategory(t, err, errdefs.ErrNotFound, "sb-1")
}

func testSandboxZeroTimes(t *testing.T, s store.Store) {
	ctx := t.Context()
	sb := &sandbox.Sandbox{ID: "z", Tenant: "t", State: sandbox.StateCreating}
	must(t, s.CreateSandbox(ctx, sb))
	got, err := s.GetSandbox(ctx, store.AnyOwner, "z")
	must(t, err)
	for name, tm := range map[string]time.Time{
		"CreatedAt": got.CreatedAt, "UpdatedAt": got.UpdatedAt,
		"StartedAt": got.StartedAt, "DeletedAt": got.DeletedAt,
	} {
		if !tm.IsZero() {
			t.Errorf("%s = %v, want zero", name, tm)
		}
	}
	checkSandbox(t, got, sb)
}

func testSandboxDuplicateID(t *testing.T, s store.Store) {
	ctx := t.Context()
	must(t, s.CreateSandbox(ctx, newSandbox("dup", "t", "a", sandbox.StateRunning, at(0))))
	err := s.CreateSandbox(ctx, newSandbox("dup", "t", "b", sandbox.StateRunning, at(1)))
	wantCategory(t, err, errdefs.ErrConflict, "dup")
	got, err := s.GetSandbox(ctx, store.AnyOwner, "dup")
	must(t, err)
	if got.Name != "a" {
		t.Errorf("failed create overwrote the record: name %q", got.Name)
	}
}

func testSandboxNameUnique(t *testing.T, s store.Store) {
	ctx := t.Context()
	first := newSandbox("n1", "t1", "web", sandbox.StateRunning, at(0))
	must(t, s.CreateSandbox(ctx, first))

	for _, tc := range []struct {
		name    string
		sb      *sandbox.Sandbox
		wantErr error
	}{
		{"same tenant and name", newSandbox("n2", "t1", "web", sandbox.StateCreating, at(1)), errdefs.ErrConflict},
		{"other tenant", newSandbox("n3", "t2", "web", sandbox.StateCreating, at(2)), nil},
		{"other name", newSandbox("n4", "t1", "api", sandbox.StateCreating, at(3)), nil},
		{"unnamed", newSandbox("n5", "t1", "", sandbox.StateCreating, at(4)), nil},
		{"unnamed again", newSandbox("n6", "t1", "", sandbox.StateCreating, at(5)), nil},
		{"tombstone with a live name", newSandbox("n7", "t1", "web", sandbox.StateDeleted, at(6)), nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := s.CreateSandbox(ctx, tc.sb)
			if tc.wantErr == nil {
				must(t, err)
				return
			}
			wantCategory(t, err, tc.wantErr, `"web"`)
			if _, err := s.GetSandbox(ctx, store.AnyOwner, tc.sb.ID); !errors.Is(err, errdefs.ErrNotFound) {
				t.Errorf("conflicting create left a record: %v", err)
			}
		})
	}

	// Renaming into a taken live name conflicts too.
	api, err := s.GetSandbox(ctx, store.AnyOwner, "n4")
	must(t, err)
	api.Name = "web"
	wantCategory(t, s.UpdateSandbox(ctx, api), errdefs.ErrConflict, `"web"`)

	// Once the holder is deleted, the name is free again.
	must(t, first.Transition(sandbox.StateDeleting, sandbox.CauseUser, "rm", at(time.Minute)))
	must(t, s.UpdateSandbox(ctx, first))
	must(t, first.Transition(sandbox.StateDeleted, sandbox.CauseUser, "rm", at(2*time.Minute)))
	must(t, s.UpdateSandbox(ctx, first))
	again := newSandbox("n8", "t1", "web", sandbox.StateCreating, at(time.Hour))
	must(t, s.CreateSandbox(ctx, again))
	got, err := s.GetSandboxByName(ctx, store.OwnedBy("t1"), "web")
	must(t, err)
	if got.ID != "n8" {
		t.Errorf("GetSandboxByName = %s, want the live n8", got.ID)
	}
	// Reviving the tombstone would make two live "web"s.
	first.State = sandbox.StateRunning
	wantCategory(t, s.UpdateSandbox(ctx, first), errdefs.ErrConflict)
}

func testSandboxCAS(t *testing.T, s store.Store) {
	ctx := t.Context()
	must(t, s.CreateSandbox(ctx, newSandbox("cas", "t", "c", sandbox.StateCreating, at(0))))
	a, err := s.GetSandbox(ctx, store.AnyOwner, "cas")
	must(t, err)
	b, err := s.GetSandbox(ctx, store.AnyOwner, "cas")
	must(t, err)

	must(t, a.Transition(sandbox.StateRunning, sandbox.CauseReconciler, "started", at(time.Second)))
	must(t, s.UpdateSandbox(ctx, a))
	if a.Generation != 2 {
		t.Fatalf("Generation = %d, want 2", a.Generation)
	}

	must(t, b.Transition(sandbox.StateFailed, sandbox.CauseReconciler, "boom", at(2*time.Second)))
	err = s.UpdateSandbox(ctx, b)
	wantCategory(t, err, errdefs.ErrConflict, "cas", "modified concurrently")
	if b.Generation != 1 {
		t.Errorf("failed update changed Generation to %d", b.Generation)
	}
	got, err := s.GetSandbox(ctx, store.AnyOwner, "cas")
	must(t, err)
	checkSandbox(t, got, a)

	// Reloading and retrying works.
	b, err = s.GetSandbox(ctx, store.AnyOwner, "cas")
	must(t, err)
	must(t, b.Transition(sandbox.StatePaused, sandbox.CauseUser, "", at(3*time.Second)))
	must(t, s.UpdateSandbox(ctx, b))
	if b.Generation != 3 {
		t.Errorf("Generation = %d, want 3", b.Generation)
	}
}

func testSandboxFilters(t *testing.T, s store.Store) {
	ctx := t.Context()
	// Created out of order; "e" and "d" share a creation time, so id breaks the tie.
	for _, sb := range []*sandbox.Sandbox{
		newSandbox("c", "t1", "c", sandbox.StateRunning, at(3)),
		newSandbox("a", "t1", "a", sandbox.StateRunning, at(1)),
		newSandbox("e", "t2", "e", sandbox.StatePaused, at(4)),
		newSandbox("d", "t1", "d", sandbox.StateDeleted, at(4)),
		newSandbox("b", "t2", "b", sandbox.StateStopped, at(2)),
		newSandbox("f", "t1", "f", sandbox.StateFailed, at(5)),
	} {
		must(t, s.CreateSandbox(ctx, sb))
	}
	anyone := store.AnyOwner
	for _, tc := range []struct {
		name  string
		f     store.SandboxFilter
		limit int
		want  []string
	}{
		{"default", store.SandboxFilter{Owner: anyone}, 0, []string{"a", "b", "c", "e", "f"}},
		{"default tenant", store.SandboxFilter{}, 0, []string{}},
		{"include deleted", store.SandboxFilter{Owner: anyone, IncludeDeleted: true}, 0, []string{"a", "b", "c", "d", "e", "f"}},
		{"tenant", store.SandboxFilter{Owner: store.OwnedBy("t1")}, 0, []string{"a", "c", "f"}},
		{"tenant with deleted", store.SandboxFilter{Owner: store.OwnedBy("t1"), IncludeDeleted: true}, 0, []string{"a", "c", "d", "f"}},
		{"unknown tenant", store.SandboxFilter{Owner: store.OwnedBy("nobody")}, 0, []string{}},
		{"states", store.SandboxFilter{Owner: anyone, States: []sandbox.State{sandbox.StateRunning, sandbox.StatePaused}}, 0, []string{"a", "c", "e"}},
		{"states and tenant", store.SandboxFilter{Owner: store.OwnedBy("t2"), States: []sandbox.State{sandbox.StateStopped}}, 0, []string{"b"}},
		{"deleted state without include", store.SandboxFilter{Owner: anyone, States: []sandbox.State{sandbox.StateDeleted}}, 0, []string{}},
		{"deleted state with include", store.SandboxFilter{Owner: anyone, States: []sandbox.State{sandbox.StateDeleted}, IncludeDeleted: true}, 0, []string{"d"}},
		{"limit", store.SandboxFilter{Owner: anyone}, 2, []string{"a", "b"}},
		{"limit with deleted", store.SandboxFilter{Owner: anyone, IncludeDeleted: true}, 4, []string{"a", "b", "c", "d"}},
		{"limit past end", store.SandboxFilter{Owner: store.OwnedBy("t2")}, 100, []string{"b", "e"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, _, err := s.ListSandboxes(ctx, tc.f, store.Page{Limit: tc.limit})
			must(t, err)
			if g := ids(got); !reflect.DeepEqual(g, tc.want) {
				t.Errorf("ids = %v, want %v", g, tc.want)
			}
		})
	}
	got, err := listSandboxes(ctx, s, store.SandboxFilter{Owner: store.OwnedBy("t1"), States: []sandbox.State{sandbox.StateFailed}})
	must(t, err)
	if len(got) != 1 {
		t.Fatalf("got %d sandboxes, want 1", len(got))
	}
	want := newSandbox("f", "t1", "f", sandbox.StateFailed, at(5))
	want.Generation = 1
	checkSandbox(t, got[0], want)
}

// testSandboxSpecFilters: labels, template, start time, pool membership,
// states kept only with a persisted root, and newest-first order are all
// conditions of the query, so a limited page holds that many matches and
// its cursor continues in the same order.
func testSandboxSpecFilters(t *testing.T, s store.Store) {
	ctx := t.Context()
	mk := func(id string, st sandbox.State, n int, tpl string, labels map[string]string, mod func(*sandbox.Sandbox)) {
		sb := newSandbox(id, "t1", id, st, at(time.Duration(n)*time.Second))
		sb.StartedAt = at(time.Duration(n) * time.Second)
		sb.Spec.Template, sb.Spec.Labels = tpl, labels
		if mod != nil {
			mod(sb)
		}
		must(t, s.CreateSandbox(ctx, sb))
	}
	mine := map[string]string{"suite": "x", "k.a/b-c_d": "v w"}
	mk("s1", sandbox.StateRunning, 1, "base", mine, nil)
	mk("s2", sandbox.StateRunning, 2, "other", map[string]string{"suite": "y"}, nil)
	mk("s3", sandbox.StatePaused, 3, "base", mine, nil)
	mk("s4", sandbox.StateRunning, 4, "base", mine, func(sb *sandbox.Sandbox) { sb.Spec.Pool = "base" })
	mk("s5", sandbox.StateStopped, 5, "base", mine, func(sb *sandbox.Sandbox) { sb.Spec.Persistent, sb.Spec.PersistRoot = true, true })
	mk("s6", sandbox.StateStopped, 6, "base", mine, func(sb *sandbox.Sandbox) { sb.Spec.Persistent = true })
	mk("s7", sandbox.StateRunning, 7, "base", mine, nil)
	o := store.OwnedBy("t1")
	live := []sandbox.State{sandbox.StateRunning, sandbox.StatePaused}
	kept := []sandbox.State{sandbox.StateStopped}
	for _, tc := range []struct {
		name string
		f    store.SandboxFilter
		want []string
	}{
		{"labels", store.SandboxFilter{Owner: o, Labels: mine}, []string{"s1", "s3", "s4", "s5", "s6", "s7"}},
		{"one label", store.SandboxFilter{Owner: o, Labels: map[string]string{"suite": "y"}}, []string{"s2"}},
		{"label value differs", store.SandboxFilter{Owner: o, Labels: map[string]string{"suite": "z"}}, []string{}},
		{"template", store.SandboxFilter{Owner: o, Template: "other"}, []string{"s2"}},
		{"started after (inclusive)", store.SandboxFilter{Owner: o, StartedAfter: at(6 * time.Second)}, []string{"s6", "s7"}},
		{"no pool", store.SandboxFilter{Owner: o, NoPool: true, States: live}, []string{"s1", "s2", "s3", "s7"}},
		{"pool", store.SandboxFilter{Owner: o, Pool: "base"}, []string{"s4"}},
		{"another pool", store.SandboxFilter{Owner: o, Pool: "other"}, []string{}},
		{"any pool", store.SandboxFilter{Owner: o, Pooled: true}, []string{"s4"}},
		{"kept root", store.SandboxFilter{Owner: o, States: live, KeptRootStates: kept, NoPool: true}, []string{"s1", "s2", "s3", "s5", "s7"}},
		{"kept root only", store.SandboxFilter{Owner: o, KeptRootStates: kept}, []string{"s5"}},
		{"newest", store.SandboxFilter{Owner: o, Labels: mine, NoPool: true, Newest: true}, []string{"s7", "s6", "s5", "s3", "s1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := listSandboxes(ctx, s, tc.f)
			must(t, err)
			if g := ids(got); !reflect.DeepEqual(g, tc.want) {
				t.Errorf("ids = %v, want %v", g, tc.want)
			}
			// Page by one: every page holds one match, in the same order.
			var paged []string
			p := store.Page{Limit: 1}
			for range 20 {
				sbs, next, err := s.ListSandboxes(ctx, tc.f, p)
				must(t, err)
				if len(sbs) != 1 && !(len(sbs) == 0 && len(tc.want) == 0) {
					t.Fatalf("a page of %d after %v", len(sbs), paged)
				}
				paged = append(paged, ids(sbs)...)
				if next == "" {
					break
				}
				p.Cursor = next
			}
			if !reflect.DeepEqual(paged, tc.want) && !(len(paged) == 0 && len(tc.want) == 0) {
				t.Errorf("paged ids = %v, want %v", paged, tc.want)
			}
		})
	}
	// A cursor of one order is not one of the other.
	_, next, err := s.ListSandboxes(ctx, store.SandboxFilter{Owner: o}, store.Page{Limit: 1})
	must(t, err)
	if _, _, err := s.ListSandboxes(ctx, store.SandboxFilter{Owner: o, Newest: true}, store.Page{Limit: 1, Cursor: next}); !errors.Is(err, errdefs.ErrInvalid) {
		t.Errorf("an oldest-first cursor on the newest-first list: %v", err)
	}
}

func newEvent(sbID string, i int) *sandbox.Event {
	return &sandbox.Event{
		SandboxID: sbID,
		Time:      at(time.Duration(i) * time.Second),
		Type:      "state",
		From:      sandbox.StateCreating,
		To:        sandbox.StateRunning,
		Actor:     "key:abc",
		Cause:     sandbox.CauseUser,
		Reason:    fmt.Sprintf("reason %d", i),
		Outcome:   "ok",
		Message:   fmt.Sprintf("event %d of %s", i, sbID),
	}
}

func testEvents(t *testing.T, s store.Store) {
	ctx := t.Context()
	if n, err := s.LatestEventID(ctx); err != nil || n != 0 {
		t.Fatalf("LatestEventID with no events: %d %v", n, err)
	}
	defer func() {
		// The newest event of any sandbox, whichever was written last.
		if n, err := s.LatestEventID(ctx); err != nil || n == 0 {
			t.Fatalf("LatestEventID: %d %v", n, err)
		} else if later, _, err := s.ListAllEvents(ctx, store.EventFilter{Owner: store.AnyOwner, AfterID: n}, store.Page{}); err != nil || len(later) != 0 {
			t.Fatalf("events after LatestEventID %d: %d %v", n, len(later), err)
		}
	}()
	must(t, s.CreateSandbox(ctx, newSandbox("e1", "t", "", sandbox.StateRunning, at(0))))
	must(t, s.CreateSandbox(ctx, newSandbox("e2", "t", "", sandbox.StateRunning, at(0))))

	var want []*sandbox.Event // of e1
	var last int64
	for i := range 10 {
		for _, id := range []string{"e1", "e2"} {
			ev := newEvent(id, i)
			must(t, s.AppendEvent(ctx, ev))
			if ev.ID <= last {
				t.Fatalf("event id %d not above previous %d", ev.ID, last)
			}
			last = ev.ID
			if id == "e1" {
				c := *ev
				c.Time = stored(c.Time)
				want = append(want, &c)
			}
		}
	}
	// A zero time stays zero.
	zero := &sandbox.Event{SandboxID: "e1", Type: "exec"}
	must(t, s.AppendEvent(ctx, zero))
	want = append(want, zero)

	all, err := listEvents(ctx, s, "e1", 0, 0)
	must(t, err)
	if !reflect.DeepEqual(all, want) {
		t.Fatalf("ListEvents:\n got %v\nwant %v", all, want)
	}

	for _, tc := range []struct {
		name    string
		afterID int64
		limit   int
		want    []*sandbox.Event
	}{
		{"first page", 0, 4, want[:4]},
		{"second page", want[3].ID, 4, want[4:8]},
		{"last page", want[7].ID, 4, want[8:]},
		{"past the end", want[len(want)-1].ID, 4, nil},
		{"no limit after", want[5].ID, 0, want[6:]},
		{"after an id of another sandbox", want[2].ID + 1, 1, want[3:4]},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := listEvents(ctx, s, "e1", tc.afterID, tc.limit)
			must(t, err)
			if len(got) != len(tc.want) || (len(got) > 0 && !reflect.DeepEqual(got, tc.want)) {
				t.Errorf("got %v\nwant %v", got, tc.want)
			}
		})
	}

	none, err := listEvents(ctx, s, "no-such-sandbox", 0, 0)
	must(t, err)
	if len(none) != 0 {
		t.Errorf("events of an unknown sandbox: %v", none)
	}
}

func testPurgeRemovesEvents(t *testing.T, s store.Store) {
	ctx := t.Context()
	for _, id := range []string{"p1", "p2"} {
		must(t, s.CreateSandbox(ctx, newSandbox(id, "t", "", sandbox.StateDeleted, at(0))))
		for i := range 3 {
			must(t, s.AppendEvent(ctx, newEvent(id, i)))
		}
	}
	must(t, s.PurgeSandbox(ctx, "p1"))
	evs, err := listEvents(ctx, s, "p1", 0, 0)
	must(t, err)
	if len(evs) != 0 {
		t.Errorf("purge left %d events", len(evs))
	}
	evs, err = listEvents(ctx, s, "p2", 0, 0)
	must(t, err)
	if len(evs) != 3 {
		t.Errorf("purge of p1 touched p2: %d events left, want 3", len(evs))
	}
	// The id is free again and starts with no history.
	must(t, s.CreateSandbox(ctx, newSandbox("p1", "t", "", sandbox.StateCreating, at(time.Hour))))
	evs, err = listEvents(ctx, s, "p1", 0, 0)
	must(t, err)
	if len(evs) != 0 {
		t.Errorf("recreated sandbox inherited %d events", len(evs))
	}
	wantCategory(t, s.PurgeSandbox(ctx, "never"), errdefs.ErrNotFound, "never")
}

func testTemplates(t *testing.T, s store.Store) {
	ctx := t.Context()
	full := &store.Template{
		Name:   "python",
		Layers: []string{"sha256:aaa", "sha256:bbb"},
		Config: store.TemplateConfig{
			Env:       []string{"PATH=/usr/bin", "LANG=C.UTF-8"},
			Workdir:   "/work",
			User:      "1000:1000",
			Cmd:       []string{"/bin/sh"},
			Resources: &sandbox.Resources{CPUs: 2, MemoryBytes: 1 << 30, Pids: 1024},
			Timeout:   time.Hour,
		},
		Source:    "oci-layout:/tmp/py",
		Size:      123456789,
		CreatedAt: at(0),
	}
	host := &store.Template{
		Name:      "base",
		Layers:    []string{},
		Config:    store.TemplateConfig{HostUsr: true},
		Builtin:   true,
		Source:    "builtin:host",
		CreatedAt: at(time.Second),
	}
	for _, tpl := range []*store.Template{full, host} {
		must(t, s.PutTemplate(ctx, tpl))
	}
	for _, tpl := range []*store.Template{full, host} {
		got, err := s.GetTemplate(ctx, tpl.Name)
		must(t, err)
		want := *tpl
		want.CreatedAt = stored(want.CreatedAt)
		if !reflect.DeepEqual(got, &want) {
			t.Errorf("GetTemplate(%s):\n got %+v\nwant %+v", tpl.Name, got, &want)
		}
	}

	// Put replaces by name.
	repl := &store.Template{Name: "python", Layers: []string{"sha256:ccc"}, Source: "build:base", Size: 1, CreatedAt: at(time.Hour)}
	must(t, s.PutTemplate(ctx, repl))
	got, err := s.GetTemplate(ctx, "python")
	must(t, err)
	want := *repl
	want.CreatedAt = stored(want.CreatedAt)
	if !reflect.DeepEqual(got, &want) {
		t.Errorf("after replace:\n got %+v\nwant %+v", got, &want)
	}

	list, _, err := s.ListTemplates(ctx, store.Page{})
	must(t, err)
	var names []string
	for _, tpl := range list {
		names = append(names, tpl.Name)
	}
	if !reflect.DeepEqual(names, []string{"base", "python"}) {
		t.Errorf("ListTemplates names = %v, want [base python]", names)
	}

	must(t, s.DeleteTemplate(ctx, "python"))
	_, err = s.GetTemplate(ctx, "python")
	wantCategory(t, err, errdefs.ErrNotFound, "python")
	wantCategory(t, s.DeleteTemplate(ctx, "python"), errdefs.ErrNotFound, "python")
}

func testAPIKeys(t *testing.T, s store.Store) {
	ctx := t.Context()
	k1 := &store.APIKey{ID: "k1", Name: "ci", Tenant: "t1", Hash: []byte{0, 1, 2, 0xff}, Scopes: []string{"sandbox:write", "sandbox:read"}, CreatedAt: at(0),
		Role: "member", ExpiresAt: at(48 * time.Hour), Prefix: "berth_k1", CreatedBy: "local"}
	k2 := &store.APIKey{ID: "k2", Name: "ro", Tenant: "t1", Hash: []byte{9, 9}, Scopes: []string{}, CreatedAt: at(time.Second)}
	k3 := &store.APIKey{ID: "k3", Tenant: "t2", Hash: []byte{7}, CreatedAt: at(2 * time.Second)}
	for _, k := range []*store.APIKey{k2, k3, k1} {
		must(t, s.CreateAPIKey(ctx, k))
	}
	wantKey := func(k *store.APIKey) *store.APIKey {
		c := *k
		c.CreatedAt, c.RevokedAt, c.ExpiresAt = stored(c.CreatedAt), stored(c.RevokedAt), stored(c.ExpiresAt)
		return &c
	}
	for _, tc := range []struct {
		owner store.Owner
		id    string
		want  *store.APIKey
	}{
		{store.OwnedBy("t1"), "k1", wantKey(k1)},
		{store.AnyOwner, "k3", wantKey(k3)},
		{store.OwnedBy("t2"), "k1", nil},
		{store.OwnedBy("t1"), "nope", nil},
	} {
		got, err := s.GetAPIKey(ctx, tc.owner, tc.id)
		if tc.want == nil {
			wantCategory(t, err, errdefs.ErrNotFound)
		} else if err != nil || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("GetAPIKey(%v, %s) = %+v, %v; want %+v", tc.owner, tc.id, got, err, tc.want)
		}
	}

	got, err := s.GetAPIKeyByHash(ctx, []byte{0, 1, 2, 0xff})
	must(t, err)
	if !reflect.DeepEqual(got, wantKey(k1)) {
		t.Errorf("GetAPIKeyByHash:\n got %+v\nwant %+v", got, wantKey(k1))
	}
	_, err = s.GetAPIKeyByHash(ctx, []byte{0, 1, 2})
	wantCategory(t, err, errdefs.ErrNotFound)

	for _, tc := range []struct {
		name string
		k    *store.APIKey
	}{
		{"same id", &store.APIKey{ID: "k1", Tenant: "t1", Hash: []byte{42}}},
		{"same hash", &store.APIKey{ID: "k9", Tenant: "t1", Hash: []byte{9, 9}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			wantCategory(t, s.CreateAPIKey(ctx, tc.k), errdefs.ErrConflict)
		})
	}

	for _, tc := range []struct {
		owner store.Owner
		want  []*store.APIKey
	}{
		{store.OwnedBy("t1"), []*store.APIKey{wantKey(k1), wantKey(k2)}},
		{store.OwnedBy("t2"), []*store.APIKey{wantKey(k3)}},
		{store.AnyOwner, []*store.APIKey{wantKey(k1), wantKey(k2), wantKey(k3)}},
		{store.OwnedBy("none"), nil},
		{store.Owner{}, nil},
	} {
		t.Run("list "+tc.owner.String(), func(t *testing.T) {
			got, _, err := s.ListAPIKeys(ctx, tc.owner, store.Page{})
			must(t, err)
			if len(got) != len(tc.want) || (len(got) > 0 && !reflect.DeepEqual(got, tc.want)) {
				t.Errorf("ListAPIKeys(%v):\n got %+v\nwant %+v", tc.owner, got, tc.want)
			}
		})
	}

	// Revoke: still found by hash, with the time set; again keeps the first time.
	must(t, s.RevokeAPIKey(ctx, "k1", at(time.Hour)))
	must(t, s.RevokeAPIKey(ctx, "k1", at(2*time.Hour)))
	got, err = s.GetAPIKeyByHash(ctx, k1.Hash)
	must(t, err)
	if want := stored(at(time.Hour)); !got.RevokedAt.Equal(want) {
		t.Errorf("RevokedAt = %v, want %v", got.RevokedAt, want)
	}
	got, err = s.GetAPIKeyByHash(ctx, k2.Hash)
	must(t, err)
	if !got.RevokedAt.IsZero() {
		t.Errorf("revoking k1 revoked k2 at %v", got.RevokedAt)
	}
	wantCategory(t, s.RevokeAPIKey(ctx, "nope", at(0)), errdefs.ErrNotFound, "nope")
}

// testConcurrentUpdates races 20 writers holding the same generation: exactly
// one wins each round and the others see a conflict, never a driver error
// such as SQLITE_BUSY.
func testConcurrentUpdates(t *testing.T, s store.Store) {
	raceUpdates(t, []store.Store{s})
}

// raceUpdates is testConcurrentUpdates with the writers spread round-robin
// over handles, which all open the same database.
func raceUpdates(t *testing.T, handles []store.Store) {
	ctx := t.Context()
	const workers, rounds = 20, 5
	s := handles[0]
	must(t, s.CreateSandbox(ctx, newSandbox("race", "t", "race", sandbox.StateRunning, at(0))))
	for round := range rounds {
		copies := make([]*sandbox.Sandbox, workers)
		for i := range copies {
			sb, err := handles[i%len(handles)].GetSandbox(ctx, store.AnyOwner, "race")
			must(t, err)
			copies[i] = sb
		}
		var (
			wg        sync.WaitGroup
			start     = make(chan struct{})
			mu        sync.Mutex
			wins      []int
			conflicts int
			others    []error
		)
		for i, sb := range copies {
			wg.Go(func() {
				sb.Reason = fmt.Sprintf("round %d worker %d", round, i)
				<-start
				err := handles[i%len(handles)].UpdateSandbox(ctx, sb)
				mu.Lock()
				defer mu.Unlock()
				switch {
				case err == nil:
					wins = append(wins, i)
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
			t.Fatalf("round %d: unexpected errors: %v", round, errors.Join(others...))
		}
		if len(wins) != 1 || conflicts != workers-1 {
			t.Fatalf("round %d: %d wins (%v) and %d conflicts, want 1 and %d", round, len(wins), wins, conflicts, workers-1)
		}
		for h, s := range handles {
			got, err := s.GetSandbox(ctx, store.AnyOwner, "race")
			must(t, err)
			if want := int64(round + 2); got.Generation != want {
				t.Fatalf("round %d: handle %d reads generation %d, want %d", round, h, got.Generation, want)
			}
			if want := fmt.Sprintf("round %d worker %d", round, wins[0]); got.Reason != want {
				t.Errorf("round %d: handle %d reads reason %q, want the winner's %q", round, h, got.Reason, want)
			}
		}
	}
}

// testConcurrentWriters has many goroutines create, update, append and read
// at once; none may fail.
func testConcurrentWriters(t *testing.T, s store.Store) {
	ctx := t.Context()
	const workers, each = 20, 10
	errc := make(chan error, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			errc <- func() error {
				for i := range each {
					id := fmt.Sprintf("w%02d-%02d", w, i)
					sb := newSandbox(id, fmt.Sprintf("t%d", w%3), id, sandbox.StateCreating, at(time.Duration(i)))
					if err := s.CreateSandbox(ctx, sb); err != nil {
						return err
					}
					if err := s.AppendEvent(ctx, newEvent(id, i)); err != nil {
						return err
					}
					sb.State = sandbox.StateRunning
					if err := s.UpdateSandbox(ctx, sb); err != nil {
						return err
					}
					if _, _, err := s.ListSandboxes(ctx, store.SandboxFilter{Owner: store.OwnedBy(sb.Tenant)}, store.Page{Limit: 5}); err != nil {
						return err
					}
					if _, err := listEvents(ctx, s, id, 0, 0); err != nil {
						return err
					}
				}
				return nil
			}()
		})
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		if err != nil {
			t.Error(err)
		}
	}
	all, err := listSandboxes(ctx, s, store.SandboxFilter{Owner: store.AnyOwner, States: []sandbox.State{sandbox.StateRunning}})
	must(t, err)
	if len(all) != workers*each {
		t.Errorf("%d running sandboxes, want %d", len(all), workers*each)
	}
}

func testNotFound(t *testing.T, s store.Store) {
	ctx := t.Context()
	ghost := newSandbox("ghost", "t", "ghost", sandbox.StateRunning, at(0))
	ghost.Generation = 1
	for _, tc := range []struct {
		name string
		call func(context.Context) error
	}{
		{"GetSandbox", func(ctx context.Context) error { _, err := s.GetSandbox(ctx, store.AnyOwner, "ghost"); return err }},
		{"GetSandboxByName", func(ctx context.Context) error {
			_, err := s.GetSandboxByName(ctx, store.OwnedBy("t"), "ghost")
			return err
		}},
		{"UpdateSandbox", func(ctx context.Context) error { return s.UpdateSandbox(ctx, ghost) }},
		{"PurgeSandbox", func(ctx context.Context) error { return s.PurgeSandbox(ctx, "ghost") }},
		{"AppendEvent", func(ctx context.Context) error { return s.AppendEvent(ctx, newEvent("ghost", 0)) }},
		{"GetTemplate", func(ctx context.Context) error { _, err := s.GetTemplate(ctx, "ghost"); return err }},
		{"DeleteTemplate", func(ctx context.Context) error { return s.DeleteTemplate(ctx, "ghost") }},
		{"GetAPIKeyByHash", func(ctx context.Context) error { _, err := s.GetAPIKeyByHash(ctx, []byte("ghost")); return err }},
		{"RevokeAPIKey", func(ctx context.Context) error { return s.RevokeAPIKey(ctx, "ghost", at(0)) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.call(ctx)
			wantCategory(t, err, errdefs.ErrNotFound)
			if tc.name != "GetAPIKeyByHash" && !strings.Contains(err.Error(), "ghost") {
				t.Errorf("err %q does not name what was not found", err)
			}
		})
	}
	if ghost.Generation != 1 {
		t.Errorf("failed update changed Generation to %d", ghost.Generation)
	}
}

// listSandboxes returns every sandbox f selects.
func listSandboxes(ctx context.Context, s store.Store, f store.SandboxFilter) ([]*sandbox.Sandbox, error) {
	sbs, next, err := s.ListSandboxes(ctx, f, store.Page{})
	if err == nil && next != "" {
		err = fmt.Errorf("ListSandboxes without a limit returned a next cursor %q", next)
	}
	return sbs, err
}

// listEvents returns a sandbox's events after afterID, at most limit (0: all),
// of any owner.
func listEvents(ctx context.Context, s store.Store, id string, afterID int64, limit int) ([]*sandbox.Event, error) {
	evs, _, err := s.ListEvents(ctx, store.AnyOwner, id, afterID, store.Page{Limit: limit})
	return evs, err
}
