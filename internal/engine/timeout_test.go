package engine_test

import (
	"testing"
	"time"

	"github.com/berth-sh/berth/internal/engine"
	"github.com/berth-sh/berth/internal/engine/enginetest"
	"github.com/berth-sh/berth/internal/sandbox"
)

// SetTimeout moves the hard deadline to that much from now; the
// reconciler acts on the new deadline, not the old one; 0 removes it.
func TestSetTimeout(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	sb := e.Create(engine.CreateRequest{Timeout: 60 * time.Second})
	e.Clock.Advance(50 * time.Second)
	got, err := e.Engine.SetTimeout(e.Ctx, sb.ID, 100*time.Second, "test")
	enginetest.Must(t, err)
	if d, ok := got.Deadline(); !ok || !d.Equal(e.Clock.Now().Add(100*time.Second)) {
		t.Fatalf("deadline %v %v, want now+100s (%v)", d, ok, e.Clock.Now().Add(100*time.Second))
	}
	e.Clock.Advance(60 * time.Second) // past the old deadline
	time.Sleep(100 * time.Millisecond)
	if st := e.Get(sb.ID).State; st != sandbox.StateRunning {
		t.Fatalf("acted on the old deadline: %s", st)
	}
	if _, err := e.Engine.SetTimeout(e.Ctx, sb.ID, -time.Second, "test"); err == nil {
		t.Fatal("a negative timeout was accepted")
	}
	// Removed: nothing is due any more.
	enginetest.Must(t, func() error { _, err := e.Engine.SetTimeout(e.Ctx, sb.ID, 0, "test"); return err }())
	e.Clock.Advance(time.Hour)
	time.Sleep(100 * time.Millisecond)
	if st := e.Get(sb.ID).State; st != sandbox.StateRunning {
		t.Fatalf("a sandbox without a timeout went %s", st)
	}
	// Given back, it is enforced again.
	enginetest.Must(t, func() error { _, err := e.Engine.SetTimeout(e.Ctx, sb.ID, 10*time.Second, "test"); return err }())
	e.Clock.Advance(11 * time.Second)
	if got := e.WaitState(sb.ID, sandbox.StateDeleted); got.Cause != sandbox.CausePolicy {
		t.Fatalf("cause %s, want policy", got.Cause)
	}
	if _, err := e.Engine.SetTimeout(e.Ctx, sb.ID, time.Minute, "test"); err == nil {
		t.Fatal("set the timeout of a deleted sandbox")
	}
}
