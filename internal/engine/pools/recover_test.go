package pools_test

import (
	"testing"

	"github.com/berth-sh/berth/internal/engine/enginetest"
	"github.com/berth-sh/berth/internal/failpoint"
	"github.com/berth-sh/berth/internal/sandbox"
)

// A refill cut short between a member's create and its pause (an error
// here; a kill leaves the same record) left the member running for ever:
// never ready, counted against the pool's size, so the pool never
// refilled and a pool made 0 removed nothing. The next refill now
// finishes such a member into the pool, or removes it when the pool no
// longer wants it. Not parallel: the failpoint is the process's.
func TestPoolFinishesInterruptedMembers(t *testing.T) {
	e := newEnv(t)
	arm := func() {
		t.Helper()
		disarm, err := failpoint.Arm("pool.refill.after-launch=1*return(refill interrupted)")
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
	arm()
	_, err := e.Engine.SetPool(e.Ctx, "base", 1)
	enginetest.Must(t, err)
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
	// The interrupted member itself is finished (paused), not replaced.
	if !enginetest.Poll(func() bool { s := states(); return len(s) == 1 && s[first] == sandbox.StatePaused }) {
		t.Fatalf("the interrupted member was not finished into the pool: %v", states())
	}

	// Interrupted again, then the pool is made 0: every member goes, the
	// unfinished one too.
	arm()
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
