package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/berth-sh/berth/api"
)

func TestWarmPoolClaimsAreFreshAndRefill(t *testing.T) {
	parallel(t)
	testWarmPool(t, "runc")
}

// TestWarmPoolRunsc: the same on a daemon whose default class is gVisor:
// members are runsc sandboxes, frozen with runsc pause, and a named claim
// gets its host name inside the Sentry (berth's helper, runsc exec).
func TestWarmPoolRunsc(t *testing.T) {
	parallel(t)
	testWarmPool(t, "runsc")
}

func testWarmPool(t *testing.T, rt string) {
	d := startDaemonWith(t, "--runtime", rt)
	ctx := context.Background()
	if rep, err := d.c.Doctor(ctx, false); err != nil || !strings.HasPrefix(rep.Runtime, rt) {
		t.Fatalf("the daemon's default class is not %s: %+v %v", rt, rep.Runtime, err)
	}
	if _, err := d.c.SetPool(ctx, "base", 2); err != nil {
		t.Fatal(err)
	}
	waitPool := func(ready int) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for {
			p, err := d.c.GetPool(ctx, "base")
			if err == nil && p.Ready >= ready {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("pool not refilled to %d: %+v %v", ready, p, err)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	waitPool(2)
	// Pool members are not anyone's sandboxes.
	if sbs, _ := d.c.ListSandboxes(ctx, false); len(sbs) != 0 {
		t.Fatalf("pool members listed: %+v", sbs)
	}
	seen := map[string]bool{}
	for i := 0; i < 5; i++ {
		name := []string{"alpha", "beta", "gamma", "delta", "eps"}[i]
		sb, err := d.c.CreateSandbox(ctx, api.CreateSandboxRequest{Name: name, Env: map[string]string{"WHO": name},
			Labels: map[string]string{"n": name}, TimeoutSeconds: 600})
		if err != nil {
			t.Fatal(err)
		}
		if seen[sb.ID] {
			t.Fatalf("sandbox id %s handed out twice", sb.ID)
		}
		seen[sb.ID] = true
		// Indistinguishable from a fresh sandbox: its own name, hostname,
		// env, timeout; running; nothing left by anyone.
		out := execOut(t, d, sb.ID, "sh", "-c", "hostname; echo $WHO; ls /tmp | wc -l")
		if out != name+"\n"+name+"\n0\n" {
			t.Fatalf("claimed sandbox %d: %q", i, out)
		}
		if sb.State != "running" || sb.TimeoutSeconds != 600 || sb.Labels["n"] != name || sb.Isolation.Runtime != rt {
			t.Fatalf("claimed record: %+v", sb)
		}
		execOut(t, d, sb.ID, "sh", "-c", "echo secret-of-"+name+" > /tmp/mine")
		if _, err := d.c.DeleteSandbox(ctx, sb.ID, true); err != nil {
			t.Fatal(err)
		}
		if i < 2 {
			waitPool(1) // claims keep coming from the pool while it refills
		}
	}
	waitPool(2)
	p, _ := d.c.GetPool(ctx, "base")
	if p.Hits < 2 || p.Hits+p.Misses != 5 {
		t.Fatalf("pool stats: %+v", p)
	}
	// A create that does not fit the pool (other resources) is a cold create.
	sb, err := d.c.CreateSandbox(ctx, api.CreateSandboxRequest{Resources: api.Resources{Pids: 100}})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(sb.Reason, "pool") {
		t.Fatalf("non-default create came from the pool: %s", sb.Reason)
	}
	// Shrinking the pool removes its members.
	if _, err := d.c.SetPool(ctx, "base", 0); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		p, _ := d.c.GetPool(ctx, "base")
		if p.Ready == 0 && p.Starting == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("pool not emptied: %+v", p)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
