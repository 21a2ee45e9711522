package engine_test

import (
	"testing"
	"time"

	"github.com/berth-sh/berth/internal/engine"
	"github.com/berth-sh/berth/internal/engine/enginetest"
	"github.com/berth-sh/berth/internal/node"
	"github.com/berth-sh/berth/internal/sandbox"
)

// Policy actions, driven by the engine's clock: the reconciler Recover
// started runs every few milliseconds and acts once a deadline has passed
// on the clock.

func TestPolicyActions(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		req   engine.CreateRequest
		setup func(e *env, id string)
		after time.Duration
		want  sandbox.State
		node  node.Status // "" none left
	}{
		{name: "timeout deletes an ephemeral sandbox",
			req: engine.CreateRequest{Timeout: 60 * time.Second}, after: 61 * time.Second, want: sandbox.StateDeleted},
		{name: "timeout stops a persistent sandbox",
			req: engine.CreateRequest{Timeout: 60 * time.Second, Persistent: true}, after: 61 * time.Second,
			want: sandbox.StateStopped, node: node.StatusStopped},
		{name: "idle pauses by default",
			req: engine.CreateRequest{Policy: sandbox.Policy{IdleTimeout: 30 * time.Second}}, after: 31 * time.Second,
			want: sandbox.StatePaused, node: node.StatusPaused},
		{name: "idle stops",
			req:   engine.CreateRequest{Persistent: true, Policy: sandbox.Policy{IdleTimeout: 30 * time.Second, OnIdle: sandbox.ActionStop}},
			after: 31 * time.Second, want: sandbox.StateStopped, node: node.StatusStopped},
		{name: "max age deletes by default",
			req: engine.CreateRequest{Policy: sandbox.Policy{MaxAge: 100 * time.Second}}, after: 101 * time.Second,
			want: sandbox.StateDeleted},
		{name: "max age stops",
			req:   engine.CreateRequest{Persistent: true, Policy: sandbox.Policy{MaxAge: 100 * time.Second, OnMaxAge: sandbox.ActionStop}},
			after: 101 * time.Second, want: sandbox.StateStopped, node: node.StatusStopped},
		{name: "max age deletes a stopped sandbox",
			req: engine.CreateRequest{Persistent: true, Policy: sandbox.Policy{MaxAge: 100 * time.Second}},
			setup: func(e *env, id string) {
				_, err := e.Engine.Stop(e.Ctx, id, "test")
				enginetest.Must(e.T, err)
			},
			after: 101 * time.Second, want: sandbox.StateDeleted},
		{name: "retention deletes a stopped sandbox",
			req: engine.CreateRequest{Persistent: true, Policy: sandbox.Policy{Retention: 60 * time.Second}},
			setup: func(e *env, id string) {
				_, err := e.Engine.Stop(e.Ctx, id, "test")
				enginetest.Must(e.T, err)
			},
			after: 61 * time.Second, want: sandbox.StateDeleted},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			sb := e.Create(tc.req)
			if tc.setup != nil {
				tc.setup(e, sb.ID)
			}
			before := e.Get(sb.ID).State
			// Not due yet: nothing happens before the deadline.
			e.Clock.Advance(tc.after - 2*time.Second)
			time.Sleep(100 * time.Millisecond) // several reconciler passes
			if got := e.Get(sb.ID).State; got != before {
				t.Fatalf("acted before the deadline: %s", got)
			}
			e.Clock.Advance(2 * time.Second)
			got := e.WaitState(sb.ID, tc.want)
			if got.Cause != sandbox.CausePolicy {
				t.Fatalf("cause %s (%s), want policy", got.Cause, got.Reason)
			}
			e.WantNodeStatus(sb.ID, tc.node)
		})
	}
}

// Activity pushes the idle deadline back.
func TestIdleCountsFromLastActivity(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	sb := e.Create(engine.CreateRequest{Policy: sandbox.Policy{IdleTimeout: 30 * time.Second}})
	e.Clock.Advance(20 * time.Second)
	if exit, _, err := e.Exec(sb.ID, "true"); err != nil || exit.Code != 0 {
		t.Fatalf("exec: %+v %v", exit, err)
	}
	e.Clock.Advance(20 * time.Second) // 40 s after start, 20 s after the exec
	time.Sleep(100 * time.Millisecond)
	if got := e.Get(sb.ID).State; got != sandbox.StateRunning {
		t.Fatalf("idled %s after activity 20 s ago", got)
	}
	e.Clock.Advance(11 * time.Second)
	e.WaitState(sb.ID, sandbox.StatePaused)
}

// A sandbox whose processes end on their own is noticed: an ephemeral
// one is destroyed, a persistent one stopped.
func TestExitedSandboxIsNoticed(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	eph := e.Create(engine.CreateRequest{})
	per := e.Create(engine.CreateRequest{Persistent: true})
	e.Node.Crash(eph.ID)
	e.Node.Crash(per.ID)
	e.WaitState(eph.ID, sandbox.StateDeleted)
	got := e.WaitState(per.ID, sandbox.StateStopped)
	if got.Cause != sandbox.CauseReconciler {
		t.Fatalf("cause %s", got.Cause)
	}
	e.Healthy()
}

// After a restart, the reconciler adopts what runs, destroys ephemeral
// sandboxes that died meanwhile and restarts persistent ones.
func TestRecoverAfterRestart(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	alive := e.Create(engine.CreateRequest{})
	paused := e.Create(engine.CreateRequest{})
	_, err := e.Engine.Pause(e.Ctx, paused.ID, "test")
	enginetest.Must(t, err)
	dead := e.Create(engine.CreateRequest{})
	deadPersistent := e.Create(engine.CreateRequest{Persistent: true})
	frozen := e.Create(engine.CreateRequest{})
	e.StopEngine()
	e.Node.Crash(dead.ID)
	e.Node.Crash(deadPersistent.ID)
	// Frozen under a running record: a pause the daemon died in.
	enginetest.Must(t, e.Node.Freeze(e.Ctx, frozen))
	e.Start()
	e.WaitState(alive.ID, sandbox.StateRunning)
	e.WantNodeStatus(alive.ID, node.StatusRunning)
	e.WaitState(paused.ID, sandbox.StatePaused)
	e.WantNodeStatus(paused.ID, node.StatusPaused)
	e.WaitState(dead.ID, sandbox.StateDeleted)
	e.WaitState(deadPersistent.ID, sandbox.StateRunning)
	e.WantNodeStatus(deadPersistent.ID, node.StatusRunning)
	e.WaitState(frozen.ID, sandbox.StateRunning)
	e.WantNodeStatus(frozen.ID, node.StatusRunning)
	e.Healthy()
}
