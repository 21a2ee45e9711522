package pools_test

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/berth-sh/berth/internal/engine"
	"github.com/berth-sh/berth/internal/engine/enginetest"
	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/internal/sandbox"
	"github.com/berth-sh/berth/internal/store"
)

// TestTenantPools: a tenant sizes the pool of its own template only; its
// members are its own (counted by its quota, hidden from it until
// claimed); only its own creates claim them; a refill its quota stops
// makes nothing (and no error loop).
func TestTenantPools(t *testing.T) {
	e := newEnv(t)
	enginetest.Must(t, e.Store.PutTemplate(e.Ctx, &store.Template{Tenant: "acme", Name: "tool", Layers: []string{enginetest.OwnLayer}, Source: "test", CreatedAt: e.Clock.Now()}))
	acme, zed := e.As("acme"), e.As("zed")
	if _, err := e.Engine.SetPool(acme, "base", 1); !errors.Is(err, errdefs.ErrPermission) {
		t.Fatalf("acme sizing the shared base's pool: %v, want permission denied", err)
	}
	if _, err := e.Engine.SetPool(zed, "tool", 1); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("zed sizing acme's pool: %v, want not found", err)
	}
	if ps, err := e.Engine.Pools(e.Ctx); err != nil || len(ps) != 0 {
		t.Fatalf("pools after refused sets: %+v %v", ps, err)
	}
	p, err := e.Engine.SetPool(acme, "tool", 1)
	if err != nil || p.Tenant != "acme" || p.Template != "tool" || p.Min != 1 {
		t.Fatalf("acme's pool: %+v %v", p, err)
	}
	var member *sandbox.Sandbox
	if !enginetest.Poll(func() bool {
		ms := e.PoolMembersOf("acme", "tool")
		if len(ms) == 1 && ms[0].State == sandbox.StatePaused {
			member = ms[0]
			return true
		}
		return false
	}) {
		t.Fatal("acme's pool made no ready member")
	}
	if !slices.Equal(member.Spec.Layers, []string{enginetest.OwnLayer}) {
		t.Fatalf("member layers %v, want acme's template's", member.Spec.Layers)
	}
	if u, err := e.Engine.TenantUsage(e.Ctx, "acme", ""); err != nil || u.Sandboxes != 1 {
		t.Fatalf("acme's usage with its pool member: %+v %v, want 1 sandbox", u, err)
	}
	if _, err := e.Engine.Get(acme, member.ID); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("acme reading its unclaimed member: %v, want not found", err)
	}
	if _, err := e.Engine.Get(e.Ctx, member.ID); err != nil {
		t.Fatalf("the host reading the member: %v", err)
	}
	// Who sees which pool.
	if ps, err := e.Engine.Pools(zed); err != nil || len(ps) != 0 {
		t.Fatalf("zed's pools: %+v %v, want none", ps, err)
	}
	if ps, err := e.Engine.Pools(acme); err != nil || len(ps) != 1 || ps[0].Tenant != "acme" || ps[0].Ready != 1 {
		t.Fatalf("acme's pools: %+v %v", ps, err)
	}
	if ps, err := e.Engine.Pools(e.Ctx); err != nil || len(ps) != 1 || ps[0].Tenant != "acme" {
		t.Fatalf("the host's pools: %+v %v", ps, err)
	}
	// zed cannot reach acme's template, so not its pool either; zed's
	// create of the shared base leaves the member be.
	if _, err := e.CreateAs("zed", engine.CreateRequest{Template: "tool"}); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("zed's create of acme's tool: %v, want not found", err)
	}
	zb, err := e.CreateAs("zed", engine.CreateRequest{Template: "base"})
	enginetest.Must(t, err)
	if zb.ID == member.ID {
		t.Fatal("zed's create claimed acme's pool member")
	}
	// acme at its quota of 1 (its member): its create claims the member,
	// which is no extra sandbox.
	e.SetQuota(store.TenantQuota{Tenant: "acme", MaxSandboxes: 1})
	sb, err := e.CreateAs("acme", engine.CreateRequest{Template: "tool", Name: "mine"})
	if err != nil {
		t.Fatalf("acme's create at its quota with a member ready: %v", err)
	}
	if sb.ID != member.ID || sb.Tenant != "acme" || sb.Spec.Pool != "" || sb.Name != "mine" {
		t.Fatalf("acme's create = %s tenant %q pool %q name %q; want the claimed member %s", sb.ID, sb.Tenant, sb.Spec.Pool, sb.Name, member.ID)
	}
	if got, err := e.Engine.Get(acme, "mine"); err != nil || got.ID != member.ID {
		t.Fatalf("acme reading its claimed sandbox: %v", err)
	}
	// The refill is held at the quota: no member is made while acme is
	// full, and the pool says so.
	time.Sleep(300 * time.Millisecond) // ~15 reconciler rounds
	if ms := e.PoolMembersOf("acme", "tool"); len(ms) != 0 {
		t.Fatalf("a member was made past acme's quota: %s", ms[0].ID)
	}
	if u, err := e.Engine.TenantUsage(e.Ctx, "acme", ""); err != nil || u.Sandboxes != 1 {
		t.Fatalf("acme's usage: %+v %v", u, err)
	}
	if !enginetest.Poll(func() bool {
		p, err := e.Engine.Pool(acme, "tool")
		return err == nil && p.Ready == 0 && strings.HasPrefix(p.Reason, "tenant quota reached: ")
	}) {
		p, err := e.Engine.Pool(acme, "tool")
		t.Fatalf("acme's pool held at its quota: %+v %v, want the reason", p, err)
	}
	// Room again: the refill makes a new member.
	e.SetQuota(store.TenantQuota{Tenant: "acme", MaxSandboxes: 2})
	if !enginetest.Poll(func() bool {
		ms := e.PoolMembersOf("acme", "tool")
		return len(ms) == 1 && ms[0].State == sandbox.StatePaused
	}) {
		t.Fatal("no refill once acme had room")
	}
	if p, err := e.Engine.Pool(acme, "tool"); err != nil || p.Reason != "" {
		t.Fatalf("a full pool: %+v %v, want no reason", p, err)
	}
}
