package enginetest_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/berth-sh/berth/internal/engine"
	"github.com/berth-sh/berth/internal/engine/enginetest"
	"github.com/berth-sh/berth/internal/engine/templates"
	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/internal/identity"
	"github.com/berth-sh/berth/internal/sandbox"
	"github.com/berth-sh/berth/internal/store"
)

// as is ctx acting for tenant's caller (as the server's guard makes it).
func (e *env) as(tenant string) context.Context {
	return identity.With(e.Ctx, identity.Caller{Tenant: tenant, Actor: "key:" + tenant})
}

// poolMembersOf lists the pool members of (tenant, template), as stored.
func (e *env) poolMembersOf(tenant, tpl string) []*sandbox.Sandbox {
	e.T.Helper()
	sbs, _, err := e.Store.ListSandboxes(e.Ctx, store.SandboxFilter{Owner: store.AnyOwner}, store.Page{})
	must(e.T, err)
	var out []*sandbox.Sandbox
	for _, sb := range sbs {
		if sb.Spec.Pool == tpl && sb.Tenant == tenant && sb.State.Live() {
			out = append(out, sb)
		}
	}
	return out
}

// TestTenantPools: a tenant sizes the pool of its own template only; its
// members are its own (counted by its quota, hidden from it until
// claimed); only its own creates claim them; a refill its quota stops
// makes nothing (and no error loop).
func TestTenantPools(t *testing.T) {
	e := newEnv(t)
	must(t, e.Store.PutTemplate(e.Ctx, &store.Template{Tenant: "acme", Name: "tool", Layers: []string{ownLayer}, Source: "test", CreatedAt: e.Clock.Now()}))
	acme, zed := e.as("acme"), e.as("zed")
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
		ms := e.poolMembersOf("acme", "tool")
		if len(ms) == 1 && ms[0].State == sandbox.StatePaused {
			member = ms[0]
			return true
		}
		return false
	}) {
		t.Fatal("acme's pool made no ready member")
	}
	if !slices.Equal(member.Spec.Layers, []string{ownLayer}) {
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
	if _, err := e.createAs("zed", engine.CreateRequest{Template: "tool"}); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("zed's create of acme's tool: %v, want not found", err)
	}
	zb, err := e.createAs("zed", engine.CreateRequest{Template: "base"})
	must(t, err)
	if zb.ID == member.ID {
		t.Fatal("zed's create claimed acme's pool member")
	}
	// acme at its quota of 1 (its member): its create claims the member,
	// which is no extra sandbox.
	e.setQuota(store.TenantQuota{Tenant: "acme", MaxSandboxes: 1})
	sb, err := e.createAs("acme", engine.CreateRequest{Template: "tool", Name: "mine"})
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
	if ms := e.poolMembersOf("acme", "tool"); len(ms) != 0 {
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
	e.setQuota(store.TenantQuota{Tenant: "acme", MaxSandboxes: 2})
	if !enginetest.Poll(func() bool {
		ms := e.poolMembersOf("acme", "tool")
		return len(ms) == 1 && ms[0].State == sandbox.StatePaused
	}) {
		t.Fatal("no refill once acme had room")
	}
	if p, err := e.Engine.Pool(acme, "tool"); err != nil || p.Reason != "" {
		t.Fatalf("a full pool: %+v %v, want no reason", p, err)
	}
}

// writeArchive writes a docker-save archive of a small random image.
func writeArchive(t *testing.T) string {
	t.Helper()
	img, err := random.Image(512, 1)
	if err != nil {
		t.Fatal(err)
	}
	tag, err := name.NewTag("example.com/tenant:1")
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "img.tar")
	if err := tarball.WriteToFile(path, tag, img); err != nil {
		t.Fatal(err)
	}
	return path
}

func (e *env) upload(ctx context.Context, name, path string) (*store.Template, error) {
	e.T.Helper()
	f, err := os.Open(path)
	if err != nil {
		e.T.Fatal(err)
	}
	defer f.Close()
	return e.Engine.UploadTemplate(ctx, name, f)
}

// TestTenantTemplateChanges: a tenant uploads its own templates (names
// per tenant, shadowing the shared one), never imports from the host's
// paths or (by default) registries, and removes only its own templates,
// not while a sandbox of its uses one; the host's removal of a shared
// name is not held up by a tenant's sandbox of its own template of that
// name.
func TestTenantTemplateChanges(t *testing.T) {
	e := newEnv(t, enginetest.WithImages())
	acme, zed := e.as("acme"), e.as("zed")
	arch := writeArchive(t)
	a, err := e.upload(acme, "base", arch)
	if err != nil || a.Tenant != "acme" || a.Source != "upload" {
		t.Fatalf("acme's upload: %+v %v", a, err)
	}
	if _, err := e.upload(acme, "base", arch); !errors.Is(err, errdefs.ErrConflict) {
		t.Fatalf("acme's second base: %v, want conflict", err)
	}
	z, err := e.upload(zed, "zonly", arch)
	if err != nil || z.Tenant != "zed" {
		t.Fatalf("zed's upload: %+v %v", z, err)
	}
	ts, _, err := e.Engine.ListTemplates(acme, store.Page{})
	must(t, err)
	if len(ts) != 1 || ts[0].Name != "base" || ts[0].Tenant != "acme" {
		t.Fatalf("acme's templates: %+v, want its own base only", ts)
	}
	ts, _, err = e.Engine.ListTemplates(zed, store.Page{})
	must(t, err)
	if len(ts) != 2 || ts[0].Name != "base" || ts[0].Tenant != "" || ts[1].Name != "zonly" || ts[1].Tenant != "zed" {
		t.Fatalf("zed's templates: %+v, want the shared base and its zonly", ts)
	}
	// Host paths and registries.
	if _, err := e.Engine.ImportTemplate(acme, &templates.ImportRequest{Name: "p", Path: arch}); !errors.Is(err, errdefs.ErrPermission) {
		t.Fatalf("acme importing a host path: %v, want permission denied", err)
	}
	if _, err := e.Engine.ImportTemplate(acme, &templates.ImportRequest{Name: "r", Ref: "127.0.0.1:1/none:1"}); !errors.Is(err, errdefs.ErrPermission) {
		t.Fatalf("acme pulling without tenant pulls: %v, want permission denied", err)
	}
	if h, err := e.Engine.ImportTemplate(e.Ctx, &templates.ImportRequest{Name: "hostimp", Path: arch}); err != nil || h.Tenant != "" {
		t.Fatalf("the host's path import: %+v %v", h, err)
	}
	// Removal.
	if err := e.Engine.DeleteTemplate(acme, "hostimp"); !errors.Is(err, errdefs.ErrPermission) {
		t.Fatalf("acme removing the shared hostimp: %v, want permission denied", err)
	}
	if err := e.Engine.DeleteTemplate(acme, "zonly"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("acme removing zed's template: %v, want not found", err)
	}
	sb, err := e.createAs("acme", engine.CreateRequest{Template: "base"})
	must(t, err)
	if !slices.Equal(sb.Spec.Layers, a.Layers) {
		t.Fatalf("acme's create of base has layers %v, want its own %v", sb.Spec.Layers, a.Layers)
	}
	if err := e.Engine.DeleteTemplate(acme, "base"); !errors.Is(err, errdefs.ErrConflict) {
		t.Fatalf("acme removing its base in use: %v, want conflict", err)
	}
	// zed's sandbox of the shared hostimp holds it for the host.
	zs, err := e.createAs("zed", engine.CreateRequest{Template: "hostimp"})
	must(t, err)
	if err := e.Engine.DeleteTemplate(e.Ctx, "hostimp"); !errors.Is(err, errdefs.ErrConflict) {
		t.Fatalf("the host removing hostimp used by zed: %v, want conflict", err)
	}
	_, err = e.Engine.Delete(e.Ctx, zs.ID, "test", sandbox.CauseUser, "test")
	must(t, err)
	must(t, e.Engine.DeleteTemplate(e.Ctx, "hostimp")) // once zed's is gone
	// acme's sandbox of its own base does not hold the shared base: the
	// name resolves to acme's own for it.
	must(t, e.Engine.DeleteTemplate(e.Ctx, "base"))
	if got, err := e.Store.GetTenantTemplate(e.Ctx, "acme", "base"); err != nil || !slices.Equal(got.Layers, a.Layers) {
		t.Fatalf("acme's base after the host removed the shared one: %+v %v", got, err)
	}
	_, err = e.Engine.Delete(e.Ctx, sb.ID, "test", sandbox.CauseUser, "test")
	must(t, err)
	must(t, e.Engine.DeleteTemplate(acme, "base"))
	if _, err := e.Store.GetTenantTemplate(e.Ctx, "acme", "base"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("acme's base after removal: %v", err)
	}
	// zed's template shares the layers: they stay for it.
	for _, l := range z.Layers {
		if !e.Images.HasLayer(l) {
			t.Fatalf("layer %s of zed's template went with acme's", l)
		}
	}
}
