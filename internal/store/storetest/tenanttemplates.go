package storetest

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/internal/store"
)

// testTenantTemplates: names are unique per tenant; a tenant's own template
// shadows the shared catalogue's of that name for that tenant only; no
// tenant reaches another tenant's template by any method; the layers of
// every tenant's templates count as in use.
func testTenantTemplates(t *testing.T, s store.Store) {
	ctx := context.Background()
	put := func(tenant, name string, layers ...string) {
		t.Helper()
		must(t, s.PutTemplate(ctx, &store.Template{Tenant: tenant, Name: name, Layers: layers, Source: "test:" + tenant, CreatedAt: at(0)}))
	}
	put("", "py", "sha256:shared")
	put("a", "py", "sha256:a-own", "sha256:shared")
	put("a", "tool", "sha256:a-tool")
	put("b", "tool", "sha256:b-tool")

	// The same name in two tenants and the catalogue: three rows.
	for _, tc := range []struct{ tenant, name, source string }{
		{"", "py", "test:"}, {"a", "py", "test:a"}, {"a", "tool", "test:a"}, {"b", "tool", "test:b"},
	} {
		got, err := s.GetTenantTemplate(ctx, tc.tenant, tc.name)
		if err != nil || got.Tenant != tc.tenant || got.Source != tc.source {
			t.Fatalf("GetTenantTemplate(%q, %q) = %+v, %v", tc.tenant, tc.name, got, err)
		}
	}
	// Exact lookups never fall back nor cross.
	if _, err := s.GetTenantTemplate(ctx, "b", "py"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("b's exact py: %v, want not found", err)
	}
	if _, err := s.GetTemplate(ctx, "tool"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("shared tool: %v, want not found (only tenants have one)", err)
	}
	// Resolution: own first, then shared, never another tenant's.
	for _, tc := range []struct{ tenant, name, wantTenant string }{
		{"a", "py", "a"}, {"b", "py", ""}, {"", "py", ""}, {"a", "tool", "a"}, {"b", "tool", "b"},
	} {
		got, err := s.ResolveTemplate(ctx, tc.tenant, tc.name)
		if err != nil || got.Tenant != tc.wantTenant {
			t.Fatalf("ResolveTemplate(%q, %q) = %+v, %v; want tenant %q", tc.tenant, tc.name, got, err, tc.wantTenant)
		}
	}
	for _, tc := range []struct{ tenant, name string }{{"c", "tool"}, {"", "tool"}, {"b", "nope"}} {
		if got, err := s.ResolveTemplate(ctx, tc.tenant, tc.name); !errors.Is(err, errdefs.ErrNotFound) {
			t.Fatalf("ResolveTemplate(%q, %q) = %+v, %v; want not found", tc.tenant, tc.name, got, err)
		}
	}
	// Replacing is per (tenant, name): a's py changes, the shared one not.
	put("a", "py", "sha256:a-own2")
	if got, _ := s.GetTemplate(ctx, "py"); got == nil || !slices.Equal(got.Layers, []string{"sha256:shared"}) {
		t.Fatalf("shared py after a's replace: %+v", got)
	}
	if got, _ := s.GetTenantTemplate(ctx, "a", "py"); got == nil || !slices.Equal(got.Layers, []string{"sha256:a-own2"}) {
		t.Fatalf("a's py after replace: %+v", got)
	}
	// Lists: what each tenant sees (its own, then the shared ones it does
	// not shadow; each name once), the catalogue's alone; paged by name.
	names := func(tenant string, limit int) []string {
		t.Helper()
		var out []string
		p := store.Page{Limit: limit}
		for {
			ts, next, err := s.ListTenantTemplates(ctx, tenant, p)
			must(t, err)
			for _, x := range ts {
				if x.Tenant != tenant && x.Tenant != "" {
					t.Fatalf("list of %q has %q's %s", tenant, x.Tenant, x.Name)
				}
				out = append(out, x.Tenant+"/"+x.Name)
			}
			if next == "" {
				return out
			}
			p.Cursor = next
		}
	}
	if got := names("a", 1); !slices.Equal(got, []string{"a/py", "a/tool"}) {
		t.Fatalf("a's templates = %v", got)
	}
	if got := names("b", 0); !slices.Equal(got, []string{"/py", "b/tool"}) {
		t.Fatalf("b's templates = %v", got)
	}
	if got := names("c", 1); !slices.Equal(got, []string{"/py"}) {
		t.Fatalf("c's templates = %v", got)
	}
	if got := names("", 1); !slices.Equal(got, []string{"/py"}) {
		t.Fatalf("the shared catalogue's templates = %v", got)
	}
	shared, _, err := s.ListTemplates(ctx, store.Page{})
	must(t, err)
	if len(shared) != 1 || shared[0].Name != "py" || shared[0].Tenant != "" {
		t.Fatalf("shared catalogue = %+v", shared)
	}
	// Layers in use: every tenant's, each once.
	put("b", "dup", "sha256:shared")
	layers, err := s.TemplateLayers(ctx)
	must(t, err)
	slices.Sort(layers)
	if want := []string{"sha256:a-own2", "sha256:a-tool", "sha256:b-tool", "sha256:shared"}; !slices.Equal(layers, want) {
		t.Fatalf("TemplateLayers = %v, want %v", layers, want)
	}
	// Deletes are per tenant: b cannot delete a's tool, nor the shared py.
	if err := s.DeleteTenantTemplate(ctx, "b", "py"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("b deletes py: %v, want not found", err)
	}
	must(t, s.DeleteTenantTemplate(ctx, "b", "tool"))
	if _, err := s.GetTenantTemplate(ctx, "a", "tool"); err != nil {
		t.Fatalf("a's tool after b's delete: %v", err)
	}
	must(t, s.DeleteTenantTemplate(ctx, "b", "dup"))
	must(t, s.DeleteTenantTemplate(ctx, "a", "py"))
	// The shared layer is still referenced by the catalogue's py.
	layers, err = s.TemplateLayers(ctx)
	must(t, err)
	if !slices.Contains(layers, "sha256:shared") || slices.Contains(layers, "sha256:b-tool") {
		t.Fatalf("TemplateLayers after deletes = %v", layers)
	}
	if got, err := s.ResolveTemplate(ctx, "a", "py"); err != nil || got.Tenant != "" {
		t.Fatalf("a's py after delete resolves to %+v, %v; want the shared one", got, err)
	}
	must(t, s.DeleteTemplate(ctx, "py"))
	if err := s.DeleteTemplate(ctx, "py"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("second delete: %v", err)
	}
	must(t, s.DeleteTenantTemplate(ctx, "a", "tool"))
	if layers, err := s.TemplateLayers(ctx); err != nil || len(layers) != 0 {
		t.Fatalf("TemplateLayers of no templates = %v, %v", layers, err)
	}
}

// testTenantBuildCache: an entry one tenant's build made is never a hit
// for another tenant's identical step.
func testTenantBuildCache(t *testing.T, s store.Store) {
	ctx := context.Background()
	must(t, s.PutBuildCache(ctx, "a", "step", "sha256:a"))
	if _, err := s.GetBuildCache(ctx, "b", "step"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("b's lookup of a's key: %v, want not found", err)
	}
	if _, err := s.GetBuildCache(ctx, "", "step"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("host's lookup of a's key: %v, want not found", err)
	}
	must(t, s.PutBuildCache(ctx, "b", "step", "sha256:b"))
	must(t, s.PutBuildCache(ctx, "a", "step", "sha256:a2"))
	for tenant, want := range map[string]string{"a": "sha256:a2", "b": "sha256:b"} {
		if l, err := s.GetBuildCache(ctx, tenant, "step"); err != nil || l != want {
			t.Fatalf("%s's entry = %q, %v; want %s", tenant, l, err, want)
		}
	}
}
