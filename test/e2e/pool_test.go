package e2e

import (
	"context"
	"os"
	"path/filepath"
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

// TestWarmPoolAuto: with no pool set, the default template's pool is sized
// from recent demand (the most creates of any 10 s, within --warm-pool-max),
// fills in the background, serves the next creates, gives way to a size set
// through the API and back, and scales to zero once the demand is older
// than --warm-pool-idle. A daemon with --warm-pool=off keeps none.
func TestWarmPoolAuto(t *testing.T) {
	parallel(t)
	d := startDaemonWith(t, "--warm-pool=auto", "--warm-pool-max=3", "--warm-pool-idle=15s")
	ctx := context.Background()
	pool := func() *api.Pool {
		t.Helper()
		p, err := d.c.GetPool(ctx, "base")
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	waitPool := func(what string, ok func(p *api.Pool) bool) *api.Pool {
		t.Helper()
		deadline := time.Now().Add(90 * time.Second)
		for {
			p := pool()
			if ok(p) {
				return p
			}
			if time.Now().After(deadline) {
				t.Fatalf("pool: %s: %+v", what, p)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	if p := pool(); !p.Auto || p.Min != 0 || p.Ready != 0 {
		t.Fatalf("before any create: %+v, want an automatic pool of 0", p)
	}
	// Five creates at once: demand 5, bounded to 3.
	ids := make(chan string, 5)
	errs := make(chan error, 5)
	for range 5 {
		go func() {
			sb, err := d.c.CreateSandbox(ctx, api.CreateSandboxRequest{})
			if err != nil {
				errs <- err
				return
			}
			ids <- sb.ID
		}()
	}
	for range 5 {
		select {
		case err := <-errs:
			t.Fatal(err)
		case id := <-ids:
			if _, err := d.c.DeleteSandbox(ctx, id, true); err != nil {
				t.Fatal(err)
			}
		}
	}
	p := waitPool("filled to the bound of 3", func(p *api.Pool) bool { return p.Ready == 3 })
	if !p.Auto || p.Min != 3 {
		t.Fatalf("after the burst: %+v, want an automatic pool of 3", p)
	}
	hits := p.Hits
	// The next creates are claims: fresh, working sandboxes.
	for i := range 2 {
		sb, err := d.c.CreateSandbox(ctx, api.CreateSandboxRequest{})
		if err != nil {
			t.Fatal(err)
		}
		if out := execOut(t, d, sb.ID, "sh", "-c", "ls /tmp | wc -l; echo ok"); out != "0\nok\n" {
			t.Fatalf("claim %d: %q", i, out)
		}
		execOut(t, d, sb.ID, "sh", "-c", "echo left > /tmp/left")
		if _, err := d.c.DeleteSandbox(ctx, sb.ID, true); err != nil {
			t.Fatal(err)
		}
	}
	if p := pool(); p.Hits != hits+2 {
		t.Fatalf("the two creates after the burst were not claims: hits %d, want %d (%+v)", p.Hits, hits+2, p)
	}
	// A size set through the API replaces the automatic one, 0 (none)
	// included; forgetting it returns to the automatic size.
	if p, err := d.c.SetPool(ctx, "base", 1); err != nil || p.Auto || p.Min != 1 {
		t.Fatalf("set to 1: %+v %v", p, err)
	}
	if p, err := d.c.SetPool(ctx, "base", 0); err != nil || p.Auto || p.Min != 0 {
		t.Fatalf("set to 0: %+v %v, want no pool", p, err)
	}
	waitPool("drained by a size of 0", func(p *api.Pool) bool { return p.Ready == 0 && p.Starting == 0 })
	if p, err := d.c.ClearPool(ctx, "base"); err != nil || !p.Auto || p.Min != 3 {
		t.Fatalf("cleared: %+v %v, want the automatic 3", p, err)
	}
	waitPool("refilled to 3", func(p *api.Pool) bool { return p.Ready == 3 })
	// No demand for longer than --warm-pool-idle: down to none.
	waitPool("scaled to zero", func(p *api.Pool) bool { return p.Min == 0 && p.Ready == 0 && p.Starting == 0 })

	off := startDaemon(t) // the harness's --warm-pool=off
	sb, err := off.c.CreateSandbox(ctx, api.CreateSandboxRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := off.c.DeleteSandbox(ctx, sb.ID, true); err != nil {
		t.Fatal(err)
	}
	if p, err := off.c.GetPool(ctx, "base"); err != nil || p.Auto || p.Min != 0 {
		t.Fatalf("--warm-pool=off: %+v %v, want no pool", p, err)
	}
}

// TestCrashMidPoolRefill kills the daemon at each step of a warm-pool
// refill (a member's create before and after its mount and after its
// start, and between its start and its pause into the pool) and starts it
// again: the member left behind is finished into the pool or removed, the
// pool refills to its size and no more, none waits "starting", a size of
// 0 empties it, and doctor has nothing to report.
func TestCrashMidPoolRefill(t *testing.T) {
	parallel(t)
	d := startDaemon(t)
	ctx := context.Background()
	waitPool := func(what string, ok func(p *api.Pool) bool) {
		t.Helper()
		deadline := time.Now().Add(60 * time.Second)
		for {
			p, err := d.c.GetPool(ctx, "base")
			if err == nil && ok(p) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("pool: %s: %+v %v", what, p, err)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	for _, fp := range []string{"create.before-mount", "create.after-mount", "create.after-start", "pool.refill.after-launch"} {
		t.Run(fp, func(t *testing.T) {
			d.stop()
			d.startWithEnv("BERTH_FAILPOINTS=" + fp)
			// The refill runs behind the answer: the daemon may die
			// before or after it is written.
			_, _ = d.c.SetPool(ctx, "base", 2)
			d.waitExit()
			d.startWithEnv()
			waitPool("refilled to 2 after a kill at "+fp, func(p *api.Pool) bool {
				return p.Min == 2 && p.Ready == 2 && p.Starting == 0
			})
			assertDoctorClean(t, d)
			if _, err := d.c.SetPool(ctx, "base", 0); err != nil {
				t.Fatal(err)
			}
			waitPool("emptied by a size of 0", func(p *api.Pool) bool { return p.Ready == 0 && p.Starting == 0 })
			// A member in a state the pool does not count (stopped,
			// failed) would still have its directory.
			waitFor(t, "every member's directory removed", func() bool {
				ents, err := os.ReadDir(filepath.Join(d.dataDir, "sandboxes"))
				return err == nil && len(ents) == 0
			})
			assertDoctorClean(t, d)
		})
	}
}
