package templates_test

import (
	"errors"
	"slices"
	"testing"

	"github.com/berth-sh/berth/internal/engine"
	"github.com/berth-sh/berth/internal/engine/enginetest"
	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/internal/store"
)

// TestTenantTemplateResolution: a create names a template by name; the
// caller's own template of that name wins, then the shared catalogue's;
// another tenant's template is never found. A tenant's own template
// shadowing a pooled shared name never claims the shared pool's members.
func TestTenantTemplateResolution(t *testing.T) {
	e := newEnv(t)
	enginetest.Must(t, e.Store.PutTemplate(e.Ctx, &store.Template{Tenant: "acme", Name: "base", Layers: []string{enginetest.OwnLayer}, Source: "test", CreatedAt: e.Clock.Now()}))
	enginetest.Must(t, e.Store.PutTemplate(e.Ctx, &store.Template{Tenant: "acme", Name: "mine", Layers: []string{enginetest.OwnLayer}, Source: "test", CreatedAt: e.Clock.Now()}))
	_, err := e.Engine.SetPool(e.Ctx, "base", 1)
	enginetest.Must(t, err)
	member := e.WaitPoolMember()

	own, err := e.CreateAs("acme", engine.CreateRequest{Template: "base"})
	enginetest.Must(t, err)
	if own.ID == member.ID || !slices.Equal(own.Spec.Layers, []string{enginetest.OwnLayer}) || own.Tenant != "acme" {
		t.Fatalf("acme's create of base = %s layers %v tenant %q; want its own template, not pool member %s",
			own.ID, own.Spec.Layers, own.Tenant, member.ID)
	}
	if got := e.Get(member.ID); got.Tenant != "" || got.Spec.Pool != "base" {
		t.Fatalf("the shared pool member changed: tenant %q pool %q", got.Tenant, got.Spec.Pool)
	}
	shared, err := e.CreateAs("zed", engine.CreateRequest{Template: "base"})
	enginetest.Must(t, err)
	if shared.ID != member.ID || !slices.Equal(shared.Spec.Layers, []string{enginetest.Layer}) || shared.Tenant != "zed" {
		t.Fatalf("zed's create of base = %s layers %v tenant %q; want the shared pool member %s",
			shared.ID, shared.Spec.Layers, shared.Tenant, member.ID)
	}
	if _, err := e.CreateAs("zed", engine.CreateRequest{Template: "mine"}); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("zed's create of acme's template: %v, want not found", err)
	}
	if _, err := e.CreateAs("", engine.CreateRequest{Template: "mine"}); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("the host's create of acme's template: %v, want not found", err)
	}
	if _, err := e.CreateAs("acme", engine.CreateRequest{Template: "mine"}); err != nil {
		t.Fatalf("acme's create of its own template: %v", err)
	}
}
