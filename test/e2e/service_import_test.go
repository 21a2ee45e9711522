package e2e

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/berth-sh/berth/api"
)

// berth template import --service-from-image: the image's entrypoint and
// cmd become the template's service, which every sandbox of it runs.
func TestTemplateImportService(t *testing.T) {
	parallel(t)
	d := startDaemon(t)
	ctx := context.Background()
	img := busyboxImage(t)
	cfg, _ := img.ConfigFile()
	cfg = cfg.DeepCopy()
	cfg.Config.Entrypoint = []string{"sh", "-c"}
	cfg.Config.Cmd = []string{"echo service-up; exec sleep 600"}
	img, err := mutate.ConfigFile(img, cfg)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	lp, err := layout.Write(filepath.Join(dir, "oci"), empty.Index)
	if err != nil {
		t.Fatal(err)
	}
	if err := lp.AppendImage(img); err != nil {
		t.Fatal(err)
	}
	if _, e, code := d.cli("template", "import", "svcimg", filepath.Join(dir, "oci"), "--service-from-image", "--service-restart", "always"); code != 0 {
		t.Fatalf("import with a service: %s", e)
	}
	// A tarball upload cannot carry one: refused before anything is sent.
	tarPath := filepath.Join(dir, "bb.tar")
	ref, _ := name.ParseReference("example.test/busybox:1")
	if err := tarball.WriteToFile(tarPath, ref, img); err != nil {
		t.Fatal(err)
	}
	if _, e, code := d.cli("template", "import", "svctar", tarPath, "--service", "sleep 1"); code == 0 || !strings.Contains(e, "service") {
		t.Fatalf("service on an uploaded tarball: %d %q", code, e)
	}
	sb, err := d.c.CreateSandbox(ctx, api.CreateSandboxRequest{Template: "svcimg"})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the image's service", func() bool {
		p, ok := procNamed(procList(t, d, sb.ID), "service")
		return ok && p.State == "running" && strings.Join(p.Argv, " ") == "sh -c echo service-up; exec sleep 600" && p.Restart == "always"
	})
	out, _, _ := d.cli("logs", sb.ID, "service")
	if out != "service-up\n" {
		t.Fatalf("service output %q", out)
	}
	if _, err := d.c.DeleteSandbox(ctx, sb.ID, true); err != nil {
		t.Fatal(err)
	}
	assertDoctorClean(t, d)
}
