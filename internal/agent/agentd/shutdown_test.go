package agentd

import (
	"errors"
	"testing"
	"time"

	"github.com/berth-sh/berth/internal/agent"
	"github.com/berth-sh/berth/internal/agent/wire"
	"github.com/berth-sh/berth/internal/errdefs"
)

// TestShutdown: the op stops a supervised process for good (no restart
// after its signal), answers as soon as every process is gone, answers at
// the grace with the count left when one ignores the signal, and refuses
// a bad signal or grace.
func TestShutdown(t *testing.T) {
	a := startAgent(t)
	svc := startProc(t, a, agent.ProcRequest{Tag: "svc", Restart: wire.RestartAlways}, "sh", "-c", "while :; do sleep 0.05; done")
	begin := time.Now()
	left, err := a.client.Shutdown(testCtx(t), "TERM", 5*time.Second)
	if err != nil || left != 0 {
		t.Fatalf("shutdown = %d left, %v", left, err)
	}
	if d := time.Since(begin); d > 3*time.Second {
		t.Errorf("shutdown of a process dying on TERM took %s", d)
	}
	if got := procByID(t, a, svc.ID); got.State != wire.ProcKilled || got.Restarts != 0 {
		t.Fatalf("supervised process after shutdown: %+v", got)
	}

	stub := startProc(t, a, agent.ProcRequest{}, "sh", "-c", `trap "" TERM; echo ready; while :; do sleep 0.05; done`)
	time.Sleep(300 * time.Millisecond) // the trap is set
	begin = time.Now()
	left, err = a.client.Shutdown(testCtx(t), "SIGTERM", 700*time.Millisecond)
	d := time.Since(begin)
	if err != nil || left != 1 {
		t.Fatalf("shutdown with a process ignoring TERM = %d left, %v", left, err)
	}
	if d < 650*time.Millisecond || d > 3*time.Second {
		t.Errorf("shutdown answered after %s, want about the 700ms grace", d)
	}
	if err := a.client.SignalProc(testCtx(t), stub.ID, "KILL", true); err != nil {
		t.Fatal(err)
	}
	waitProc(t, a, stub.ID)

	for _, bad := range []struct {
		sig   string
		grace time.Duration
	}{{"NOPE", time.Second}, {"TERM", -time.Second}, {"TERM", 11 * time.Minute}, {"65", time.Second}} {
		if _, err := a.client.Shutdown(testCtx(t), bad.sig, bad.grace); !errors.Is(err, errdefs.ErrInvalid) {
			t.Errorf("shutdown(%q, %s) = %v, want invalid", bad.sig, bad.grace, err)
		}
	}
}
