package e2e

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/client"
	"github.com/berth-sh/berth/internal/auth"
	"github.com/berth-sh/berth/internal/testenv/regtest"
)

// blobDigests are the layer blob digests of img's manifest.
func blobDigests(t *testing.T, img v1.Image) []string {
	t.Helper()
	m, err := img.Manifest()
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, l := range m.Layers {
		out = append(out, l.Digest.String())
	}
	return out
}

// fileBytes is what img's layers unpack to: their regular files' bytes.
func fileBytes(t *testing.T, img v1.Image) int64 {
	t.Helper()
	layers, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	for _, l := range layers {
		rc, err := l.Uncompressed()
		if err != nil {
			t.Fatal(err)
		}
		tr := tar.NewReader(rc)
		for {
			h, err := tr.Next()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			if h.Typeflag == tar.TypeReg {
				n += h.Size
			}
		}
		rc.Close()
	}
	return n
}

func imageRecord(t *testing.T, img v1.Image) string {
	t.Helper()
	d, err := img.Digest()
	if err != nil {
		t.Fatal(err)
	}
	return "image@" + d.String()
}

// clientExec runs cmd in sandbox id and returns its stdout, failing on a
// non-zero exit.
func clientExec(t *testing.T, c *client.Client, id string, cmd ...string) string {
	t.Helper()
	var out, errb strings.Builder
	ex, err := c.Exec(context.Background(), id, api.ExecRequest{Cmd: cmd}, &out, &errb)
	if err != nil {
		t.Fatalf("exec %v in %s: %v", cmd, id, err)
	}
	if ex.Code != 0 {
		t.Fatalf("exec %v in %s: exit %d: %s", cmd, id, ex.Code, errb.String())
	}
	return out.String()
}

// Twenty concurrent creates of one image the daemon has never seen pull
// it once: the registry serves each layer blob one time. A create that
// gives up while the pull runs fails alone. The next create starts from
// the cached record without fetching anything.
func TestCreateImageSingleFlight(t *testing.T) {
	parallel(t)
	r := regtest.Start(t, regtest.Basic)
	d := registryDaemon(t, regAccess{r.Addr, r.CAPEM, r.User, r.Password})
	img := taskImage(t, "task one\n")
	ref := r.Addr + "/tasks/one:v1"
	pushImage(t, r, ref, img)
	blobs := blobDigests(t, img)

	ctx := context.Background()
	// The first caller gives up at once: the others must not fail with it.
	quitter, quit := context.WithCancel(ctx)
	quitDone := make(chan error, 1)
	go func() {
		_, err := d.c.CreateSandbox(quitter, api.CreateSandboxRequest{Image: ref})
		quitDone <- err
	}()
	const n = 20
	var wg sync.WaitGroup
	ids := make([]string, n)
	errs := make([]error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sb, err := d.c.CreateSandbox(ctx, api.CreateSandboxRequest{Image: ref})
			if err == nil {
				ids[i] = sb.ID
				if sb.Template != imageRecord(t, img) {
					err = errors.New("sandbox template " + sb.Template + ", want " + imageRecord(t, img))
				}
			}
			errs[i] = err
		}()
	}
	quit()
	wg.Wait()
	if err := <-quitDone; err == nil {
		t.Log("the quitting create finished before it was cancelled")
	}
	for i, err := range errs {
		if err != nil {
			t.Fatalf("create %d of %d: %v", i+1, n, err)
		}
	}
	for _, b := range blobs {
		if got := r.BlobGets(b); got != 1 {
			t.Fatalf("blob %s fetched %d times for %d concurrent creates, want once", b, got, n)
		}
	}
	if got := clientExec(t, d.c, ids[n-1], "cat", "/data/task"); got != "task one\n" {
		t.Fatalf("/data/task = %q", got)
	}

	// Cached: no blob fetched again, the record is the host's template.
	sb, err := d.c.CreateSandbox(ctx, api.CreateSandboxRequest{Image: ref})
	if err != nil {
		t.Fatal(err)
	}
	if got := clientExec(t, d.c, sb.ID, "cat", "/data/task"); got != "task one\n" {
		t.Fatalf("/data/task from the cached image = %q", got)
	}
	for _, b := range blobs {
		if got := r.BlobGets(b); got != 1 {
			t.Fatalf("blob %s fetched %d times after a cached create, want once", b, got)
		}
	}
	tpl, err := d.c.GetTemplate(ctx, imageRecord(t, img))
	if err != nil {
		t.Fatal(err)
	}
	if tpl.Source != "image:"+ref || strings.Join(tpl.Layers, ",") != strings.Join(diffIDs(t, img), ",") {
		t.Fatalf("image record %+v", tpl)
	}
	// A template and an image together are refused, naming both.
	_, err = d.c.CreateSandbox(ctx, api.CreateSandboxRequest{Image: ref, Template: "base"})
	if ce := wantStatus(t, "template and image", err, 400, ""); !strings.Contains(ce.Message, "template or image") {
		t.Fatalf("template and image: %v", err)
	}
	for _, id := range append(ids, sb.ID) {
		if _, err := d.c.DeleteSandbox(ctx, id, true); err != nil {
			t.Fatal(err)
		}
	}
}

// Tenants pull on create only where the daemon allows tenant pulls, with
// their own registry account alone, and each gets its own record, which
// no other tenant can name. Failures name their cause.
func TestCreateImageTenants(t *testing.T) {
	parallel(t)
	r := regtest.Start(t, regtest.Basic)
	img := taskImage(t, "tenant task\n")
	ref := r.Addr + "/tasks/tenant:v1"
	pushImage(t, r, ref, img)
	access := regAccess{r.Addr, r.CAPEM, r.User, r.Password}
	scopes := []auth.Scope{auth.ScopeSandboxesRead, auth.ScopeSandboxesWrite, auth.ScopeTemplates, auth.ScopeExec}
	ctx := context.Background()
	account := &api.RegistryAuth{Username: r.User, Password: r.Password}

	t.Run("tenant pulls off", func(t *testing.T) {
		addr := freeAddr(t)
		d := registryDaemonWith(t, []string{"--insecure-listen", addr}, access)
		a, err := client.New("http://"+addr, tenantKey(t, d, "a", scopes...))
		if err != nil {
			t.Fatal(err)
		}
		defer a.Close()
		_, err = a.CreateSandbox(ctx, api.CreateSandboxRequest{Image: ref, RegistryAuth: account})
		if ce := wantStatus(t, "a tenant's create --image", err, 403, "permission_denied"); !strings.Contains(ce.Message, "--tenant-pulls") {
			t.Fatalf("refusal names no cause: %v", err)
		}
		if n := r.BlobGets(blobDigests(t, img)[0]); n != 0 {
			t.Fatalf("a refused pull fetched a blob %d times", n)
		}
	})

	t.Run("tenant pulls on", func(t *testing.T) {
		addr := freeAddr(t)
		d := registryDaemonWith(t, []string{"--tenant-pulls", "--insecure-listen", addr}, access)
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
		// The daemon's account is the host's: a without its own is anonymous.
		_, err = a.CreateSandbox(ctx, api.CreateSandboxRequest{Image: ref})
		if ce := wantStatus(t, "a without an account", err, 403, "registry_unauthorized"); !strings.Contains(ce.Message, "401") {
			t.Fatalf("401 not named: %v", err)
		}
		_, err = a.CreateSandbox(ctx, api.CreateSandboxRequest{Image: r.Addr + "/tasks/missing:v1", RegistryAuth: account})
		if ce := wantStatus(t, "a missing image", err, 404, "image_not_found"); !strings.Contains(ce.Message, "tasks/missing:v1") {
			t.Fatalf("the missing image is not named: %v", err)
		}
		sb, err := a.CreateSandbox(ctx, api.CreateSandboxRequest{Image: ref, RegistryAuth: account})
		if err != nil {
			t.Fatal(err)
		}
		if got := clientExec(t, a, sb.ID, "cat", "/data/task"); got != "tenant task\n" {
			t.Fatalf("/data/task = %q", got)
		}
		rec := imageRecord(t, img)
		if tpl, err := a.GetTemplate(ctx, rec); err != nil || tpl.Tenant != "a" {
			t.Fatalf("a's record: %+v %v", tpl, err)
		}
		// b can neither see a's record nor create from it by name; its
		// own create pulls with its own account, proving every layer.
		_, err = b.GetTemplate(ctx, rec)
		wantStatus(t, "b reading a's record", err, 404, "not_found")
		_, err = b.CreateSandbox(ctx, api.CreateSandboxRequest{Template: rec})
		wantStatus(t, "b creating from a's record", err, 404, "not_found")
		before := r.BlobGets(blobDigests(t, img)[1])
		sbB, err := b.CreateSandbox(ctx, api.CreateSandboxRequest{Image: ref, RegistryAuth: account})
		if err != nil {
			t.Fatal(err)
		}
		if got := r.BlobGets(blobDigests(t, img)[1]); got != before+1 {
			t.Fatalf("b's pull fetched the task layer %d times, want once (its own proof)", got-before)
		}
		if tpl, err := b.GetTemplate(ctx, rec); err != nil || tpl.Tenant != "b" {
			t.Fatalf("b's record: %+v %v", tpl, err)
		}
		// The host's own records are no shared catalogue either.
		hostRef := r.Addr + "/tasks/host:v1"
		hostImg := taskImage(t, "host task\n")
		pushImage(t, r, hostRef, hostImg)
		hsb, err := d.c.CreateSandbox(ctx, api.CreateSandboxRequest{Image: hostRef})
		if err != nil {
			t.Fatal(err)
		}
		_, err = a.CreateSandbox(ctx, api.CreateSandboxRequest{Template: imageRecord(t, hostImg)})
		wantStatus(t, "a creating from the host's record", err, 404, "not_found")
		ts, err := a.ListTemplates(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, tp := range ts {
			if tp.Name == imageRecord(t, hostImg) {
				t.Fatal("a lists the host's image record")
			}
		}
		for _, c := range []struct {
			c  *client.Client
			id string
		}{{a, sb.ID}, {b, sbB.ID}, {d.c, hsb.ID}} {
			if _, err := c.c.DeleteSandbox(ctx, c.id, true); err != nil {
				t.Fatal(err)
			}
		}
		if d.logs.Contains(r.Password) {
			t.Fatal("the daemon logged a registry password")
		}
	})
}

// Under a size cap the image cache evicts the least recently used record
// no sandbox uses, and the layers only it held: never a layer a running
// sandbox (or a template) uses. An evicted image is pulled again on its
// next create.
func TestImageCacheGC(t *testing.T) {
	parallel(t)
	r := regtest.Start(t, regtest.Basic)
	// A cap below any image: every pull evicts all it may.
	d := registryDaemonWith(t, []string{"--image-cache-size", "4k"}, regAccess{r.Addr, r.CAPEM, r.User, r.Password})
	ctx := context.Background()
	imgs := map[string]v1.Image{}
	refs := map[string]string{}
	for _, k := range []string{"a", "b", "c"} {
		imgs[k] = taskImage(t, "task "+k+"\n")
		refs[k] = r.Addr + "/tasks/" + k + ":v1"
		pushImage(t, r, refs[k], imgs[k])
	}
	taskLayer := func(k string) string { return diffIDs(t, imgs[k])[1] }
	onDisk := func(id string) bool {
		_, err := os.Stat(filepath.Join(d.dataDir, "images", "layers", strings.TrimPrefix(id, "sha256:")))
		return err == nil
	}
	create := func(k string) string {
		t.Helper()
		sb, err := d.c.CreateSandbox(ctx, api.CreateSandboxRequest{Image: refs[k]})
		if err != nil {
			t.Fatalf("create from %s: %v", k, err)
		}
		return sb.ID
	}
	// a stays running; b is used and deleted; then c's pull collects.
	sa := create("a")
	sbB := create("b")
	if got := clientExec(t, d.c, sbB, "cat", "/data/task"); got != "task b\n" {
		t.Fatalf("b: %q", got)
	}
	if _, err := d.c.DeleteSandbox(ctx, sbB, true); err != nil {
		t.Fatal(err)
	}
	sc := create("c")

	if !onDisk(taskLayer("a")) || !onDisk(taskLayer("c")) {
		t.Fatal("the cache removed a layer a running sandbox uses")
	}
	if !onDisk(diffIDs(t, imgs["a"])[0]) {
		t.Fatal("the cache removed the shared base layer in use")
	}
	if onDisk(taskLayer("b")) {
		t.Fatal("b's task layer, which nothing uses, stayed past the cap")
	}
	if _, err := d.c.GetTemplate(ctx, imageRecord(t, imgs["b"])); err == nil {
		t.Fatal("b's record stayed past the cap")
	}
	for _, k := range []string{"a", "c"} {
		if _, err := d.c.GetTemplate(ctx, imageRecord(t, imgs[k])); err != nil {
			t.Fatalf("%s's record, in use, was evicted: %v", k, err)
		}
	}
	if got := clientExec(t, d.c, sa, "cat", "/data/task"); got != "task a\n" {
		t.Fatalf("a after the collection: %q", got)
	}
	// b again: pulled anew.
	bTask := blobDigests(t, imgs["b"])[1]
	before := r.BlobGets(bTask)
	sbB = create("b")
	if got := r.BlobGets(bTask); got != before+1 {
		t.Fatalf("b's task blob fetched %d more times after its eviction, want 1", got-before)
	}
	if got := clientExec(t, d.c, sbB, "cat", "/data/task"); got != "task b\n" {
		t.Fatalf("b again: %q", got)
	}
	for _, id := range []string{sa, sbB, sc} {
		if _, err := d.c.DeleteSandbox(ctx, id, true); err != nil {
			t.Fatal(err)
		}
	}
}

// The cache evicts least recently used first: with room for two task
// images on their shared base, a third evicts the one not used since,
// not the older one created again meanwhile.
func TestImageCacheLRU(t *testing.T) {
	parallel(t)
	r := regtest.Start(t, regtest.Basic)
	// The base's file bytes (links and dirs count none) and two task
	// files of 7 bytes ("task x\n"), with a little to spare.
	capBytes := fileBytes(t, busyboxImage(t)) + 2*7 + 3
	d := registryDaemonWith(t, []string{"--image-cache-size", fmt.Sprint(capBytes)}, regAccess{r.Addr, r.CAPEM, r.User, r.Password})
	ctx := context.Background()
	imgs := map[string]v1.Image{}
	refs := map[string]string{}
	for _, k := range []string{"a", "b", "c"} {
		imgs[k] = taskImage(t, "task "+k+"\n")
		refs[k] = r.Addr + "/lru/" + k + ":v1"
		pushImage(t, r, refs[k], imgs[k])
	}
	use := func(k string) {
		t.Helper()
		sb, err := d.c.CreateSandbox(ctx, api.CreateSandboxRequest{Image: refs[k]})
		if err != nil {
			t.Fatalf("create from %s: %v", k, err)
		}
		if _, err := d.c.DeleteSandbox(ctx, sb.ID, true); err != nil {
			t.Fatal(err)
		}
	}
	has := func(k string) bool {
		_, err := d.c.GetTemplate(ctx, imageRecord(t, imgs[k]))
		return err == nil
	}
	use("a")
	use("b")
	use("a") // a is now the more recently used
	if !has("a") || !has("b") {
		t.Fatal("two images that fit the cap were evicted")
	}
	use("c")
	if !has("a") || !has("c") || has("b") {
		t.Fatalf("after c: a %v, b %v, c %v; want b (least recently used) evicted", has("a"), has("b"), has("c"))
	}
}
