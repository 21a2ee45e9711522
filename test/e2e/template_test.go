package e2e

import (
	"archive/tar"
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/berth-sh/berth/api"
)

// busyboxImage builds a small image from the host's static busybox: no
// download needed.
func busyboxImage(t *testing.T) v1.Image {
	t.Helper()
	bb, err := os.ReadFile("/bin/busybox")
	if err != nil {
		t.Fatalf("the e2e suite needs busybox-static (/bin/busybox: %v): install it with scripts/install-deps.sh (make deps), "+
			"or apt-get install busybox-static", err)
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	add := func(h *tar.Header, body []byte) {
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		tw.Write(body)
	}
	for _, dir := range []string{"bin/", "etc/", "tmp/", "root/", "data/"} {
		add(&tar.Header{Name: dir, Typeflag: tar.TypeDir, Mode: 0o755}, nil)
	}
	add(&tar.Header{Name: "bin/busybox", Typeflag: tar.TypeReg, Mode: 0o755, Size: int64(len(bb))}, bb)
	for _, l := range []string{"sh", "cat", "echo", "ls", "id", "sleep", "mkdir", "rm"} {
		add(&tar.Header{Name: "bin/" + l, Typeflag: tar.TypeSymlink, Linkname: "busybox", Mode: 0o777}, nil)
	}
	msg := []byte("from-image\n")
	add(&tar.Header{Name: "data/hello", Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(len(msg))}, msg)
	add(&tar.Header{Name: "etc/passwd", Typeflag: tar.TypeReg, Mode: 0o644, Size: 24}, []byte("root:x:0:0::/root:/bin/sh"[:24]))
	tw.Close()
	data := buf.Bytes()
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(data)), nil })
	if err != nil {
		t.Fatal(err)
	}
	img, err := mutate.AppendLayers(empty.Image, layer)
	if err != nil {
		t.Fatal(err)
	}
	cfg, _ := img.ConfigFile()
	cfg = cfg.DeepCopy()
	cfg.Config.Env = []string{"PATH=/bin", "FROM_IMAGE=yes"}
	cfg.Config.WorkingDir = "/data"
	img, err = mutate.ConfigFile(img, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return img
}

func TestTemplateImportAndBuild(t *testing.T) {
	parallel(t)
	d := startDaemon(t)
	ctx := context.Background()
	img := busyboxImage(t)
	dir := t.TempDir()
	// A docker-save tarball, uploaded by the CLI.
	tarPath := filepath.Join(dir, "bb.tar")
	ref, _ := name.ParseReference("example.test/busybox:1")
	if err := tarball.WriteToFile(tarPath, ref, img); err != nil {
		t.Fatal(err)
	}
	if _, e, code := d.cli("template", "import", "bb", tarPath); code != 0 {
		t.Fatalf("import tarball: %s", e)
	}
	// An OCI layout directory, read by the daemon.
	lp, err := layout.Write(filepath.Join(dir, "oci"), empty.Index)
	if err != nil {
		t.Fatal(err)
	}
	if err := lp.AppendImage(img); err != nil {
		t.Fatal(err)
	}
	if _, e, code := d.cli("template", "import", "bb-oci", filepath.Join(dir, "oci")); code != 0 {
		t.Fatalf("import layout: %s", e)
	}
	out, _, _ := d.cli("template", "ls", "-o", "json")
	var ts []api.Template
	jsonDecode(t, out, &ts)
	byName := map[string]api.Template{}
	for _, tt := range ts {
		byName[tt.Name] = tt
	}
	if len(byName["bb"].Layers) != 1 || byName["bb"].Layers[0] != byName["bb-oci"].Layers[0] || !byName["base"].Builtin {
		t.Fatalf("templates: %+v", ts)
	}
	// A sandbox from the imported image sees its files, env and workdir.
	out, e, code := d.cli("run", "--template", "bb", "--", "sh", "-c", "cat hello; echo $FROM_IMAGE; id -u")
	if code != 0 || out != "from-image\nyes\n0\n" {
		t.Fatalf("run in imported template: %q %q", out, e)
	}
	// Writes to the image are the sandbox's own: the next one starts clean.
	d.cli("run", "--template", "bb", "--", "sh", "-c", "echo changed > /data/hello")
	out, _, _ = d.cli("run", "--template", "bb", "--", "cat", "/data/hello")
	if out != "from-image\n" {
		t.Fatalf("template layer was modified by a sandbox: %q", out)
	}
	// Build: setup runs once, its result is a new layer.
	out, e, code = d.cli("template", "build", "bb-built", "--from", "bb", "--run", "mkdir -p /opt && echo built > /opt/marker", "--run", "rm /data/hello")
	if code != 0 {
		t.Fatalf("build: %s %s", out, e)
	}
	out, e, code = d.cli("run", "--template", "bb-built", "--", "sh", "-c", "cat /opt/marker; ls /data")
	if code != 0 || out != "built\n" {
		t.Fatalf("run in built template: %q %q", out, e)
	}
	// Removing a template in use is refused; unused, it goes. First the
	// one-shot runs' sandboxes must be gone (a run returns before its
	// sandbox's teardown ends), so the refusal names this one.
	for i := 0; ; i++ {
		live, err := d.c.ListSandboxes(ctx, false)
		if err == nil && len(live) == 0 {
			break
		}
		if i == 300 {
			t.Fatalf("the runs' sandboxes are still there: %+v %v", live, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	sb, err := d.c.CreateSandbox(ctx, api.CreateSandboxRequest{Template: "bb-built"})
	if err != nil {
		t.Fatal(err)
	}
	if _, e, code := d.cli("template", "rm", "bb-built"); code == 0 || !strings.Contains(e, sb.ID) {
		t.Fatalf("rm of a template in use: code %d %q", code, e)
	}
	d.c.DeleteSandbox(ctx, sb.ID, true)
	if _, e, code := d.cli("template", "rm", "bb-built"); code != 0 {
		t.Fatalf("template rm: %s", e)
	}
	// A failing build step fails the build and leaves no template.
	_, _, code = d.cli("template", "build", "broken", "--from", "bb", "--run", "exit 7")
	if code == 0 {
		t.Fatal("failing build succeeded")
	}
	if _, err := d.c.GetTemplate(ctx, "broken"); err == nil {
		t.Fatal("failed build left a template")
	}
}
