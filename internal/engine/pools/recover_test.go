package pools_test

import (
	"strings"
	"testing"
	"time"

	"github.com/berth-sh/berth/internal/engine/enginetest"
	"github.com/berth-sh/berth/internal/engine/reconcile"
	"github.com/berth-sh/berth/internal/failpoint"
	"github.com/berth-sh/berth/internal/sandbox"
	"github.com/berth-sh/berth/internal/store"
)

// A refill step that fails after a member's create undoes the member: it
// is destroyed, the error its tombstone's reason, and the pool is
// refilled by another. A member the undo could not reach (a kill, or the
// undo's own write refused here) is left running unfinished: it was never
// ready and held the pool's size for ever (never refilled, a pool made 0
// removed nothing); the next refill now finishes it into the pool, or
// removes it when the pool no longer wants it. Not parallel: the
// failpoint is the process's.
func TestPoolUndoesAndFinishesInterruptedMembers(t *testing.T) {
	e := newEnv(t)
	arm := func(point string) {
		t.Helper()
		disarm, err := failpoint.Arm(point + "=1*return(refill interrupted)")
		enginetest.Must(t, err)
		t.Cleanup(disarm)
	}
	states := func() map[string]sandbox.State {
		out := map[string]sandbox.State{}
		for _, sb := range e.PoolMembersOf("", "base") {
			out[sb.ID] = sb.State
		}
		return out
	}
	// The undo's first write (the member to deleting) refused.
	leaveUnfinished := func() {
		e.Store.FailUpdateIf(func(sb *sandbox.Sandbox) bool {
			return sb.Spec.Pool == "base" && sb.State == sandbox.StateDeleting
		}, enginetest.ErrInjected)
	}
	firstMember := func() string {
		t.Helper()
		var first string
		if !enginetest.Poll(func() bool {
			for id := range states() {
				first = id
				return true
			}
			return false
		}) {
			t.Fatal("no pool member made")
		}
		return first
	}

	for _, point := range []string{"pool.refill.after-launch", "pool.refill.before-pause"} {
		arm(point)
		_, err := e.Engine.SetPool(e.Ctx, "base", 1)
		enginetest.Must(t, err)
		// The member whose step failed is removed, its tombstone saying
		// why (found by it: it may come and go between two looks).
		var failed string
		if !enginetest.Poll(func() bool {
			all, _, err := e.Store.ListSandboxes(e.Ctx, store.SandboxFilter{Owner: store.AnyOwner, IncludeDeleted: true}, store.Page{})
			enginetest.Must(t, err)
			for _, sb := range all {
				if sb.Spec.Pool == "base" && sb.State == sandbox.StateDeleted && strings.Contains(sb.Reason, "failpoint "+point) {
					failed = sb.ID
					return true
				}
			}
			return false
		}) {
			t.Fatalf("no member removed naming %s in its reason: %v", point, states())
		}
		if !enginetest.Poll(func() bool { s := states(); return len(s) == 1 && s[failed] == "" && paused(s) == 1 }) {
			t.Fatalf("the pool was not refilled after %s failed: %v", point, states())
		}
		_, err = e.Engine.SetPool(e.Ctx, "base", 0)
		enginetest.Must(t, err)
		if !enginetest.Poll(func() bool { return len(states()) == 0 }) {
			t.Fatalf("pool made 0 keeps %v", states())
		}
	}

	// Left unfinished: the member itself is finished (paused), not
	// replaced.
	arm("pool.refill.after-launch")
	leaveUnfinished()
	_, err := e.Engine.SetPool(e.Ctx, "base", 1)
	enginetest.Must(t, err)
	first := firstMember()
	if !enginetest.Poll(func() bool { s := states(); return len(s) == 1 && s[first] == sandbox.StatePaused }) {
		t.Fatalf("the interrupted member was not finished into the pool: %v", states())
	}

	// Left unfinished again, then the pool is made 0: every member goes,
	// the unfinished one too.
	arm("pool.refill.after-launch")
	leaveUnfinished()
	_, err = e.Engine.SetPool(e.Ctx, "base", 2)
	enginetest.Must(t, err)
	if !enginetest.Poll(func() bool { return len(states()) == 2 }) {
		t.Fatalf("pool of 2: %v", states())
	}
	_, err = e.Engine.SetPool(e.Ctx, "base", 0)
	enginetest.Must(t, err)
	if !enginetest.Poll(func() bool { return len(states()) == 0 }) {
		t.Fatalf("pool made 0 keeps %v", states())
	}
	e.Healthy()
}

func paused(s map[string]sandbox.State) int {
	n := 0
	for _, st := range s {
		if st == sandbox.StatePaused {
			n++
		}
	}
	return n
}

// A member that stays unfinished (every write that would finish it or
// remove it refused) is reported by doctor once it has waited past the
// refills' grace, not before, and doctor --fix removes it. The reconciler
// ticks hourly here: only the refill's own kicks run, so nothing else
// holds the member's lock when doctor looks.
func TestDoctorReportsStuckPoolMember(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(e *enginetest.Env) { e.Config.ReconcileInterval = time.Hour })
	isMember := func(sb *sandbox.Sandbox, st sandbox.State) bool { return sb.Spec.Pool == "base" && sb.State == st }
	stopPause := e.Store.FailUpdatesIf(func(sb *sandbox.Sandbox) bool { return isMember(sb, sandbox.StatePaused) }, enginetest.ErrInjected)
	defer stopPause()
	stopRemove := e.Store.FailUpdatesIf(func(sb *sandbox.Sandbox) bool { return isMember(sb, sandbox.StateDeleting) }, enginetest.ErrInjected)
	defer stopRemove()
	_, err := e.Engine.SetPool(e.Ctx, "base", 1)
	enginetest.Must(t, err)
	var stuck string
	if !enginetest.Poll(func() bool {
		for _, sb := range e.PoolMembersOf("", "base") {
			if sb.State == sandbox.StateRunning && !e.Engine.InFlight(sb.ID) {
				stuck = sb.ID
				return true
			}
		}
		return false
	}) {
		t.Fatal("no member left unfinished")
	}
	poolFindings := func() []reconcile.Finding {
		t.Helper()
		rep, err := e.Engine.Doctor(e.Ctx, false)
		enginetest.Must(t, err)
		var out []reconcile.Finding
		for _, f := range rep.Findings {
			if f.Kind == "pool" {
				out = append(out, f)
			}
		}
		return out
	}
	if f := poolFindings(); len(f) != 0 {
		t.Fatalf("doctor reports a member within the refills' grace: %+v", f)
	}
	e.Clock.Advance(2 * time.Minute)
	var got []reconcile.Finding
	if !enginetest.Poll(func() bool {
		got = poolFindings()
		return len(got) == 1 && got[0].ID == stuck && strings.Contains(got[0].Detail, "unfinished")
	}) {
		t.Fatalf("doctor does not report the stuck member %s: %+v", stuck, got)
	}
	stopRemove() // the refills still cannot finish it: --fix removes it
	_, err = e.Engine.Doctor(e.Ctx, true)
	enginetest.Must(t, err)
	if !enginetest.Poll(func() bool {
		sb, err := e.Store.GetSandbox(e.Ctx, store.AnyOwner, stuck)
		return err == nil && sb.State == sandbox.StateDeleted
	}) {
		t.Fatal("doctor --fix left the stuck member")
	}
	stopPause()
	_, err = e.Engine.SetPool(e.Ctx, "base", 0)
	enginetest.Must(t, err)
	if !enginetest.Poll(func() bool { return len(e.PoolMembersOf("", "base")) == 0 }) {
		t.Fatal("pool made 0 keeps members")
	}
	e.Healthy()
}
