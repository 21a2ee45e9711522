package engine_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/berth-sh/berth/internal/engine"
	"github.com/berth-sh/berth/internal/engine/enginetest"
	"github.com/berth-sh/berth/internal/engine/snapshots"
	"github.com/berth-sh/berth/internal/engine/volumes"
	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/internal/node/memnode"
	"github.com/berth-sh/berth/internal/sandbox"
	"github.com/berth-sh/berth/internal/store"
)

// liveOf counts the tenant's live records.
func (e *env) liveOf(tenant string) (live, all int) {
	e.T.Helper()
	sbs, _, err := e.Store.ListSandboxes(e.Ctx, store.SandboxFilter{Owner: store.OwnedBy(tenant), IncludeDeleted: true}, store.Page{})
	if err != nil {
		e.T.Fatal(err)
	}
	for _, sb := range sbs {
		if sb.State.Live() {
			live++
		}
	}
	return live, len(sbs)
}

func wantQuotaErr(t *testing.T, err error, msg string) {
	t.Helper()
	if !errors.Is(err, errdefs.ErrQuota) {
		t.Fatalf("want quota_exceeded, got %v", err)
	}
	if code, status := errdefs.Code(err); code != "quota_exceeded" || status != 429 {
		t.Fatalf("code %s %d", code, status)
	}
	if d, ok := errdefs.RetryAfter(err); !ok || d <= 0 {
		t.Fatalf("no Retry-After on %v", err)
	}
	if !strings.Contains(errdefs.Message(err), msg) {
		t.Fatalf("message %q does not name the limit (%q)", errdefs.Message(err), msg)
	}
}

// TestQuotaSandboxesRace: limit 3, 8 concurrent creates: exactly 3
// succeed, 5 get 429 naming the limit, and nothing of the refused ones
// exists — no record, no provision on the node.
func TestQuotaSandboxesRace(t *testing.T) {
	e := newEnv(t)
	e.SetQuota(store.TenantQuota{Tenant: "acme", MaxSandboxes: 3})
	var wg sync.WaitGroup
	errs := make([]error, 8)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = e.CreateAs("acme", engine.CreateRequest{})
		}()
	}
	wg.Wait()
	ok, refused := 0, 0
	for _, err := range errs {
		switch {
		case err == nil:
			ok++
		case errors.Is(err, errdefs.ErrQuota):
			refused++
			wantQuotaErr(t, err, "tenant acme: 3 of 3 concurrent sandboxes in use")
		default:
			t.Errorf("unexpected error: %v", err)
		}
	}
	if ok != 3 || refused != 5 {
		t.Fatalf("%d created, %d refused; want 3 and 5", ok, refused)
	}
	if live, all := e.liveOf("acme"); live != 3 || all != 3 {
		t.Fatalf("records: %d live of %d; want 3 of 3 (a refused create left a record)", live, all)
	}
	if n := len(e.Node.Methods("", "Provision")); n != 3 {
		t.Fatalf("%d provisions on the node, want 3", n)
	}
	// Another tenant is not limited by acme's quota, nor the host admin.
	if _, err := e.CreateAs("other", engine.CreateRequest{}); err != nil {
		t.Fatal(err)
	}
	// After a delete, one more fits, and not two.
	sbs, _, _ := e.Store.ListSandboxes(e.Ctx, store.SandboxFilter{Owner: store.OwnedBy("acme")}, store.Page{})
	if _, err := e.Engine.Delete(e.Ctx, sbs[0].ID, "test", sandbox.CauseUser, "test"); err != nil {
		t.Fatal(err)
	}
	if _, err := e.CreateAs("acme", engine.CreateRequest{}); err != nil {
		t.Fatalf("after a delete: %v", err)
	}
	_, err := e.CreateAs("acme", engine.CreateRequest{})
	wantQuotaErr(t, err, "3 of 3 concurrent sandboxes")
}

// TestQuotaResources: CPUs, memory and storage each refuse at the limit
// and not before.
func TestQuotaResources(t *testing.T) {
	e := newEnv(t)
	res := func(cpus float64, mem, disk int64) engine.CreateRequest {
		return engine.CreateRequest{Resources: sandbox.Resources{CPUs: cpus, MemoryBytes: mem, Pids: 256, DiskBytes: disk}}
	}
	e.SetQuota(store.TenantQuota{Tenant: "cpu", MaxCPUMillis: 1500})
	if _, err := e.CreateAs("cpu", res(1, 256<<20, 1<<30)); err != nil {
		t.Fatal(err)
	}
	if _, err := e.CreateAs("cpu", res(0.5, 256<<20, 1<<30)); err != nil {
		t.Fatalf("exactly at the CPU limit: %v", err)
	}
	_, err := e.CreateAs("cpu", res(0.01, 256<<20, 1<<30))
	wantQuotaErr(t, err, "tenant cpu: 1.5 of 1.5 CPUs in use")

	e.SetQuota(store.TenantQuota{Tenant: "mem", MaxMemory: 1 << 30})
	if _, err := e.CreateAs("mem", res(0.1, 768<<20, 1<<30)); err != nil {
		t.Fatal(err)
	}
	_, err = e.CreateAs("mem", res(0.1, 512<<20, 1<<30))
	wantQuotaErr(t, err, "tenant mem: 768.0 MiB of 1.0 GiB memory in use, this sandbox asks 512.0 MiB")
	if _, err := e.CreateAs("mem", res(0.1, 256<<20, 1<<30)); err != nil {
		t.Fatalf("exactly at the memory limit: %v", err)
	}

	e.SetQuota(store.TenantQuota{Tenant: "disk", MaxStorage: 3 << 30})
	if _, err := e.CreateAs("disk", res(0.1, 64<<20, 2<<30)); err != nil {
		t.Fatal(err)
	}
	_, err = e.CreateAs("disk", res(0.1, 64<<20, 2<<30))
	wantQuotaErr(t, err, "tenant disk: 2.0 GiB of 3.0 GiB storage reserved")
	if _, err := e.CreateAs("disk", res(0.1, 64<<20, 1<<30)); err != nil {
		t.Fatalf("exactly at the storage limit: %v", err)
	}
	u, err := e.Engine.TenantUsage(e.Ctx, "disk", "")
	if err != nil || u.Sandboxes != 2 || u.Storage != 3<<30 || u.Memory != 128<<20 || u.CPUMillis != 200 {
		t.Fatalf("usage %+v %v", u, err)
	}
	for _, tn := range []string{"cpu", "mem", "disk"} {
		if live, all := e.liveOf(tn); live != all {
			t.Fatalf("%s: a refused create left a record (%d live of %d)", tn, live, all)
		}
	}
}

// TestQuotaCreateRate: a burst of 2 at 60 a minute: the third create is
// refused with a Retry-After, and a retry after that long succeeds.
func TestQuotaCreateRate(t *testing.T) {
	e := newEnv(t)
	e.SetQuota(store.TenantQuota{Tenant: "fast", CreateRate: 60, CreateBurst: 2})
	for i := 0; i < 2; i++ {
		if _, err := e.CreateAs("fast", engine.CreateRequest{}); err != nil {
			t.Fatalf("create %d within the burst: %v", i, err)
		}
	}
	_, err := e.CreateAs("fast", engine.CreateRequest{})
	wantQuotaErr(t, err, "tenant fast: create rate of 60 a minute (burst 2) exceeded")
	d, _ := errdefs.RetryAfter(err)
	if d > 1100*time.Millisecond {
		t.Fatalf("Retry-After %v for a 1/s bucket", d)
	}
	// Honest: waiting what it said (rounded up to a second, as the header
	// says) is enough.
	time.Sleep(((d + time.Second - 1) / time.Second) * time.Second)
	if _, err := e.CreateAs("fast", engine.CreateRequest{}); err != nil {
		t.Fatalf("a retry after Retry-After %v: %v", d, err)
	}
	if live, all := e.liveOf("fast"); live != 3 || all != 3 {
		t.Fatalf("records %d live of %d", live, all)
	}
}

// TestQuotaDefault: the daemon's default quota binds tenants without a
// row, not the host admin; a row of zeros lifts it.
func TestQuotaDefault(t *testing.T) {
	e := newEnv(t, func(e *enginetest.Env) { e.Config.DefaultQuota = store.TenantQuota{MaxSandboxes: 1} })
	if _, err := e.CreateAs("t1", engine.CreateRequest{}); err != nil {
		t.Fatal(err)
	}
	_, err := e.CreateAs("t1", engine.CreateRequest{})
	wantQuotaErr(t, err, "tenant t1: 1 of 1 concurrent sandboxes in use")
	for i := 0; i < 2; i++ {
		if _, err := e.CreateAs("", engine.CreateRequest{}); err != nil {
			t.Fatalf("the host admin: %v", err)
		}
	}
	e.SetQuota(store.TenantQuota{Tenant: "t1"})
	if _, err := e.CreateAs("t1", engine.CreateRequest{}); err != nil {
		t.Fatalf("unlimited row: %v", err)
	}
}

// TestQuotaPoolClaim: a warm-pool claim counts against the claimant's
// quota; over it the member stays in the pool, frozen and unowned, and
// pool members never count against a tenant.
func TestQuotaPoolClaim(t *testing.T) {
	e := newEnv(t)
	_, err := e.Engine.SetPool(e.Ctx, "base", 2)
	enginetest.Must(t, err)
	m1 := e.WaitPoolMember()
	m2 := e.WaitPoolMember(m1.ID)
	e.SetQuota(store.TenantQuota{Tenant: "acme", MaxSandboxes: 1})
	sb, err := e.CreateAs("acme", engine.CreateRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if sb.ID != m1.ID && sb.ID != m2.ID {
		t.Fatalf("the create did not claim a member (%s)", sb.ID)
	}
	_, err = e.CreateAs("acme", engine.CreateRequest{})
	wantQuotaErr(t, err, "tenant acme: 1 of 1 concurrent sandboxes in use")
	other := m1
	if sb.ID == m1.ID {
		other = m2
	}
	if got := e.Get(other.ID); got.Spec.Pool != "base" || got.Tenant != "" || got.State != sandbox.StatePaused {
		t.Fatalf("the refused claim touched member %s: pool %q tenant %q %s", other.ID, got.Spec.Pool, got.Tenant, got.State)
	}
	if u, err := e.Engine.TenantUsage(e.Ctx, "acme", ""); err != nil || u.Sandboxes != 1 {
		t.Fatalf("usage %+v %v", u, err)
	}
}

// TestQuotaFork: forks are admitted like creates.
func TestQuotaFork(t *testing.T) {
	e := newEnv(t)
	e.SetQuota(store.TenantQuota{Tenant: "acme", MaxSandboxes: 2})
	parent, err := e.CreateAs("acme", engine.CreateRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := e.Engine.Fork(e.Ctx, parent.ID, &snapshots.ForkRequest{Count: 1}, "test"); err != nil {
		t.Fatalf("a fork within the quota: %v", err)
	}
	_, _, err = e.Engine.Fork(e.Ctx, parent.ID, &snapshots.ForkRequest{Count: 1}, "test")
	wantQuotaErr(t, err, "tenant acme: 2 of 2 concurrent sandboxes in use")
	if live, _ := e.liveOf("acme"); live != 2 {
		t.Fatalf("%d live after a refused fork, want 2", live)
	}
}

// TestQuotaVolumes: named volumes count against the storage quota and are
// refused past it, with nothing recorded; sandboxes then see them counted.
func TestQuotaVolumes(t *testing.T) {
	e := newEnv(t)
	e.SetQuota(store.TenantQuota{Tenant: "acme", MaxStorage: 3 << 30})
	if _, err := e.Engine.CreateVolume(e.Ctx, &volumes.CreateRequest{Name: "v1", SizeBytes: 2 << 30}, "acme"); err != nil {
		t.Fatal(err)
	}
	_, err := e.Engine.CreateVolume(e.Ctx, &volumes.CreateRequest{Name: "v2", SizeBytes: 2 << 30}, "acme")
	wantQuotaErr(t, err, "tenant acme: 2.0 GiB of 3.0 GiB storage reserved, this volume asks 2.0 GiB")
	vols, _, err := e.Store.ListVolumes(e.Ctx, store.VolumeFilter{Owner: store.OwnedBy("acme"), IncludeDeleted: true}, store.Page{})
	if err != nil || len(vols) != 1 {
		t.Fatalf("volumes after a refusal: %d %v", len(vols), err)
	}
	_, err = e.CreateAs("acme", engine.CreateRequest{Resources: sandbox.Resources{CPUs: 0.1, MemoryBytes: 64 << 20, Pids: 64, DiskBytes: 2 << 30}})
	wantQuotaErr(t, err, "storage reserved")
}

// gatedThaw is a node whose thaws wait until want of them run at once
// (or a bound passes): a test sees whether claims thaw side by side.
type gatedThaw struct {
	*memnode.Node
	want    int
	mu      sync.Mutex
	running int
	most    int
	met     chan struct{}
}

func (g *gatedThaw) Thaw(ctx context.Context, sb *sandbox.Sandbox) error {
	g.mu.Lock()
	g.running++
	g.most = max(g.most, g.running)
	if g.running == g.want {
		close(g.met)
	}
	g.mu.Unlock()
	select {
	case <-g.met:
	case <-time.After(3 * time.Second):
	}
	g.mu.Lock()
	g.running--
	g.mu.Unlock()
	return g.Node.Thaw(ctx, sb)
}

// TestQuotaClaimsSideBySide: a tenant with a quota has its creates
// counted one at a time but claimed side by side (admission by
// reservation: the tenant's lock is not held through the thaw and the
// record), and the count still never overshoots: of 3 concurrent creates
// under a limit of 2, 2 are claims and 1 is refused, and a member the
// refused one did not take is untouched.
func TestQuotaClaimsSideBySide(t *testing.T) {
	g := &gatedThaw{want: 2, met: make(chan struct{})}
	e := newEnv(t, func(e *enginetest.Env) {
		e.Node = memnode.New(e.T)
		g.Node = e.Node
		e.Backend = g
	})
	_, err := e.Engine.SetPool(e.Ctx, "base", 3)
	enginetest.Must(t, err)
	m1 := e.WaitPoolMember()
	m2 := e.WaitPoolMember(m1.ID)
	e.WaitPoolMember(m1.ID, m2.ID)
	e.SetQuota(store.TenantQuota{Tenant: "acme", MaxSandboxes: 2})
	var wg sync.WaitGroup
	errs := make([]error, 3)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = e.CreateAs("acme", engine.CreateRequest{})
		}()
	}
	wg.Wait()
	ok := 0
	for _, err := range errs {
		switch {
		case err == nil:
			ok++
		case errors.Is(err, errdefs.ErrQuota):
			wantQuotaErr(t, err, "tenant acme: 2 of 2 concurrent sandboxes in use")
		default:
			t.Errorf("unexpected error: %v", err)
		}
	}
	if ok != 2 {
		sbs, _, _ := e.Store.ListSandboxes(e.Ctx, store.SandboxFilter{Owner: store.AnyOwner, IncludeDeleted: true}, store.Page{})
		for _, sb := range sbs {
			t.Logf("%s tenant=%q pool=%q %s %s", sb.ID, sb.Tenant, sb.Spec.Pool, sb.State, sb.Reason)
		}
		t.Fatalf("%d created (%v); want 2", ok, errs)
	}
	if g.most < 2 {
		t.Fatalf("the claims thawed one at a time (at most %d at once)", g.most)
	}
	if live, _ := e.liveOf("acme"); live != 2 {
		t.Fatalf("acme has %d live sandboxes, want 2", live)
	}
	if u, err := e.Engine.TenantUsage(e.Ctx, "acme", ""); err != nil || u.Sandboxes != 2 {
		t.Fatalf("usage after the claims: %+v %v", u, err)
	}
}
