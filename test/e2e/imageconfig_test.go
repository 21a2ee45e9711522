package e2e

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/client"
)

// gnuTarUserImage is an image whose one layer the real GNU tar wrote (with
// its default blocking: zeros after the end marker up to a 10240-byte
// record), holding the host's static busybox, a passwd with user dev
// (1000) and /app; its config says USER 1000, WORKDIR /app and an env.
func gnuTarUserImage(t *testing.T) v1.Image {
	t.Helper()
	bb, err := os.ReadFile("/bin/busybox")
	if err != nil {
		t.Fatalf("the e2e suite needs busybox-static (/bin/busybox: %v): install it with scripts/install-deps.sh", err)
	}
	tarBin, err := exec.LookPath("tar")
	if err != nil {
		t.Fatal("the e2e suite needs GNU tar: install it with scripts/install-deps.sh")
	}
	src := t.TempDir()
	for _, d := range []string{"bin", "etc", "tmp", "root", "app", "proc", "dev", "sys"} {
		if err := os.MkdirAll(filepath.Join(src, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(filepath.Join(src, "tmp"), 0o1777); err != nil {
		t.Fatal(err)
	}
	files := map[string]string{
		"bin/busybox": string(bb),
		"etc/passwd":  "root:x:0:0:root:/root:/bin/sh\ndev:x:1000:1000:dev:/app:/bin/sh\n",
		"etc/group":   "root:x:0:\ndev:x:1000:\ntools:x:2000:dev\n",
	}
	for p, c := range files {
		mode := os.FileMode(0o644)
		if p == "bin/busybox" {
			mode = 0o755
		}
		if err := os.WriteFile(filepath.Join(src, p), []byte(c), mode); err != nil {
			t.Fatal(err)
		}
	}
	for _, l := range []string{"sh", "id", "pwd", "touch", "stat", "cat", "ls"} {
		if err := os.Symlink("busybox", filepath.Join(src, "bin", l)); err != nil {
			t.Fatal(err)
		}
	}
	layerPath := filepath.Join(t.TempDir(), "layer.tar")
	cmd := exec.Command(tarBin, "-C", src, "--owner=0", "--group=0", "--numeric-owner", "-cf", layerPath, ".")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("tar: %v: %s", err, out)
	}
	raw, err := os.ReadFile(layerPath)
	if err != nil {
		t.Fatal(err)
	}
	if len(raw)%10240 != 0 {
		t.Fatalf("tar wrote %d bytes: not GNU tar's 10240-byte records", len(raw))
	}
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write(raw)
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	blob := gz.Bytes()
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(blob)), nil })
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
	cfg.Config.WorkingDir = "/app"
	cfg.Config.User = "1000"
	cfg.Config.Entrypoint = []string{"/bin/sh"}
	cfg.Config.Cmd = []string{"-c", "id"}
	cfg.Config.ExposedPorts = map[string]struct{}{"8080/tcp": {}}
	cfg.Config.StopSignal = "SIGINT"
	if img, err = mutate.ConfigFile(img, cfg); err != nil {
		t.Fatal(err)
	}
	return img
}

func writeTestLayout(t *testing.T, img v1.Image) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "oci")
	lp, err := layout.Write(dir, empty.Index)
	if err != nil {
		t.Fatal(err)
	}
	if err := lp.AppendImage(img); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestImageConfigHonoured imports an image GNU tar made, with progress
// events in the import stream, and checks on runc and runsc that its
// USER, WORKDIR and env are the defaults of exec, a request's user wins,
// /workspace is writable by the default user and a create's --user is
// the new default; a layer whose diffID is wrong is refused naming the
// layer and both digests.
func TestImageConfigHonoured(t *testing.T) {
	parallel(t)
	d := startRunscDaemon(t)
	ctx := context.Background()
	img := gnuTarUserImage(t)
	dir := writeTestLayout(t, img)

	var events []api.ImportProgress
	tpl, err := d.c.ImportTemplateProgress(ctx, api.ImportTemplateRequest{Name: "gnu", Path: dir},
		func(p api.ImportProgress) { events = append(events, p) })
	if err != nil {
		t.Fatalf("import of a GNU tar layer: %v", err)
	}
	m, _ := img.Manifest()
	var done *api.ImportProgress
	for i := range events {
		if events[i].Done {
			done = &events[i]
		}
	}
	if len(events) < 2 || done == nil || done.Layer != 1 || done.Layers != 1 || done.Bytes != m.Layers[0].Size || done.Cached {
		t.Errorf("progress events %+v: want a start and a done of layer 1/1 having read %d bytes", events, m.Layers[0].Size)
	}
	if tpl.User != "1000" || tpl.Workdir != "/app" || strings.Join(tpl.Entrypoint, " ") != "/bin/sh" ||
		strings.Join(tpl.Cmd, " ") != "-c id" || strings.Join(tpl.ExposedPorts, ",") != "8080/tcp" || tpl.StopSignal != "SIGINT" {
		t.Errorf("template config = %+v", tpl)
	}
	out, _, code := d.cli("template", "inspect", "gnu")
	if code != 0 || !strings.Contains(out, "User:") || !strings.Contains(out, "8080/tcp (not published)") || !strings.Contains(out, "SIGINT") {
		t.Errorf("template inspect: %q", out)
	}
	// The CLI shows progress too (plain lines: stderr is no terminal).
	_, e, code := d.cli("template", "import", "gnu2", dir)
	if code != 0 || !strings.Contains(e, "layer 1/1") || !strings.Contains(e, "already present") {
		t.Errorf("CLI import: code %d, stderr %q: want a progress line of layer 1/1, already present", code, e)
	}

	for _, rt := range []string{"runc", "runsc"} {
		t.Run(rt, func(t *testing.T) {
			sb, err := d.c.CreateSandbox(ctx, api.CreateSandboxRequest{Template: "gnu", Runtime: rt})
			if err != nil {
				t.Fatal(err)
			}
			defer d.c.DeleteSandbox(ctx, sb.ID, true)
			if sb.User != "1000" {
				t.Errorf("sandbox user = %q, want the image's 1000", sb.User)
			}
			if got := sh(t, d, sb.ID, "id -u; id -G; pwd; echo $FROM_IMAGE"); got != "1000\n1000 2000\n/app\nyes" {
				t.Errorf("default exec: %q, want uid 1000 with groups 1000 2000 in /app with the image's env", got)
			}
			var o strings.Builder
			exit, err := d.c.Exec(ctx, sb.ID, api.ExecRequest{Cmd: []string{"id", "-u"}, User: "0"}, &o, io.Discard)
			if err != nil || exit.Code != 0 || strings.TrimSpace(o.String()) != "0" {
				t.Errorf("exec --user 0: %q %+v %v", o.String(), exit, err)
			}
			if got := sh(t, d, sb.ID, "touch /workspace/mine && stat -c '%u:%g' /workspace /workspace/mine"); got != "1000:1000\n1000:1000" {
				t.Errorf("/workspace for the default user: %q, want it and a new file owned 1000:1000", got)
			}
			// The CLI's --user is the new default and owns /workspace.
			id, e, code := d.cli("create", "--template", "gnu", "--runtime", rt, "--user", "dev:tools")
			if code != 0 {
				t.Fatalf("create --user: %s", e)
			}
			id = strings.TrimSpace(id)
			defer d.c.DeleteSandbox(ctx, id, true)
			if got := sh(t, d, id, "id -u; id -g; touch /workspace/x && stat -c '%u:%g' /workspace"); got != "1000\n2000\n1000:2000" {
				t.Errorf("create --user dev:tools: %q", got)
			}
			// A user the sandbox does not know fails the create, 4xx.
			_, err = d.c.CreateSandbox(ctx, api.CreateSandboxRequest{Template: "gnu", Runtime: rt, User: "nosuchuser"})
			var ce *client.Error
			if err == nil || !asClientError(err, &ce) || ce.Status/100 != 4 || !strings.Contains(err.Error(), "nosuchuser") {
				t.Errorf("create with an unknown user: %v, want a 4xx naming it", err)
			}
		})
	}

	// An image whose /workspace is a symlink to /etc: giving /workspace
	// to the default user must not follow it and hand /etc to that user.
	// The create is refused, and as root the image's /etc is root's.
	linkTar := filepath.Join(t.TempDir(), "link.tar")
	{
		var buf bytes.Buffer
		tw := tar.NewWriter(&buf)
		tw.WriteHeader(&tar.Header{Name: "workspace", Typeflag: tar.TypeSymlink, Linkname: "etc", Mode: 0o777})
		tw.Close()
		data := buf.Bytes()
		top, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(data)), nil })
		if err != nil {
			t.Fatal(err)
		}
		linked, err := mutate.AppendLayers(img, top)
		if err != nil {
			t.Fatal(err)
		}
		if err := tarball.WriteToFile(linkTar, name.MustParseReference("x:1").(name.Tag), linked); err != nil {
			t.Fatal(err)
		}
	}
	if _, e, code := d.cli("template", "import", "linked", linkTar); code != 0 {
		t.Fatalf("import linked: %s", e)
	}
	for _, rt := range []string{"runc", "runsc"} {
		_, err := d.c.CreateSandbox(ctx, api.CreateSandboxRequest{Template: "linked", Runtime: rt})
		var ce *client.Error
		if err == nil || !asClientError(err, &ce) || ce.Status/100 != 4 || !strings.Contains(err.Error(), "not a directory") {
			t.Errorf("%s: create with /workspace a symlink: %v, want a 4xx: not a directory", rt, err)
		}
		sb, err := d.c.CreateSandbox(ctx, api.CreateSandboxRequest{Template: "linked", Runtime: rt, User: "0"})
		if err != nil {
			t.Fatal(err)
		}
		if got := sh(t, d, sb.ID, "stat -c '%u' /etc /etc/passwd"); got != "0\n0" {
			t.Errorf("%s: /etc after the refused create: owners %q, want root's", rt, got)
		}
		d.c.DeleteSandbox(ctx, sb.ID, true)
	}

	// A layer that does not hash to its diffID is refused, naming the
	// layer and both digests.
	cfg, _ := img.ConfigFile()
	cfg = cfg.DeepCopy()
	real := cfg.RootFS.DiffIDs[0].String()
	wrong := "sha256:" + strings.Repeat("ab", 32)
	cfg.RootFS.DiffIDs[0], _ = v1.NewHash(wrong)
	bad, err := mutate.ConfigFile(img, cfg)
	if err != nil {
		t.Fatal(err)
	}
	_, e, code = d.cli("template", "import", "bad", writeTestLayout(t, bad))
	if code == 0 || !strings.Contains(e, "layer 1 of 1") || !strings.Contains(e, real) || !strings.Contains(e, wrong) {
		t.Errorf("import of a corrupt layer: code %d, stderr %q: want it refused naming layer 1 of 1, %s and %s", code, e, real, wrong)
	}
	if _, err := d.c.GetTemplate(ctx, "bad"); err == nil {
		t.Error("the corrupt import left a template")
	}
}

// TestTemplateFileUser: a template file's user step adds a user to the
// builtin template, with its group and home, as the template's default
// user; its sandboxes run as it and it owns /workspace, on runc and runsc.
func TestTemplateFileUser(t *testing.T) {
	parallel(t)
	d := startRunscDaemon(t)
	ctx := context.Background()
	file := filepath.Join(t.TempDir(), "t.yaml")
	if err := os.WriteFile(file, []byte("name: devbox\nfrom: base\nsteps:\n"+
		"  - user: {name: dev, uid: 1001, home: /home/dev, default: true}\n"+
		"  - run: touch /home/dev/by-root\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, e, code := d.cli("apply", "-f", file); code != 0 {
		t.Fatalf("apply: %s %s", out, e)
	}
	tpl, err := d.c.GetTemplate(ctx, "devbox")
	if err != nil || tpl.User != "dev" {
		t.Fatalf("template devbox: %+v %v, want default user dev", tpl, err)
	}
	for _, rt := range []string{"runc", "runsc"} {
		t.Run(rt, func(t *testing.T) {
			sb, err := d.c.CreateSandbox(ctx, api.CreateSandboxRequest{Template: "devbox", Runtime: rt})
			if err != nil {
				t.Fatal(err)
			}
			defer d.c.DeleteSandbox(ctx, sb.ID, true)
			got := sh(t, d, sb.ID, "id -un; id -u; id -gn; stat -c '%U:%G %a' /home/dev; grep '^dev:' /etc/passwd; "+
				"touch /workspace/w /home/dev/h && stat -c '%U' /workspace /workspace/w")
			want := "dev\n1001\ndev\ndev:dev 755\ndev:x:1001:1001::/home/dev:/bin/sh\ndev\ndev"
			if got != want {
				t.Errorf("in a devbox sandbox:\n got %q\nwant %q", got, want)
			}
		})
	}
	// A second user with a taken uid is refused, naming it.
	if err := os.WriteFile(file, []byte("name: devbox2\nfrom: devbox\nsteps:\n  - user: {name: other, uid: 1001}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, e, code := d.cli("apply", "-f", file); code == 0 || !strings.Contains(e, "already has") {
		t.Errorf("apply of a user with a taken uid: code %d, %q", code, e)
	}
}
