package templates_test

import (
	"errors"
	"path/filepath"
	"slices"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/berth-sh/berth/internal/engine"
	"github.com/berth-sh/berth/internal/engine/enginetest"
	"github.com/berth-sh/berth/internal/engine/templates"
	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/internal/sandbox"
	"github.com/berth-sh/berth/internal/store"
)

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

// TestTenantTemplateChanges: a tenant uploads its own templates (names
// per tenant, shadowing the shared one), never imports from the host's
// paths or (by default) registries, and removes only its own templates,
// not while a sandbox of its uses one; the host's removal of a shared
// name is not held up by a tenant's sandbox of its own template of that
// name.
func TestTenantTemplateChanges(t *testing.T) {
	e := newEnv(t, enginetest.WithImages())
	acme, zed := e.As("acme"), e.As("zed")
	arch := writeArchive(t)
	a, err := e.Upload(acme, "base", arch)
	if err != nil || a.Tenant != "acme" || a.Source != "upload" {
		t.Fatalf("acme's upload: %+v %v", a, err)
	}
	if _, err := e.Upload(acme, "base", arch); !errors.Is(err, errdefs.ErrConflict) {
		t.Fatalf("acme's second base: %v, want conflict", err)
	}
	z, err := e.Upload(zed, "zonly", arch)
	if err != nil || z.Tenant != "zed" {
		t.Fatalf("zed's upload: %+v %v", z, err)
	}
	ts, _, err := e.Engine.ListTemplates(acme, store.Page{})
	enginetest.Must(t, err)
	if len(ts) != 1 || ts[0].Name != "base" || ts[0].Tenant != "acme" {
		t.Fatalf("acme's templates: %+v, want its own base only", ts)
	}
	ts, _, err = e.Engine.ListTemplates(zed, store.Page{})
	enginetest.Must(t, err)
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
	sb, err := e.CreateAs("acme", engine.CreateRequest{Template: "base"})
	enginetest.Must(t, err)
	if !slices.Equal(sb.Spec.Layers, a.Layers) {
		t.Fatalf("acme's create of base has layers %v, want its own %v", sb.Spec.Layers, a.Layers)
	}
	if err := e.Engine.DeleteTemplate(acme, "base"); !errors.Is(err, errdefs.ErrConflict) {
		t.Fatalf("acme removing its base in use: %v, want conflict", err)
	}
	// zed's sandbox of the shared hostimp holds it for the host.
	zs, err := e.CreateAs("zed", engine.CreateRequest{Template: "hostimp"})
	enginetest.Must(t, err)
	if err := e.Engine.DeleteTemplate(e.Ctx, "hostimp"); !errors.Is(err, errdefs.ErrConflict) {
		t.Fatalf("the host removing hostimp used by zed: %v, want conflict", err)
	}
	_, err = e.Engine.Delete(e.Ctx, zs.ID, "test", sandbox.CauseUser, "test")
	enginetest.Must(t, err)
	enginetest.Must(t, e.Engine.DeleteTemplate(e.Ctx, "hostimp")) // once zed's is gone
	// acme's sandbox of its own base does not hold the shared base: the
	// name resolves to acme's own for it.
	enginetest.Must(t, e.Engine.DeleteTemplate(e.Ctx, "base"))
	if got, err := e.Store.GetTenantTemplate(e.Ctx, "acme", "base"); err != nil || !slices.Equal(got.Layers, a.Layers) {
		t.Fatalf("acme's base after the host removed the shared one: %+v %v", got, err)
	}
	_, err = e.Engine.Delete(e.Ctx, sb.ID, "test", sandbox.CauseUser, "test")
	enginetest.Must(t, err)
	enginetest.Must(t, e.Engine.DeleteTemplate(acme, "base"))
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
