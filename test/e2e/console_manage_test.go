package e2e

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/client"
	"github.com/berth-sh/berth/internal/testenv/regtest"
)

// TestConsoleManage drives the console's managing pages in Chromium as a
// tenant's viewer, member and admin and as the host: templates (a
// Dockerfile build with a context file, a docker-save archive uploaded and
// an import from a registry by reference, each with its live log; only
// for the templates right), a sandbox's
// resources over time and its forks and snapshots as a tree (fork and
// snapshot from the page, for sandboxes:write), and the webhook page (the
// host's alone: its URL redacted, never the secret, its deliveries).
// axe-core finds no serious violation on these pages; no page logs an
// error; every request goes to the daemon; the pages fit a phone.
// Screenshots in artifactsDir.
func TestConsoleManage(t *testing.T) {
	parallel(t)
	var hooks atomic.Int64
	recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		hooks.Add(1)
	}))
	t.Cleanup(recv.Close)
	hookURL := strings.Replace(recv.URL, "http://", "http://hook-user:hook-pass@", 1) + "/in?token=tok-in-query"
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	addr := ln.Addr().String()
	ln.Close()
	// A registry (its own network namespace, TLS by the test CA, an
	// account) the host imports from by reference.
	reg := regtest.Start(t, regtest.Basic)
	regRef := reg.Addr + "/tools/bb:1"
	pushImage(t, reg, regRef, taskImage(t, "from-the-registry\n"))
	d := registryDaemonWith(t, []string{"--insecure-listen", addr, "--webhook-url", hookURL, "--webhook-secret", "whsec-never-shown"},
		regAccess{reg.Addr, reg.CAPEM, reg.User, reg.Password})
	keyb, _ := os.ReadFile(d.dataDir + "/admin.key")
	hostKey := strings.TrimSpace(string(keyb))
	base := "http://" + addr
	ctx := context.Background()
	host, err := client.New(base, hostKey)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := host.CreateTenant(ctx, "crew"); err != nil {
		t.Fatal(err)
	}
	keys := map[string]*api.CreatedAPIKey{}
	for _, role := range []string{"viewer", "member", "admin"} {
		k, err := host.CreateAPIKey(ctx, api.CreateAPIKeyRequest{Tenant: "crew", Role: role, Name: "crew-" + role})
		if err != nil {
			t.Fatal(err)
		}
		keys[role] = k
	}
	member, _ := client.New(base, keys["member"].Key)
	root, err := member.CreateSandbox(ctx, api.CreateSandboxRequest{Name: "tree-root", Persistent: true})
	if err != nil {
		t.Fatal(err)
	}
	fr, err := member.Fork(ctx, root.ID, api.ForkRequest{Count: 1, NamePrefix: "tree-fork"})
	if err != nil {
		t.Fatal(err)
	}
	child := fr.Children[0]
	if _, err := member.CreateSnapshot(ctx, child.ID, api.CreateSnapshotRequest{Name: "child-snap"}); err != nil {
		t.Fatal(err)
	}

	s := newConsoleSession(t, d, base, 5*time.Minute)
	checkAxe := func(who, pg string) {
		t.Helper()
		if v := s.axe(who + " " + pg); len(v) > 0 {
			t.Errorf("axe-core on %s's %s page: %d serious violations:\n%s", who, pg, len(v), strings.Join(v, "\n"))
		}
	}
	text := func(sel string) string {
		return s.str(sel, `(document.querySelector(`+jsString(sel)+`) || {}).textContent || ''`)
	}
	treeRow := func(id string) string { return `#lineage-tree li[data-id="` + id + `"]` }
	// waitChart waits until a chart of the usage card shows a value.
	waitChart := func(id string) {
		t.Helper()
		sel := `#usage figure[data-chart="` + id + `"] .val`
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
			if v := text(sel); v != "" && v != "—" {
				return
			}
			if time.Now().After(deadline) {
				s.shot("usage-failed")
				t.Fatalf("the %s chart shows no value: %q", id, text(sel))
			}
		}
	}

	// The viewer: reads the charts and the tree, is offered no build, no
	// fork, no snapshot, no webhook.
	s.signIn(keys["viewer"].Key, "viewer")
	if slices.Contains(s.nav(), "Webhooks") {
		t.Errorf("the viewer's navigation offers Webhooks: %q", s.nav())
	}
	s.page("#/templates", "#templates")
	if s.count("#template-add") != 0 || !strings.Contains(text("#templates-note"), "templates") {
		t.Errorf("viewer's templates page: form %d, note %q", s.count("#template-add"), text("#templates-note"))
	}
	s.shot("viewer-templates")
	s.page("#/sandbox/"+child.ID, treeRow(root.ID))
	waitChart("cpu")
	waitChart("memory")
	if s.count(treeRow(child.ID)+`[aria-current]`) != 1 || !strings.Contains(text("#lineage-tree"), "child-snap") {
		t.Errorf("the viewer's tree: %q", text("#lineage-tree"))
	}
	if n := s.count(`#lineage button`); n != 0 {
		t.Errorf("the viewer is offered %d fork/snapshot buttons", n)
	}
	checkAxe("viewer", "sandbox (charts and tree)")
	s.shot("viewer-sandbox-usage-tree")
	s.page("#/webhooks", "#denied")
	s.signOut()

	// The member: builds from a Dockerfile with a context file and reads
	// the build's output live; uploads a docker-save archive; forks and
	// snapshots from the page and sees the tree grow.
	s.signIn(keys["member"].Key, "member")
	s.page("#/templates", "#template-add")
	dir := t.TempDir()
	greeting := filepath.Join(dir, "greeting.txt")
	os.WriteFile(greeting, []byte("hello-from-the-context\n"), 0o644)
	s.fill("#tpl-name", "from-console")
	s.fill("#tpl-dockerfile", "FROM base\nCOPY greeting.txt /greeting.txt\nRUN echo built-$((6*7)) && cat /greeting.txt\n")
	s.run("pick the context", chromedp.SetUploadFiles(chromedp.CSS("#tpl-context"), []string{greeting}))
	checkAxe("member", "templates (build form)")
	s.run("build", chromedp.Click(chromedp.CSS("#tpl-submit")), waitText("#build-status", "Made template from-console"))
	if got := text("#build-log"); !strings.Contains(got, "built-42") || !strings.Contains(got, "hello-from-the-context") {
		t.Errorf("the build's log reads %q", got)
	}
	s.run("listed", waitText("#templates", "from-console"))
	checkAxe("member", "templates (build log)")
	s.shot("member-dockerfile-build")
	if _, err := member.GetTemplate(ctx, "from-console"); err != nil {
		t.Errorf("the built template: %v", err)
	}
	built, err := member.CreateSandbox(ctx, api.CreateSandboxRequest{Template: "from-console"})
	if err != nil {
		t.Fatal(err)
	}
	if got := execOut(t, d, built.ID, "cat", "/greeting.txt"); got != "hello-from-the-context\n" {
		t.Errorf("a sandbox of the built template reads %q", got)
	}
	archive := filepath.Join(dir, "bb.tar")
	ref, _ := name.ParseReference("example.test/busybox:1")
	if err := tarball.WriteToFile(archive, ref, busyboxImage(t)); err != nil {
		t.Fatal(err)
	}
	s.run("archive", chromedp.Click(chromedp.CSS("#how-archive")), chromedp.WaitVisible(chromedp.CSS("#tpl-archive")))
	s.fill("#tpl-name", "bb-upload")
	s.run("pick the archive", chromedp.SetUploadFiles(chromedp.CSS("#tpl-archive"), []string{archive}))
	s.run("import", chromedp.Click(chromedp.CSS("#tpl-submit")), waitText("#build-status", "Made template bb-upload"))
	if got := text("#build-log"); !strings.Contains(got, "layer 1 of 1") {
		t.Errorf("the import's log reads %q", got)
	}
	s.run("listed", waitText("#templates", "bb-upload"))
	s.shot("member-archive-import")
	s.page("#/sandbox/"+root.ID, treeRow(child.ID))
	waitChart("cpu")
	// The fork opens the child's page.
	s.run("fork", chromedp.Click(chromedp.CSS(`#lineage button[data-op="fork"]`)),
		waitTrue(`location.hash.startsWith('#/sandbox/') && location.hash !== `+jsString("#/sandbox/"+root.ID)))
	kids, err := member.GetSandbox(ctx, root.ID)
	if err != nil || kids.Lineage == nil || len(kids.Lineage.Children) != 2 {
		t.Fatalf("after the console's fork, the root has %+v (%v)", kids.Lineage, err)
	}
	forked := kids.Lineage.Children[slices.IndexFunc(kids.Lineage.Children, func(id string) bool { return id != child.ID })]
	s.run("the fork's page", chromedp.WaitVisible(chromedp.CSS(treeRow(forked)+`[aria-current]`)), chromedp.WaitVisible(chromedp.CSS(treeRow(root.ID))),
		chromedp.WaitVisible(chromedp.CSS(treeRow(child.ID))))
	s.fill("#snap-name", "from-the-page")
	s.run("snapshot", chromedp.Click(chromedp.CSS(`#lineage button[data-op="snapshot"]`)), waitText("#lineage-tree", "from-the-page"))
	snaps, err := member.ListSnapshots(ctx, forked)
	if err != nil || len(snaps) != 1 || snaps[0].Name != "from-the-page" {
		t.Errorf("the fork's snapshots: %+v (%v)", snaps, err)
	}
	// The tree: root, its two forks, each snapshot under its source.
	rows := s.strs("tree", `[...document.querySelectorAll('#lineage-tree li')].map(li => li.className.split(' ')[0] + ':' + li.dataset.kind + ':' + (li.dataset.kind === 'snapshot' ? li.textContent.split('·')[0].replace('snapshot','').trim() : li.dataset.id))`)
	for _, want := range []string{"d0:sandbox:" + root.ID, "d1:sandbox:" + child.ID, "d2:snapshot:child-snap", "d1:sandbox:" + forked, "d2:snapshot:from-the-page"} {
		if !slices.Contains(rows, want) {
			t.Errorf("the tree lacks %s: %q", want, rows)
		}
	}
	s.shot("member-fork-snapshot-tree")
	s.signOut()

	// The tenant's admin: templates yes, the host's webhook no.
	s.signIn(keys["admin"].Key, "admin")
	if slices.Contains(s.nav(), "Webhooks") {
		t.Errorf("the tenant's admin is offered Webhooks: %q", s.nav())
	}
	s.page("#/templates", "#template-add")
	s.page("#/webhooks", "#denied")
	s.shot("admin-webhooks-denied")
	s.signOut()

	// The host: the webhook, redacted, with its deliveries.
	s.signIn(hostKey, "admin")
	if !slices.Contains(s.nav(), "Webhooks") {
		t.Errorf("the host's navigation has no Webhooks: %q", s.nav())
	}
	s.page("#/webhooks", "#webhook-url-0")
	wantURL := "http://redacted@" + strings.TrimPrefix(recv.URL, "http://") + "/in?token=redacted"
	if got := text("#webhook-url-0"); got != wantURL {
		t.Errorf("the webhook's URL reads %q, want %q", got, wantURL)
	}
	for deadline := time.Now().Add(30 * time.Second); !strings.Contains(text("#webhook-deliveries-0"), "delivered"); time.Sleep(300 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no delivery shown (the receiver got %d): %q", hooks.Load(), text("main"))
		}
		s.run("refresh", chromedp.Click(chromedp.CSS("#webhook-0 .card-head button")))
	}
	if got := text("main"); strings.Contains(got, "hook-pass") || strings.Contains(got, "hook-user") || strings.Contains(got, "tok-in-query") ||
		strings.Contains(got, "whsec") || !strings.Contains(got, "HTTP 200") {
		t.Errorf("the webhook page shows %q", got)
	}
	checkAxe("host", "webhooks")
	s.shot("host-webhooks")
	s.page("#/templates", "#template-add")
	s.run("registry", chromedp.Click(chromedp.CSS("#how-registry")), chromedp.WaitVisible(chromedp.CSS("#tpl-ref")))
	s.fill("#tpl-name", "bb-registry")
	s.fill("#tpl-ref", regRef)
	s.run("import by reference", chromedp.Click(chromedp.CSS("#tpl-submit")), waitText("#build-status", "Made template bb-registry"))
	if got := text("#build-log"); !strings.Contains(got, "layer 1 of 2") || !strings.Contains(got, "layer 2 of 2") || !strings.Contains(got, "done") {
		t.Errorf("the registry import's log reads %q", got)
	}
	if tpl, err := host.GetTemplate(ctx, "bb-registry"); err != nil || tpl.Source != "registry:"+regRef {
		t.Errorf("the imported template: %+v %v", tpl, err)
	}
	checkAxe("host", "templates (import log)")
	s.shot("host-registry-import")

	s.run("phone", chromedp.EmulateViewport(375, 812, chromedp.EmulateMobile))
	for _, pg := range []string{"templates", "webhooks", "sandbox/" + root.ID} {
		s.page("#/"+pg, "main h1")
		var sw, iw int
		fmt.Sscan(s.str("width", `document.documentElement.scrollWidth + ' ' + window.innerWidth`), &sw, &iw)
		if sw > iw+1 {
			t.Errorf("page %s is wider than a 375 px screen (%d > %d)", pg, sw, iw)
		}
		s.shot("phone-" + strings.Split(pg, "/")[0])
	}
	s.run("laptop", chromedp.EmulateViewport(1440, 900))
	s.signOut()

	requests, problems, _ := s.log.snapshot()
	if len(problems) > 0 {
		t.Errorf("the browser reported problems (a refused call, an exception):\n%s", strings.Join(problems, "\n"))
	}
	for _, r := range requests {
		if !strings.HasPrefix(r, base+"/") && !strings.HasPrefix(r, "ws://"+addr+"/") && !strings.HasPrefix(r, "data:") &&
			!strings.HasPrefix(r, "blob:") && r != "about:blank" {
			t.Errorf("a request to another host than the daemon: %s", r)
		}
	}
	t.Logf("%d screenshots in %s", countFiles(s.shots), s.shots)
}

// waitTrue waits until the JavaScript expression is true.
func waitTrue(expr string) chromedp.Action[chromedp.Void] {
	return chromedp.Func(func(ctx context.Context, t *chromedp.Target) error {
		for {
			ok, err := chromedp.Evaluate[bool](expr)(ctx, t)
			if err != nil {
				return err
			}
			if ok {
				return nil
			}
			select {
			case <-ctx.Done():
				return fmt.Errorf("never true: %s: %w", expr, ctx.Err())
			case <-time.After(100 * time.Millisecond):
			}
		}
	})
}
