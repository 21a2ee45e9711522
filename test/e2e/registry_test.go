package e2e

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/client"
	"github.com/berth-sh/berth/internal/auth"
	"github.com/berth-sh/berth/internal/testenv/regtest"
)

// regAccess is what a test's daemon is told about one registry: the CA it
// trusts for an address, the account it uses there.
type regAccess struct {
	addr       string
	ca         []byte
	user, pass string
}

// registryDaemon starts a daemon with serve --registry-auth and
// --registry-certs built from access.
func registryDaemon(t *testing.T, access ...regAccess) *daemon {
	t.Helper()
	return registryDaemonWith(t, nil, access...)
}

// registryDaemonWith is registryDaemon with more serve flags.
func registryDaemonWith(t *testing.T, extra []string, access ...regAccess) *daemon {
	t.Helper()
	dir := t.TempDir()
	auths := map[string]map[string]string{}
	for _, a := range access {
		if a.ca != nil {
			if err := os.MkdirAll(filepath.Join(dir, "certs.d", a.addr), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, "certs.d", a.addr, "ca.crt"), a.ca, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		if a.user != "" {
			auths[a.addr] = map[string]string{"auth": base64.StdEncoding.EncodeToString([]byte(a.user + ":" + a.pass))}
		}
	}
	b, _ := json.Marshal(map[string]any{"auths": auths})
	if err := os.WriteFile(filepath.Join(dir, "auth.json"), b, 0o600); err != nil {
		t.Fatal(err)
	}
	os.MkdirAll(filepath.Join(dir, "certs.d"), 0o755)
	return startDaemonWith(t, append([]string{"--registry-auth", filepath.Join(dir, "auth.json"),
		"--registry-certs", filepath.Join(dir, "certs.d")}, extra...)...)
}

// pushImage writes img to ref in r with r's account, from the test.
func pushImage(t *testing.T, r *regtest.Registry, ref string, img any) {
	t.Helper()
	tr := r.Transport()
	defer tr.CloseIdleConnections()
	nr, err := name.ParseReference(ref)
	if err != nil {
		t.Fatal(err)
	}
	opts := []remote.Option{remote.WithTransport(tr), remote.WithAuth(authn.FromConfig(authn.AuthConfig{Username: r.User, Password: r.Password}))}
	switch v := img.(type) {
	case v1.Image:
		err = remote.Write(nr, v, opts...)
	case v1.ImageIndex:
		err = remote.WriteIndex(nr, v, opts...)
	}
	if err != nil {
		t.Fatalf("push %s: %v\n%s", ref, err, r.Log())
	}
}

// taskImage is busybox plus a layer with the file /data/task.
func taskImage(t *testing.T, content string) v1.Image {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	tw.WriteHeader(&tar.Header{Name: "data/task", Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(len(content))})
	tw.Write([]byte(content))
	tw.Close()
	img, err := mutate.AppendLayers(busyboxImage(t), static.NewLayer(buf.Bytes(), types.OCIUncompressedLayer))
	if err != nil {
		t.Fatal(err)
	}
	return img
}

func diffIDs(t *testing.T, img v1.Image) []string {
	t.Helper()
	cfg, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, d := range cfg.RootFS.DiffIDs {
		out = append(out, d.String())
	}
	return out
}

// Imports by reference from real registries, with basic and with token
// auth, give the pushed layers and files; the CLI shows each layer's
// progress with its size.
func TestRegistryImportAuth(t *testing.T) {
	parallel(t)
	basic := regtest.Start(t, regtest.Basic)
	token := regtest.Start(t, regtest.Token)
	d := registryDaemon(t,
		regAccess{basic.Addr, basic.CAPEM, basic.User, basic.Password},
		regAccess{token.Addr, token.CAPEM, token.User, token.Password})
	ctx := context.Background()

	img := taskImage(t, "task-basic\n")
	ref := basic.Addr + "/tasks/one:v1"
	pushImage(t, basic, ref, img)
	stdout, stderr, code := d.cli("template", "import", "one", ref)
	if code != 0 {
		t.Fatalf("import from the basic-auth registry: %d %s %s\n%s", code, stdout, stderr, basic.Log())
	}
	for _, want := range []string{"layer 1/2", "layer 2/2", "done", "(all layers: "} {
		if !strings.Contains(stderr, want) {
			t.Errorf("the import's progress does not show %q:\n%s", want, stderr)
		}
	}
	tpl, err := d.c.GetTemplate(ctx, "one")
	if err != nil {
		t.Fatal(err)
	}
	if want := diffIDs(t, img); fmt.Sprint(tpl.Layers) != fmt.Sprint(want) || tpl.Source != "registry:"+ref {
		t.Fatalf("imported %v from %s, pushed %v", tpl.Layers, tpl.Source, want)
	}
	sb, err := d.c.CreateSandbox(ctx, api.CreateSandboxRequest{Template: "one"})
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	if exit, err := d.c.Exec(ctx, sb.ID, api.ExecRequest{Cmd: []string{"cat", "/data/task", "/data/hello"}}, &out, &out); err != nil || exit.Code != 0 ||
		out.String() != "task-basic\nfrom-image\n" {
		t.Fatalf("files of the pulled template: %v %+v %q", err, exit, out.String())
	}
	if _, err := d.c.DeleteSandbox(ctx, sb.ID, true); err != nil {
		t.Fatal(err)
	}

	img2 := taskImage(t, "task-token\n")
	ref2 := token.Addr + "/tasks/two@" + must(img2.Digest()).String()
	pushImage(t, token, token.Addr+"/tasks/two:v1", img2)
	tpl, err = d.c.ImportTemplate(ctx, api.ImportTemplateRequest{Name: "two", Ref: ref2})
	if err != nil {
		t.Fatalf("import from the token-auth registry: %v\n%s", err, token.Log())
	}
	if want := diffIDs(t, img2); fmt.Sprint(tpl.Layers) != fmt.Sprint(want) {
		t.Fatalf("imported %v, pushed %v", tpl.Layers, want)
	}
	// The secrets are in no log line of the daemon.
	for _, secret := range []string{basic.Password, token.Password} {
		if d.logs.Contains(secret) {
			t.Fatalf("the daemon logged a registry password")
		}
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// Each way a pull fails has its own code and a message naming the step,
// the reference and the cause, through the API and the CLI.
func TestRegistryImportErrors(t *testing.T) {
	parallel(t)
	good := regtest.Start(t, regtest.Basic)      // trusted, right password
	wrongPw := regtest.Start(t, regtest.Basic)   // trusted, wrong password
	anon := regtest.Start(t, regtest.Token)      // trusted, no account
	untrusted := regtest.Start(t, regtest.Basic) // CA not given
	d := registryDaemon(t,
		regAccess{good.Addr, good.CAPEM, good.User, good.Password},
		regAccess{good.OtherAddr, good.CAPEM, good.User, good.Password},
		regAccess{wrongPw.Addr, wrongPw.CAPEM, wrongPw.User, "not-" + wrongPw.Password},
		regAccess{anon.Addr, anon.CAPEM, "", ""},
		regAccess{untrusted.Addr, nil, untrusted.User, untrusted.Password})
	ctx := context.Background()

	img := taskImage(t, "errors\n")
	pushImage(t, good, good.Addr+"/t/img:v1", img)
	pushImage(t, wrongPw, wrongPw.Addr+"/t/img:v1", img)
	pushImage(t, anon, anon.Addr+"/t/img:v1", img)
	pushImage(t, untrusted, untrusted.Addr+"/t/img:v1", img)

	// No image for this host: an index of one s390x image.
	s390, err := mutate.ConfigFile(img, &v1.ConfigFile{OS: "linux", Architecture: "s390x", RootFS: must(img.ConfigFile()).RootFS})
	if err != nil {
		t.Fatal(err)
	}
	idx := mutate.AppendManifests(mutate.IndexMediaType(empty.Index, types.OCIImageIndex),
		mutate.IndexAddendum{Add: s390, Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: "s390x"}}},
		mutate.IndexAddendum{Add: s390, Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: "s390x", Variant: "x"}}})
	pushImage(t, good, good.Addr+"/t/s390x:v1", idx)
	// An artifact: a Helm chart's media types in an image manifest.
	chart := mutate.MediaType(mutate.ConfigMediaType(empty.Image, "application/vnd.cncf.helm.config.v1+json"), types.OCIManifestSchema1)
	chart, err = mutate.Append(chart, mutate.Addendum{Layer: static.NewLayer([]byte("chart"), "application/vnd.cncf.helm.chart.content.v1.tar+gzip")})
	if err != nil {
		t.Fatal(err)
	}
	pushImage(t, good, good.Addr+"/t/chart:v1", chart)
	// A blob the registry serves with other bytes than its digest names:
	// the task layer is uncompressed, so a changed byte keeps its size.
	corrupt := taskImage(t, "corrupt-me\n")
	pushImage(t, good, good.Addr+"/t/corrupt:v1", corrupt)
	layers, _ := corrupt.Layers()
	dg := must(layers[len(layers)-1].Digest())
	blob := filepath.Join(good.Storage, "docker/registry/v2/blobs/sha256", dg.Hex[:2], dg.Hex, "data")
	data, err := os.ReadFile(blob)
	if err != nil {
		t.Fatal(err)
	}
	data = bytes.Replace(data, []byte("corrupt-me"), []byte("CORRUPT-ME"), 1)
	if err := os.WriteFile(blob, data, 0o644); err != nil {
		t.Fatal(err)
	}

	cases := []struct {
		what, ref string
		status    int
		code      string
		cause     string
	}{
		{"connection refused", good.ClosedAddr + "/t/img:v1", 502, "registry_unreachable", "connection refused"},
		{"unknown authority", untrusted.Addr + "/t/img:v1", 502, "registry_tls", "unknown authority"},
		{"name mismatch", good.OtherAddr + "/t/img:v1", 502, "registry_tls", "not for this address"},
		{"wrong password", wrongPw.Addr + "/t/img:v1", 403, "registry_unauthorized", "401"},
		{"no credentials", anon.Addr + "/t/img:v1", 403, "registry_unauthorized", "401"},
		{"manifest unknown", good.Addr + "/t/img:missing", 404, "image_not_found", "MANIFEST_UNKNOWN"},
		{"repository unknown", good.Addr + "/t/nothing:v1", 404, "image_not_found", "no such image"},
		{"no linux/amd64", good.Addr + "/t/s390x:v1", 400, "image_unsupported", "none for linux/"},
		{"artifact", good.Addr + "/t/chart:v1", 400, "image_unsupported", "application/vnd.cncf.helm.config.v1+json"},
		{"digest mismatch", good.Addr + "/t/corrupt:v1", 502, "digest_mismatch", "does not match its digest"},
	}
	for i, tc := range cases {
		_, err := d.c.ImportTemplate(ctx, api.ImportTemplateRequest{Name: fmt.Sprintf("e%d", i), Ref: tc.ref})
		ce := wantStatus(t, tc.what, err, tc.status, tc.code)
		t.Logf("%s: %d %s: %s", tc.what, ce.Status, ce.Code, ce.Message)
		if !strings.HasPrefix(ce.Message, "pull "+tc.ref+": ") || !strings.Contains(ce.Message, tc.cause) {
			t.Errorf("%s: message %q does not name the step, %s and %q", tc.what, ce.Message, tc.ref, tc.cause)
		}
	}
	// The CLI prints the same message.
	_, stderr, code := d.cli("template", "import", "cli", good.Addr+"/t/img:missing")
	if code == 0 || !strings.Contains(stderr, "pull "+good.Addr+"/t/img:missing: the registry has no such image") {
		t.Fatalf("CLI: %d %s", code, stderr)
	}
	// Nothing failed leaves a template.
	tpls, err := d.c.ListTemplates(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, tp := range tpls {
		if strings.HasPrefix(tp.Name, "e") || tp.Name == "cli" {
			t.Fatalf("a failed import left template %s", tp.Name)
		}
	}
}

// A registry host name that does not resolve is its own error. The daemon
// runs in a namespace with no interface but loopback, so the lookup fails
// before any packet is sent: no DNS query leaves the machine.
func TestRegistryImportDNS(t *testing.T) {
	parallel(t)
	ns := "bt-dns-" + randHex(t, 3)
	if out, err := exec.Command("ip", "netns", "add", ns).CombinedOutput(); err != nil {
		t.Fatalf("%v %s", err, out)
	}
	t.Cleanup(func() { exec.Command("ip", "netns", "del", ns).Run() })
	if out, err := exec.Command("ip", "-n", ns, "link", "set", "lo", "up").CombinedOutput(); err != nil {
		t.Fatalf("%v %s", err, out)
	}
	if out, err := exec.Command("ip", "-n", ns, "route", "show").CombinedOutput(); err != nil || strings.TrimSpace(string(out)) != "" {
		t.Fatalf("the namespace has routes: %v %q", err, out)
	}
	d := startDaemonIn(t, ns)
	ref := "registry.berth-e2e.invalid:5000/t/img:v1"
	_, err := d.c.ImportTemplate(context.Background(), api.ImportTemplateRequest{Name: "dns", Ref: ref})
	ce := wantStatus(t, "unresolvable registry", err, http.StatusBadGateway, "registry_dns")
	if !strings.HasPrefix(ce.Message, "pull "+ref+": cannot resolve") || !strings.Contains(ce.Message, "registry.berth-e2e.invalid") {
		t.Fatalf("message %q", ce.Message)
	}
}

func randHex(t *testing.T, n int) string {
	t.Helper()
	b := make([]byte, n)
	if _, err := io.ReadFull(rand.Reader, b); err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("%x", b)
}

// A pushed template imports back under another name with the digests the
// push reported and the same files (a whiteout included); a build step's
// layer keeps its id through the round trip; a second push of the same
// template is the same image and sends no layer again.
func TestRegistryPushRoundTrip(t *testing.T) {
	parallel(t)
	r := regtest.Start(t, regtest.Basic)
	d := registryDaemon(t, regAccess{r.Addr, r.CAPEM, r.User, r.Password})
	ctx := context.Background()
	tarPath := filepath.Join(t.TempDir(), "bb.tar")
	if err := tarball.WriteToFile(tarPath, must(name.ParseReference("example.test/busybox:1")), busyboxImage(t)); err != nil {
		t.Fatal(err)
	}
	if _, e, code := d.cli("template", "import", "bb", tarPath); code != 0 {
		t.Fatalf("import tarball: %s", e)
	}
	if out, e, code := d.cli("template", "build", "bb-built", "--from", "bb",
		"--run", "mkdir -p /opt && echo built > /opt/marker", "--run", "rm /data/hello"); code != 0 {
		t.Fatalf("build: %s %s", out, e)
	}
	built, err := d.c.GetTemplate(ctx, "bb-built")
	if err != nil {
		t.Fatal(err)
	}

	ref := r.Addr + "/team/bb-built:1"
	stdout, stderr, code := d.cli("template", "push", "bb-built", ref, "-o", "json")
	if code != 0 {
		t.Fatalf("push: %d %s %s\n%s", code, stdout, stderr, r.Log())
	}
	var res api.PushResult
	jsonDecode(t, stdout, &res)
	for _, want := range []string{"layer 1/2", "layer 2/2", "done", "(all layers: "} {
		if !strings.Contains(stderr, want) {
			t.Errorf("the push's progress does not show %q:\n%s", want, stderr)
		}
	}
	if res.Ref != ref || len(res.Layers) != 2 || res.Layers[1] != built.Layers[1] {
		t.Fatalf("pushed %+v; the template's layers are %v (a build step's layer must keep its id)", res, built.Layers)
	}
	// What the registry holds is what the push said.
	tr := r.Transport()
	defer tr.CloseIdleConnections()
	remoteImg, err := remote.Image(must(name.ParseReference(ref)), remote.WithTransport(tr),
		remote.WithAuth(authn.FromConfig(authn.AuthConfig{Username: r.User, Password: r.Password})))
	if err != nil {
		t.Fatal(err)
	}
	if dg := must(remoteImg.Digest()).String(); dg != res.Digest {
		t.Fatalf("the registry has %s, the push said %s", dg, res.Digest)
	}
	cfg := must(remoteImg.ConfigFile())
	if fmt.Sprint(diffIDs(t, remoteImg)) != fmt.Sprint(res.Layers) || cfg.Config.WorkingDir != "/data" ||
		!strings.Contains(strings.Join(cfg.Config.Env, " "), "FROM_IMAGE=yes") || cfg.OS != "linux" {
		t.Fatalf("pushed config: %+v", cfg)
	}

	// Import it back under another name: the same digests and files.
	tpl, err := d.c.ImportTemplate(ctx, api.ImportTemplateRequest{Name: "bb-back", Ref: r.Addr + "/team/bb-built@" + res.Digest})
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(tpl.Layers) != fmt.Sprint(res.Layers) || tpl.Workdir != "/data" {
		t.Fatalf("imported back %+v, pushed %v", tpl, res.Layers)
	}
	out, e, code := d.cli("run", "--template", "bb-back", "--", "sh", "-c", "cat /opt/marker; ls /data; echo $FROM_IMAGE")
	if code != 0 || out != "built\nyes\n" {
		t.Fatalf("files of the template pushed and pulled back: %q %q", out, e)
	}

	// Pushed again under another tag: the same image, no layer sent.
	stdout, stderr, code = d.cli("template", "push", "bb-built", r.Addr+"/team/bb-built:2", "-o", "json")
	var res2 api.PushResult
	if code != 0 {
		t.Fatalf("second push: %s %s", stdout, stderr)
	}
	jsonDecode(t, stdout, &res2)
	if res2.Digest != res.Digest || strings.Count(stderr, "already in the registry") != 2 {
		t.Fatalf("second push: %+v, first %s; progress:\n%s", res2, res.Digest, stderr)
	}

	// Refusals: a template on the host's /usr, a registry that is not
	// there (named in the message, as a pull's).
	_, err = d.c.PushTemplate(ctx, "base", api.PushTemplateRequest{Ref: r.Addr + "/team/base:1"})
	if ce := wantStatus(t, "push of base", err, 400, "invalid_argument"); !strings.Contains(ce.Message, "/usr") {
		t.Fatalf("push of base: %q", ce.Message)
	}
	bad := r.ClosedAddr + "/team/x:1"
	_, err = d.c.PushTemplate(ctx, "bb-built", api.PushTemplateRequest{Ref: bad})
	if ce := wantStatus(t, "push to a closed port", err, 502, "registry_unreachable"); !strings.HasPrefix(ce.Message, "push "+bad+": ") {
		t.Fatalf("push to a closed port: %q", ce.Message)
	}
	_, err = d.c.PushTemplate(ctx, "nosuch", api.PushTemplateRequest{Ref: r.Addr + "/team/x:1"})
	wantStatus(t, "push of a missing template", err, 404, "not_found")
}

// With --tenant-pulls a tenant pushes its own template and pulls it back,
// with the registry account its requests give: never with the daemon's
// (the operator's), which the host's transfers use. Another tenant's push
// of it finds nothing. The host can give a request its own account too.
func TestRegistryPushTenants(t *testing.T) {
	parallel(t)
	r := regtest.Start(t, regtest.Basic)
	other := regtest.Start(t, regtest.Token) // the daemon has its CA, no account
	addr := freeAddr(t)
	d := registryDaemonWith(t, []string{"--tenant-pulls", "--insecure-listen", addr},
		regAccess{r.Addr, r.CAPEM, r.User, r.Password}, regAccess{other.Addr, other.CAPEM, "", ""})
	ctx := context.Background()
	scopes := []auth.Scope{auth.ScopeSandboxesRead, auth.ScopeSandboxesWrite, auth.ScopeTemplates, auth.ScopeExec}
	a, err := client.New("http://"+addr, tenantKey(t, d, "a", scopes...))
	if err != nil {
		t.Fatal(err)
	}
	b, err := client.New("http://"+addr, tenantKey(t, d, "b", scopes...))
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	defer b.Close()
	tarPath := filepath.Join(t.TempDir(), "bb.tar")
	if err := tarball.WriteToFile(tarPath, must(name.ParseReference("example.test/busybox:1")), busyboxImage(t)); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(tarPath)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := a.UploadTemplateArchive(ctx, "mine", f); err != nil {
		t.Fatal(err)
	}
	ref := r.Addr + "/a/mine:1"
	account := &api.RegistryAuth{Username: r.User, Password: r.Password}
	_, err = b.PushTemplate(ctx, "mine", api.PushTemplateRequest{Ref: r.Addr + "/b/stolen:1", RegistryAuth: account})
	wantStatus(t, "b pushing a's template", err, 404, "not_found")
	// The daemon's account for r is the host's: a's push without its own
	// is anonymous, and refused.
	_, err = a.PushTemplate(ctx, "mine", api.PushTemplateRequest{Ref: ref})
	wantStatus(t, "a pushing without an account", err, 403, "registry_unauthorized")
	res, err := a.PushTemplate(ctx, "mine", api.PushTemplateRequest{Ref: ref, RegistryAuth: account})
	if err != nil {
		t.Fatalf("a pushing its own template with its account: %v", err)
	}
	_, err = a.ImportTemplate(ctx, api.ImportTemplateRequest{Name: "mine-back", Ref: ref})
	wantStatus(t, "a pulling without an account", err, 403, "registry_unauthorized")
	back, err := a.ImportTemplate(ctx, api.ImportTemplateRequest{Name: "mine-back", Ref: ref, RegistryAuth: account})
	if err != nil {
		t.Fatal(err)
	}
	if back.Tenant != "a" || fmt.Sprint(back.Layers) != fmt.Sprint(res.Layers) {
		t.Fatalf("a's template pulled back: %+v, pushed %+v", back, res)
	}
	if _, err := b.GetTemplate(ctx, "mine-back"); err == nil {
		t.Fatal("b sees a's pulled template")
	}
	// The host pulls with the daemon's account (r) or its request's (the
	// token registry, through the CLI: the password on stdin).
	if _, err := d.c.ImportTemplate(ctx, api.ImportTemplateRequest{Name: "host-copy", Ref: ref}); err != nil {
		t.Fatalf("the host pulling with the daemon's account: %v", err)
	}
	pushImage(t, other, other.Addr+"/t/img:v1", taskImage(t, "other\n"))
	oref := other.Addr + "/t/img:v1"
	if _, e, code := d.cli("template", "import", "tok", oref); code == 0 || !strings.Contains(e, "401") {
		t.Fatalf("the host pulling from the token registry with no account: %d %s", code, e)
	}
	if out, e, code := d.cliIn(other.Password+"\n", "template", "import", "tok", oref, "--registry-user", other.User, "--registry-password-stdin"); code != 0 {
		t.Fatalf("the host pulling with its request's account: %d %s %s", code, out, e)
	}
	if d.logs.Contains(other.Password) || d.logs.Contains(r.Password) {
		t.Fatal("the daemon logged a registry password")
	}
}
