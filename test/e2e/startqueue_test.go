package e2e

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/client"
	"github.com/berth-sh/berth/internal/auth"
)

// TestStartQueue: starts past --max-starts wait their turn instead of
// failing, fairly between tenants, and a create returns only once its
// sandbox runs commands. With one start at a time (each held 1.5 s at a
// failpoint) and a bound of two waiting per tenant: of four creates acme
// sends at once while its first starts, two wait and two are refused with 429
// limit_exceeded (limit start_queue) and a Retry-After, leaving no
// record; globex's one create, sent while acme's two wait, runs before
// acme's last (a turn each), not behind all of acme's.
func TestStartQueue(t *testing.T) {
	parallel(t)
	addr := freeAddr(t)
	d := newDaemon(t, &daemon{extra: []string{"--insecure-listen", addr, "--max-starts", "1", "--start-queue", "2"},
		env: []string{"BERTH_FAILPOINTS=create.after-mount=sleep(1500ms)"}})
	ctx := context.Background()
	clients := map[string]*client.Client{}
	for _, tenant := range []string{"acme", "globex"} {
		c, err := client.New("http://"+addr, tenantKey(t, d, tenant, auth.ScopeSandboxesRead, auth.ScopeSandboxesWrite, auth.ScopeExec))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		clients[tenant] = c
	}
	// The tenants remove their own before the harness's cleanup (which
	// sees the host admin's tenant only) checks for leaks.
	t.Cleanup(func() {
		for name, c := range clients {
			sbs, err := c.ListSandboxes(ctx, false)
			if err != nil {
				t.Errorf("listing %s's sandboxes: %v", name, err)
			}
			for _, sb := range sbs {
				if _, err := c.DeleteSandbox(ctx, sb.ID, true); err != nil {
					t.Errorf("deleting %s: %v", sb.ID, err)
				}
			}
		}
	})

	type result struct {
		tenant string
		id     string
		err    error
		at     time.Time
	}
	results := make(chan result, 6)
	create := func(tenant string) {
		c := clients[tenant]
		sb, err := c.CreateSandbox(ctx, api.CreateSandboxRequest{})
		r := result{tenant: tenant, err: err, at: time.Now()}
		if err == nil {
			r.id = sb.ID
			// Created means the agent answers: a command runs at once.
			ex, err := c.Exec(ctx, sb.ID, api.ExecRequest{Cmd: []string{"true"}}, nil, nil)
			if err != nil || ex.Code != 0 {
				r.err = errors.Join(errors.New("exec right after create"), err)
			}
		}
		results <- r
	}
	var wg sync.WaitGroup
	// The first takes the one slot: recorded, then granted its turn at
	// once (its start then sleeps 1.5 s at the failpoint).
	wg.Add(1)
	go func() { defer wg.Done(); create("acme") }()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		sbs, err := clients["acme"].ListSandboxes(ctx, false)
		if err != nil {
			t.Fatal(err)
		}
		if len(sbs) == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("acme's first create was never recorded")
		}
	}
	time.Sleep(300 * time.Millisecond) // from its record to its turn: in-process steps
	for range 4 {
		wg.Add(1)
		go func() { defer wg.Done(); create("acme") }()
	}
	// Of the four sent while the first starts, two wait (the bound) and two
	// are refused at once; three are recorded, creating.
	for range 2 {
		r := <-results
		var ce *client.Error
		if !errors.As(r.err, &ce) || ce.Status != 429 || ce.Code != "limit_exceeded" || ce.Limit != "start_queue" || ce.RetryAfter < time.Second {
			t.Fatalf("acme's create past the bound: %+v (%v), want 429 limit_exceeded start_queue with a Retry-After", ce, r.err)
		}
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		sbs, err := clients["acme"].ListSandboxes(ctx, true)
		if err != nil {
			t.Fatal(err)
		}
		creating := 0
		for _, sb := range sbs {
			if sb.State == "creating" {
				creating++
			}
		}
		// The refusals can answer before the last admitted create has
		// written its record: wait for three, never more.
		if len(sbs) > 3 {
			t.Fatalf("acme has %d records (tombstones included) with 2 refused, want 3", len(sbs))
		}
		if creating == 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("acme's admitted creates never all showed creating: %d of 3 (%d records)", creating, len(sbs))
		}
		time.Sleep(50 * time.Millisecond)
	}
	wg.Add(1)
	go func() { defer wg.Done(); create("globex") }()
	wg.Wait()
	close(results)
	var acme []time.Time
	var globex time.Time
	for r := range results {
		if r.err != nil {
			t.Fatalf("%s's create: %v", r.tenant, r.err)
		}
		if r.tenant == "acme" {
			acme = append(acme, r.at)
		} else {
			globex = r.at
		}
	}
	if len(acme) != 3 || globex.IsZero() {
		t.Fatalf("%d of acme's and globex's (%v) creates answered", len(acme), globex)
	}
	last := acme[0]
	for _, at := range acme {
		if at.After(last) {
			last = at
		}
	}
	if !globex.Before(last) {
		t.Fatalf("globex's one create answered at %s, after all of acme's (last %s): no turn between tenants",
			globex.Format(time.StampMilli), last.Format(time.StampMilli))
	}
}

// TestStartQueueDeleteWhileWaiting: a delete of a sandbox whose start is
// still waiting its turn ends the wait: its create answers 409 and the
// sandbox is deleted, never started; the start ahead of it is untouched.
// (Before, the delete waited behind the create, which started the
// sandbox and answered success, only for it to be deleted.)
func TestStartQueueDeleteWhileWaiting(t *testing.T) {
	parallel(t)
	d := newDaemon(t, &daemon{extra: []string{"--max-starts", "1"},
		env: []string{"BERTH_FAILPOINTS=create.after-mount=sleep(3s)"}})
	ctx := context.Background()
	creating := func() []api.Sandbox {
		sbs, err := d.c.ListSandboxes(ctx, false)
		if err != nil {
			t.Fatal(err)
		}
		var out []api.Sandbox
		for _, sb := range sbs {
			if sb.State == "creating" {
				out = append(out, sb)
			}
		}
		return out
	}
	waitCreating := func(n int) []api.Sandbox {
		deadline := time.Now().Add(30 * time.Second)
		for {
			if got := creating(); len(got) == n {
				return got
			}
			if time.Now().After(deadline) {
				t.Fatalf("never %d sandboxes creating: %d", n, len(creating()))
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	type result struct {
		sb  *api.Sandbox
		err error
	}
	first, second := make(chan result, 1), make(chan result, 1)
	go func() { sb, err := d.c.CreateSandbox(ctx, api.CreateSandboxRequest{}); first <- result{sb, err} }()
	a := waitCreating(1)[0] // starting: it holds the one slot for 3 s
	go func() { sb, err := d.c.CreateSandbox(ctx, api.CreateSandboxRequest{}); second <- result{sb, err} }()
	var b api.Sandbox
	for _, sb := range waitCreating(2) {
		if sb.ID != a.ID {
			b = sb
		}
	}
	if _, err := d.c.DeleteSandbox(ctx, b.ID, true); err != nil {
		t.Fatalf("deleting the waiting sandbox: %v", err)
	}
	r := <-second
	if !client.IsConflict(r.err) {
		t.Fatalf("the create whose sandbox was deleted while waiting: %+v %v, want 409", r.sb, r.err)
	}
	got, err := d.c.GetSandbox(ctx, b.ID)
	if err != nil || got.State != "deleted" || got.StartedAt != nil {
		t.Fatalf("the deleted waiting sandbox: %+v %v, want deleted and never started", got, err)
	}
	r = <-first
	if r.err != nil || r.sb.ID != a.ID || r.sb.State != "running" {
		t.Fatalf("the start ahead: %+v %v", r.sb, r.err)
	}
}

// TestStartQueueCoversStarts: a start of a stopped sandbox takes its turn
// among the node's starts like a create. With one start at a time, each
// held 2 s at a failpoint, a start sent while a create holds the slot
// waits with its sandbox still stopped (on the old code it went to
// starting at once, two runtimes starting side by side), then runs.
func TestStartQueueCoversStarts(t *testing.T) {
	parallel(t)
	d := newDaemon(t, &daemon{extra: []string{"--max-starts", "1"},
		env: []string{"BERTH_FAILPOINTS=create.after-mount=sleep(2s)"}})
	ctx := context.Background()
	p, err := d.c.CreateSandbox(ctx, api.CreateSandboxRequest{Persistent: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.c.Stop(ctx, p.ID); err != nil {
		t.Fatal(err)
	}
	state := func(id string) string {
		sb, err := d.c.GetSandbox(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		return sb.State
	}
	created := make(chan error, 1)
	go func() {
		_, err := d.c.CreateSandbox(ctx, api.CreateSandboxRequest{})
		created <- err
	}()
	// The create holds the one slot once it is recorded (granted at once:
	// nothing else starts), for the failpoint's 2 s.
	var holder string
	for deadline := time.Now().Add(30 * time.Second); holder == ""; time.Sleep(20 * time.Millisecond) {
		sbs, err := d.c.ListSandboxes(ctx, false)
		if err != nil {
			t.Fatal(err)
		}
		for _, sb := range sbs {
			if sb.State == "creating" {
				holder = sb.ID
			}
		}
		if time.Now().After(deadline) {
			t.Fatal("the create was never recorded")
		}
	}
	started := make(chan error, 1)
	go func() {
		_, err := d.c.Start(ctx, p.ID)
		started <- err
	}()
	// While the create holds the slot, the start waits: its sandbox stays
	// stopped.
	waited := 0
	for range 10 {
		time.Sleep(50 * time.Millisecond)
		h, s := state(holder), state(p.ID)
		if h != "creating" {
			break // the holder finished: nothing more to learn from the window
		}
		if s != "stopped" {
			t.Fatalf("sandbox %s is %s while the one start slot is the create's", p.ID, s)
		}
		waited++
	}
	if waited == 0 {
		t.Fatal("the create finished before the start could be seen waiting")
	}
	if err := <-created; err != nil {
		t.Fatal(err)
	}
	if err := <-started; err != nil {
		t.Fatal(err)
	}
	if s := state(p.ID); s != "running" {
		t.Fatalf("after its turn the sandbox is %s", s)
	}
	if out := execOut(t, d, p.ID, "echo", "ok"); out != "ok\n" {
		t.Fatalf("exec after the start: %q", out)
	}
}
