package e2e

import (
	"bytes"
	"context"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/client"
	"github.com/berth-sh/berth/internal/auth"
	"github.com/berth-sh/berth/internal/image"
	"github.com/berth-sh/berth/internal/selftest/catalogue"
)

// zerosImage is catalogue.ZerosLayerImage, failing t on an error.
func zerosImage(t *testing.T, file string, size int, claim string) (v1.Image, string) {
	t.Helper()
	img, id, err := catalogue.ZerosLayerImage(file, size, claim)
	if err != nil {
		t.Fatal(err)
	}
	return img, id
}

// gzipDockerArchive is catalogue.GzipDockerSave, failing t on an error.
func gzipDockerArchive(t *testing.T, img v1.Image) []byte {
	t.Helper()
	b, err := catalogue.GzipDockerSave(img)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// storeEntries lists the daemon's layer dirs and its image scratch space
// (unpacks in progress), to show an import left nothing behind.
func storeEntries(t *testing.T, d *daemon) (layers, scratch []string) {
	t.Helper()
	root := filepath.Join(d.dataDir, "images")
	ents, err := os.ReadDir(filepath.Join(root, "layers"))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		layers = append(layers, e.Name())
	}
	works, err := filepath.Glob(filepath.Join(root, "tmp", "s-*", "*"))
	if err != nil {
		t.Fatal(err)
	}
	return layers, works
}

// TestTemplateImportQuota: template imports over TCP with tenants' keys
// (issue #30). (a) A gzip archive of a few KiB that unpacks to 32 MiB,
// under a storage quota of 8 MiB, is refused with 429 quota_exceeded; the
// tenant's usage is unchanged, no template is recorded and no layer (nor
// scratch) is left in the store. (b) A 5 MiB import that fits is counted
// in the usage, so a second 5 MiB import is refused naming it. (c) Tenant
// b uploading an archive whose config names a's layer id over other bytes
// gets 400 (the bytes do not hash to it) and no template: a's layer is
// never handed over.
func TestTemplateImportQuota(t *testing.T) {
	parallel(t)
	addr := freeAddr(t)
	d := startDaemonWith(t, "--insecure-listen", addr)
	ctx := context.Background()
	scopes := []auth.Scope{auth.ScopeSandboxesRead, auth.ScopeSandboxesWrite, auth.ScopeTemplates}
	a, err := client.New("http://"+addr, tenantKey(t, d, "a", scopes...))
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := client.New("http://"+addr, tenantKey(t, d, "b", scopes...))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	t.Cleanup(func() {
		for _, c := range []*client.Client{a, b} {
			for _, n := range []string{"fits", "bomb", "second", "stolen"} {
				c.DeleteTemplate(ctx, n)
			}
		}
	})
	if _, err := d.c.SetQuota(ctx, "a", api.QuotaRequest{MaxStorage: 8 << 20}); err != nil {
		t.Fatal(err)
	}
	usage := func() int64 {
		t.Helper()
		q, err := d.c.GetQuota(ctx, "a")
		if err != nil || q.Usage == nil {
			t.Fatalf("a's quota: %+v %v", q, err)
		}
		return q.Usage.Storage
	}
	upload := func(c *client.Client, tname string, archive []byte) (*api.Template, error) {
		return c.UploadTemplateArchive(ctx, tname, bytes.NewReader(archive))
	}
	hasTemplate := func(c *client.Client, tname string) bool {
		t.Helper()
		ts, err := c.ListTemplates(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return slices.ContainsFunc(ts, func(x api.Template) bool { return x.Name == tname })
	}
	layersBefore, _ := storeEntries(t, d)
	before := usage()

	// (a) 32 MiB of zeros in a few KiB, under 8 MiB.
	t.Run("bomb", func(t *testing.T) {
		bombImg, bombID := zerosImage(t, "bomb", 32<<20, "")
		bomb := gzipDockerArchive(t, bombImg)
		if len(bomb) > 256<<10 {
			t.Fatalf("the archive is %d bytes, not small", len(bomb))
		}
		_, err = upload(a, "bomb", bomb)
		ce := wantStatus(t, "an archive unpacking past the quota", err, http.StatusTooManyRequests, "quota_exceeded")
		if !strings.Contains(ce.Message, "tenant a:") || !strings.Contains(ce.Message, "storage") {
			t.Errorf("refusal message %q does not name the tenant's storage", ce.Message)
		}
		if u := usage(); u != before {
			t.Errorf("a's storage usage %d after the refusal, want %d", u, before)
		}
		if hasTemplate(a, "bomb") {
			t.Error("the refused template is listed")
		}
		layers, scratch := storeEntries(t, d)
		if !slices.Equal(layers, layersBefore) || len(scratch) != 0 {
			t.Errorf("after the refusal: layers %v (before %v), scratch %v", layers, layersBefore, scratch)
		}
		if slices.Contains(layers, strings.TrimPrefix(bombID, "sha256:")) {
			t.Error("the refused layer is in the store")
		}
	})

	// (b) 5 MiB fits and is counted; 5 MiB more does not fit.
	fitsImg, fitsID := zerosImage(t, "fits", 5<<20, "")
	t.Run("second", func(t *testing.T) {
		if _, err := upload(a, "fits", gzipDockerArchive(t, fitsImg)); err != nil {
			t.Fatalf("an import that fits: %v", err)
		}
		// The file and a tar header for its one member.
		if u := usage(); u != before+5<<20+image.EntryCharge {
			t.Fatalf("a's storage usage %d after a 5 MiB import, want %d", u, before+5<<20+image.EntryCharge)
		}
		secondImg, _ := zerosImage(t, "second", 5<<20, "")
		_, err = upload(a, "second", gzipDockerArchive(t, secondImg))
		ce := wantStatus(t, "a second import past the quota", err, http.StatusTooManyRequests, "quota_exceeded")
		if !strings.Contains(ce.Message, "5.0 MiB of 8.0 MiB storage in use") {
			t.Errorf("refusal message %q does not count the first import", ce.Message)
		}
		if hasTemplate(a, "second") || usage() != before+5<<20+image.EntryCharge {
			t.Error("the refused second import left a template or usage")
		}
	})

	// (c) b names a's layer id over bytes of its own.
	t.Run("forged-layer", func(t *testing.T) {
		if !hasTemplate(a, "fits") {
			t.Fatal("a has no template of the layer to forge")
		}
		forged, _ := zerosImage(t, "guess", 16, fitsID)
		_, err = upload(b, "stolen", gzipDockerArchive(t, forged))
		wantStatus(t, "b naming a's layer over other bytes", err, http.StatusBadRequest, "invalid_argument")
		if hasTemplate(b, "stolen") {
			t.Fatal("b got a template of a's layer")
		}
		if layers, _ := storeEntries(t, d); !slices.Contains(layers, strings.TrimPrefix(fitsID, "sha256:")) {
			t.Fatal("a's layer went with b's failed import")
		}
	})
}
