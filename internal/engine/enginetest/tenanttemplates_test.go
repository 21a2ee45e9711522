package enginetest_test

import (
	"errors"
	"slices"
	"testing"

	"github.com/berth-sh/berth/internal/engine"
	"github.com/berth-sh/berth/internal/engine/enginetest"
	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/internal/store"
)

// ownLayer is the (fake) layer of acme's own "base" template.
const ownLayer = "sha256:00000000000000000000000000000000000000000000000000000000000000a1"

// TestTenantTemplateResolution: a create names a template by name; the
// caller's own template of that name wins, then the shared catalogue's;
// another tenant's template is never found. A tenant's own template
// shadowing a pooled shared name never claims the shared pool's members.
func TestTenantTemplateResolution(t *testing.T) {
	e := newEnv(t)
	must(t, e.Store.PutTemplate(e.Ctx, &store.Template{Tenant: "acme", Name: "base", Layers: []string{ownLayer}, Source: "test", CreatedAt: e.Clock.Now()}))
	must(t, e.Store.PutTemplate(e.Ctx, &store.Template{Tenant: "acme", Name: "mine", Layers: []string{ownLayer}, Source: "test", CreatedAt: e.Clock.Now()}))
	_, err := e.Engine.SetPool(e.Ctx, "base", 1)
	must(t, err)
	member := e.waitPoolMember()

	own, err := e.createAs("acme", engine.CreateRequest{Template: "base"})
	must(t, err)
	if own.ID == member.ID || !slices.Equal(own.Spec.Layers, []string{ownLayer}) || own.Tenant != "acme" {
		t.Fatalf("acme's create of base = %s layers %v tenant %q; want its own template, not pool member %s",
			own.ID, own.Spec.Layers, own.Tenant, member.ID)
	}
	if got := e.Get(member.ID); got.Tenant != "" || got.Spec.Pool != "base" {
		t.Fatalf("the shared pool member changed: tenant %q pool %q", got.Tenant, got.Spec.Pool)
	}
	shared, err := e.createAs("zed", engine.CreateRequest{Template: "base"})
	must(t, err)
	if shared.ID != member.ID || !slices.Equal(shared.Spec.Layers, []string{enginetest.Layer}) || shared.Tenant != "zed" {
		t.Fatalf("zed's create of base = %s layers %v tenant %q; want the shared pool member %s",
			shared.ID, shared.Spec.Layers, shared.Tenant, member.ID)
	}
	if _, err := e.createAs("zed", engine.CreateRequest{Template: "mine"}); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("zed's create of acme's template: %v, want not found", err)
	}
	if _, err := e.createAs("", engine.CreateRequest{Template: "mine"}); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("the host's create of acme's template: %v, want not found", err)
	}
	if _, err := e.createAs("acme", engine.CreateRequest{Template: "mine"}); err != nil {
		t.Fatalf("acme's create of its own template: %v", err)
	}
}
