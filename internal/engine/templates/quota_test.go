package templates_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/berth-sh/berth/internal/engine/enginetest"
	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/internal/image"
	"github.com/berth-sh/berth/internal/selftest/catalogue"
	"github.com/berth-sh/berth/internal/store"
)

// zeroLayerImage is catalogue.ZerosLayerImage, failing t on an error.
func zeroLayerImage(t *testing.T, file string, size int, forgeID string) v1.Image {
	t.Helper()
	img, _, err := catalogue.ZerosLayerImage(file, size, forgeID)
	if err != nil {
		t.Fatal(err)
	}
	return img
}

// gzipArchive writes img as a gzip-compressed docker-save archive: zeros
// make it a few KiB however large it unpacks.
func gzipArchive(t *testing.T, img v1.Image) string {
	t.Helper()
	b, err := catalogue.GzipDockerSave(img)
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "img.tar.gz")
	if err := os.WriteFile(p, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestTemplateStorageQuota: a tenant's template layers are charged to its
// storage quota as they unpack. An archive of a few KiB that unpacks past
// what is left is refused with quota_exceeded, leaving its usage, its
// templates and the layer store as they were; a template that fits counts
// in the usage the next import sees; re-importing its own layer costs
// nothing. Another tenant naming that layer's id over other bytes gets an
// invalid-archive error and nothing of it; with the real bytes it is
// charged in full, exactly as if the layer were new.
func TestTemplateStorageQuota(t *testing.T) {
	e := newEnv(t, enginetest.WithImages())
	const kib = 1 << 10
	e.SetQuota(store.TenantQuota{Tenant: "acme", MaxStorage: 1 << 20})
	acme := e.As("acme")
	one := zeroLayerImage(t, "one", 600*kib, "")
	oneID := diffIDOf(t, one)

	tpl, err := e.Upload(acme, "one", gzipArchive(t, one))
	if err != nil {
		t.Fatalf("an import that fits: %v", err)
	}
	if tpl.Size != 600*kib {
		t.Fatalf("template size %d, want %d", tpl.Size, 600*kib)
	}
	usage := func(tenant string) int64 {
		t.Helper()
		u, err := e.Engine.TenantUsage(e.Ctx, tenant, "")
		if err != nil {
			t.Fatal(err)
		}
		return u.Storage
	}
	// Its file and a tar header for its one member.
	const billed = 600*kib + image.EntryCharge
	if u := usage("acme"); u != billed {
		t.Fatalf("usage after the first import: %d, want its layer's %d", u, billed)
	}

	two := zeroLayerImage(t, "two", 600*kib, "")
	archive := gzipArchive(t, two)
	if st, err := os.Stat(archive); err != nil || st.Size() > 64*kib {
		t.Fatalf("the archive is not small: %v %v", st.Size(), err)
	}
	_, err = e.Upload(acme, "two", archive)
	if !errors.Is(err, errdefs.ErrQuota) || !strings.Contains(err.Error(), "tenant acme: 600.5 KiB of 1.0 MiB storage in use") {
		t.Fatalf("an import past the quota: %v, want quota_exceeded naming the storage", err)
	}
	if code, status := errdefs.Code(err); code != "quota_exceeded" || status != 429 {
		t.Fatalf("code %s %d", code, status)
	}
	if u := usage("acme"); u != billed {
		t.Fatalf("usage after the refusal: %d, want %d", u, billed)
	}
	if _, err := e.Store.GetTenantTemplate(e.Ctx, "acme", "two"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("the refused template was recorded: %v", err)
	}
	if e.Images.HasLayer(diffIDOf(t, two)) {
		t.Fatal("the refused layer is in the store")
	}
	// Its own layer again: free, so it fits with 424 KiB left.
	if _, err := e.Upload(acme, "again", gzipArchive(t, one)); err != nil {
		t.Fatalf("re-importing its own layer: %v", err)
	}
	if u := usage("acme"); u != billed {
		t.Fatalf("usage after re-importing its own layer: %d, want it counted once", u)
	}

	// zed names acme's layer over other bytes.
	e.SetQuota(store.TenantQuota{Tenant: "zed", MaxStorage: 512 * kib})
	zed := e.As("zed")
	_, err = e.Upload(zed, "stolen", gzipArchive(t, zeroLayerImage(t, "guess", 8, oneID)))
	if !errors.Is(err, errdefs.ErrInvalid) || !strings.Contains(err.Error(), "diffID mismatch") {
		t.Fatalf("zed forging acme's layer id: %v, want a diffID mismatch", err)
	}
	if _, err := e.Store.GetTenantTemplate(e.Ctx, "zed", "stolen"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("the forged template was recorded: %v", err)
	}
	if !e.Images.HasLayer(oneID) {
		t.Fatal("acme's layer went with zed's failed import")
	}
	// With acme's real bytes zed pays for the layer like any new one: its
	// 512 KiB do not hold 600 (the cache does not make it free).
	_, err = e.Upload(zed, "same", gzipArchive(t, one))
	if !errors.Is(err, errdefs.ErrQuota) {
		t.Fatalf("zed importing a cached layer past its quota: %v, want quota_exceeded", err)
	}
	if u := usage("zed"); u != 0 {
		t.Fatalf("zed's usage %d, want 0", u)
	}
}

func diffIDOf(t *testing.T, img v1.Image) string {
	t.Helper()
	cfg, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	return cfg.RootFS.DiffIDs[0].String()
}

// TestTemplateStorageQuotaConcurrent: two imports of one tenant that each
// fit its quota but not together, run at once: exactly one is recorded,
// the other refused with quota_exceeded (imports of a tenant take turns,
// so both cannot spend the same room).
func TestTemplateStorageQuotaConcurrent(t *testing.T) {
	e := newEnv(t, enginetest.WithImages())
	e.SetQuota(store.TenantQuota{Tenant: "acme", MaxStorage: 1 << 20})
	acme := e.As("acme")
	archives := []string{gzipArchive(t, zeroLayerImage(t, "x", 600<<10, "")), gzipArchive(t, zeroLayerImage(t, "y", 600<<10, ""))}
	errs := make(chan error, 2)
	for i, p := range archives {
		go func() {
			_, err := e.Upload(acme, []string{"x", "y"}[i], p)
			errs <- err
		}()
	}
	ok, refused := 0, 0
	for range 2 {
		switch err := <-errs; {
		case err == nil:
			ok++
		case errors.Is(err, errdefs.ErrQuota):
			refused++
		default:
			t.Errorf("unexpected: %v", err)
		}
	}
	if ok != 1 || refused != 1 {
		t.Fatalf("%d recorded, %d refused; want 1 and 1", ok, refused)
	}
	if u, err := e.Engine.TenantUsage(e.Ctx, "acme", ""); err != nil || u.Storage != 600<<10+image.EntryCharge {
		t.Fatalf("usage %d %v, want one layer's", u.Storage, err)
	}
}
