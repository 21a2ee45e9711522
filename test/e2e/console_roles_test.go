package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/input"
	"github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/client"
)

// consoleSession is one headless Chromium tab on a daemon's console, with
// the helpers the console tests share.
type consoleSession struct {
	t     *testing.T
	d     *daemon
	base  string
	ctx   context.Context // the test's deadline, in the browser
	bctx  context.Context // the browser's
	log   *browserLog
	shots string
}

func newConsoleSession(t *testing.T, d *daemon, base string, timeout time.Duration) *consoleSession {
	chromium := chromiumPath(t)
	profile := t.TempDir()
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(chromium), chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU, chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck, chromedp.UserDataDir(profile), chromedp.WindowSize(1440, 900),
		chromedp.Flag("disable-background-networking", true), chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true), chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-features", "Translate,OptimizationHints,MediaRouter,AutofillServerCommunication"),
		// Network safety: no name resolves but the daemon's loopback address.
		chromedp.Flag("host-resolver-rules", "MAP * ~NOTFOUND , EXCLUDE 127.0.0.1"),
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	t.Cleanup(cancelAlloc)
	bctx, cancelBrowser := chromedp.NewContext(actx)
	t.Cleanup(cancelBrowser)
	bl := &browserLog{ctx: bctx}
	if err := chromedp.Listen(bctx, bl.listen); err != nil {
		t.Fatalf("starting %s: %v", chromium, err)
	}
	if err := chromedp.Do(bctx, chromedp.Func(func(ctx context.Context, _ *chromedp.Target) error {
		for _, f := range []func() error{
			func() error { _, err := chromedp.Call(ctx, network.Enable, network.EnableParams{}); return err },
			func() error { _, err := chromedp.Call(ctx, log.Enable, cdp.Empty{}); return err },
			func() error { _, err := chromedp.Call(ctx, runtime.Enable, cdp.Empty{}); return err },
			func() error { _, err := chromedp.Call(ctx, page.Enable, page.EnableParams{}); return err },
		} {
			if err := f(); err != nil {
				return err
			}
		}
		return nil
	})); err != nil {
		t.Fatalf("the devtools protocol: %v", err)
	}
	tctx, cancel := context.WithTimeout(bctx, timeout)
	t.Cleanup(cancel)
	return &consoleSession{t: t, d: d, base: base, ctx: tctx, bctx: bctx, log: bl, shots: artifactsDir(t)}
}

func chromiumPath(t *testing.T) string {
	p, err := exec.LookPath("chromium")
	if err != nil {
		t.Fatal("the console test needs Debian's chromium: run scripts/install-deps.sh (make deps)")
	}
	return p
}

func (s *consoleSession) fail(what string, err error) {
	s.t.Helper()
	sctx, c := context.WithTimeout(s.bctx, 10*time.Second)
	shot(s.t, sctx, s.shots, "failed")
	c()
	_, problems, _ := s.log.snapshot()
	s.t.Fatalf("%s: %v\nbrowser problems: %q\ndaemon log tail:\n%s", what, err, problems, tail(s.d.logs.String(), 3000))
}

func (s *consoleSession) run(what string, steps ...chromedp.Action[chromedp.Void]) {
	s.t.Helper()
	if err := chromedp.Do(s.ctx, steps...); err != nil {
		s.fail(what, err)
	}
}

func (s *consoleSession) str(what, expr string) string {
	s.t.Helper()
	v, err := chromedp.Run(s.ctx, chromedp.Evaluate[string](expr))
	if err != nil {
		s.fail(what, err)
	}
	return v
}

func (s *consoleSession) strs(what, expr string) []string {
	s.t.Helper()
	v, err := chromedp.Run(s.ctx, chromedp.Evaluate[[]string](expr))
	if err != nil {
		s.fail(what, err)
	}
	return v
}

func (s *consoleSession) count(sel string) int {
	s.t.Helper()
	v, err := chromedp.Run(s.ctx, chromedp.Evaluate[int](`document.querySelectorAll(`+jsString(sel)+`).length`))
	if err != nil {
		s.fail("count "+sel, err)
	}
	return v
}

func (s *consoleSession) shot(name string) { shot(s.t, s.ctx, s.shots, name) }

// fill sets a form control's value as typing would (the input and change
// events the page's components listen to).
func (s *consoleSession) fill(sel, value string) {
	s.t.Helper()
	s.str("fill "+sel, `(() => { const el = document.querySelector(`+jsString(sel)+`);
		const proto = el instanceof HTMLSelectElement ? HTMLSelectElement.prototype : el instanceof HTMLTextAreaElement ? HTMLTextAreaElement.prototype : HTMLInputElement.prototype;
		Object.getOwnPropertyDescriptor(proto, 'value').set.call(el, `+jsString(value)+`);
		el.dispatchEvent(new Event('input', {bubbles: true})); el.dispatchEvent(new Event('change', {bubbles: true})); return 'ok'; })()`)
}

func jsString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// signIn signs in with key on a fresh load of the console, checking the
// sign-in page shows no navigation.
func (s *consoleSession) signIn(key, wantRole string) {
	s.t.Helper()
	s.run("open the console", chromedp.Navigate(s.base+"/console/"), chromedp.WaitVisible(chromedp.CSS("#apikey")))
	if n := s.count("nav, #nav a, #signout"); n != 0 {
		s.t.Errorf("the sign-in page shows %d navigation elements", n)
	}
	s.run("sign in", chromedp.SendKeys(chromedp.CSS("#apikey"), key), chromedp.Click(chromedp.CSS("#signin-submit")),
		chromedp.WaitVisible(chromedp.CSS("#who")), waitText("#who", wantRole))
}

func (s *consoleSession) signOut() {
	s.t.Helper()
	s.run("sign out", chromedp.Click(chromedp.CSS("#signout")), chromedp.WaitVisible(chromedp.CSS("#apikey")))
}

func (s *consoleSession) nav() []string {
	return s.strs("nav", `[...document.querySelectorAll('#nav a')].map(a => a.textContent)`)
}

// page goes to a route and waits until it has loaded.
func (s *consoleSession) page(hash, ready string) {
	s.t.Helper()
	s.run("page "+hash, goHash(hash), chromedp.WaitVisible(chromedp.CSS("main h1")), chromedp.WaitVisible(chromedp.CSS(ready)),
		chromedp.WaitNotPresent(chromedp.CSS("main .loading")))
}

// axe runs axe-core (internal/console/web/node_modules, pinned in its
// package-lock.json) on the page and returns its serious and critical
// violations.
func (s *consoleSession) axe(what string) []string {
	s.t.Helper()
	src, err := os.ReadFile(filepath.Join("..", "..", "internal", "console", "web", "node_modules", "axe-core", "axe.min.js"))
	if err != nil {
		s.t.Fatalf("axe-core: %v (run scripts/install-deps.sh: it installs internal/console/web's npm packages)", err)
	}
	if _, err := chromedp.Run(s.ctx, chromedp.Evaluate[bool](string(src)+"\n;true")); err != nil {
		s.fail("load axe-core", err)
	}
	v, err := chromedp.Run(s.ctx, chromedp.Evaluate[[]string](`axe.run(document, {runOnly: {type: 'tag', values: ['wcag2a', 'wcag2aa', 'wcag21a', 'wcag21aa']}})
		.then(r => [String(r.passes.length)].concat(r.violations.filter(v => v.impact === 'serious' || v.impact === 'critical')
		.map(v => v.id + ': ' + v.help + ' — ' + v.nodes.slice(0, 3).map(n => n.target.join(' ')).join(', '))))`, chromedp.EvalAwaitPromise))
	if err != nil {
		s.fail("axe on "+what, err)
	}
	// The rules that passed, first: none would mean axe checked nothing.
	if len(v) == 0 || v[0] == "0" {
		s.t.Fatalf("axe-core checked nothing on %s: %q", what, v)
	}
	return v[1:]
}

// waitTerminalLine waits until a line of the terminal satisfies ok.
func (s *consoleSession) waitTerminalLine(what string, ok func(string) bool) {
	s.t.Helper()
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		screen := s.strs("read the terminal", `[...document.querySelectorAll('#terminal .xterm-rows > div')].map(d => d.textContent.trimEnd())`)
		if slices.ContainsFunc(screen, ok) {
			return
		}
		if time.Now().After(deadline) {
			s.shot("terminal-failed")
			s.t.Fatalf("the terminal shows %s: %q", what, screen)
		}
	}
}

func (s *consoleSession) typeLine(line string) {
	s.t.Helper()
	s.run("type "+line, chromedp.Focus(chromedp.CSS(`#terminal .xterm-helper-textarea`)),
		chromedp.Func(func(ctx context.Context, _ *chromedp.Target) error {
			_, err := chromedp.Call(ctx, input.InsertText, input.InsertTextParams{Text: line})
			return err
		}), chromedp.KeyEvent("\r"))
}

func promptLine(l string) bool {
	l = strings.TrimSpace(l)
	return strings.HasSuffix(l, "#") || strings.HasSuffix(l, "$")
}

// TestConsoleRoles drives the console in Chromium as a tenant's viewer,
// member and admin, and as the host's administrator: which pages and
// actions each sees, which calls succeed, and the words where a right is
// missing (a viewer gets notes, not buttons that fail). The member creates
// a sandbox with an egress rule, a label and a secret from the form, runs a
// command in its terminal and edits a file that `berth exec cat` then reads.
// A warm pool's members never appear in the list. axe-core finds no serious
// violation on the pages it checks; no page logs an error (a refused call
// would); every request goes to the daemon. Screenshots of every page are
// kept in artifactsDir.
func TestConsoleRoles(t *testing.T) {
	parallel(t)
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	addr := ln.Addr().String()
	ln.Close()
	d := startDaemonWith(t, "--insecure-listen", addr)
	keyb, _ := os.ReadFile(d.dataDir + "/admin.key")
	hostKey := strings.TrimSpace(string(keyb))
	base := "http://" + addr
	ctx := context.Background()
	host, err := client.New(base, hostKey)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := host.CreateTenant(ctx, "team"); err != nil {
		t.Fatal(err)
	}
	keys := map[string]*api.CreatedAPIKey{}
	for _, role := range []string{"viewer", "member", "admin"} {
		k, err := host.CreateAPIKey(ctx, api.CreateAPIKeyRequest{Tenant: "team", Role: role, Name: "team-" + role})
		if err != nil {
			t.Fatal(err)
		}
		keys[role] = k
	}
	teamAdmin, _ := client.New(base, keys["admin"].Key)
	member, _ := client.New(base, keys["member"].Key)
	if _, err := teamAdmin.SetSecret(ctx, "TOKEN", "s3cret-from-the-vault"); err != nil {
		t.Fatal(err)
	}
	shared, err := member.CreateSandbox(ctx, api.CreateSandboxRequest{Name: "shared", Labels: map[string]string{"team": "blue"}})
	if err != nil {
		t.Fatal(err)
	}
	s := newConsoleSession(t, d, base, 4*time.Minute)
	noneOf := func(who string, got []string, not ...string) {
		t.Helper()
		for _, n := range not {
			if slices.Contains(got, n) {
				t.Errorf("%s: the navigation offers %s: %q", who, n, got)
			}
		}
	}
	checkAxe := func(who, pg string) {
		t.Helper()
		if v := s.axe(who + " " + pg); len(v) > 0 {
			t.Errorf("axe-core on %s's %s page: %d serious violations:\n%s", who, pg, len(v), strings.Join(v, "\n"))
		}
	}
	sbRow := `#sandboxes tr[data-id="` + shared.ID + `"]`

	// The viewer: reads everything of its tenant, is offered nothing it
	// cannot do, and is told why in words.
	s.signIn(keys["viewer"].Key, "viewer")
	noneOf("viewer", s.nav(), "Keys", "Secrets", "Audit", "Tenants")
	// The keyboard: the first Tab reaches the skip link, Enter moves the
	// focus to the page's heading, the next Tabs walk the navigation.
	focused := func() string {
		return s.str("focus", `(e => e ? e.tagName.toLowerCase() + '|' + (e.className || '') + '|' + e.textContent.trim() : '')(document.activeElement)`)
	}
	s.str("blur", `(document.activeElement && document.activeElement.blur(), 'ok')`)
	s.run("tab", chromedp.KeyEvent("\t"))
	if f := focused(); !strings.HasPrefix(f, "a|skip|") {
		t.Errorf("the first Tab focuses %q, want the skip link", f)
	}
	s.run("skip", chromedp.KeyEvent("\r"))
	if f := focused(); !strings.HasPrefix(f, "h1|") {
		t.Errorf("the skip link moved the focus to %q, want the page's heading", f)
	}
	s.run("tab to the brand and the first page", goHash("#/"), chromedp.WaitVisible(chromedp.CSS("#state-counts")),
		chromedp.Focus(chromedp.CSS(".skip")), chromedp.KeyEvent("\t"), chromedp.KeyEvent("\t"))
	if f := focused(); f != "a||Dashboard" && f != "a|active|Dashboard" {
		t.Errorf("Tab after the brand focuses %q, want the Dashboard link", f)
	}
	s.page("#/", "#state-counts")
	s.shot("viewer-dashboard")
	s.page("#/sandboxes", sbRow)
	if s.count("#new-sandbox, #sandboxes input.pick") != 0 || s.count("#viewer-note") != 1 {
		t.Errorf("viewer's list: create/select controls %d, note %d", s.count("#new-sandbox, #sandboxes input.pick"), s.count("#viewer-note"))
	}
	checkAxe("viewer", "sandboxes")
	s.shot("viewer-sandboxes")
	s.page("#/sandbox/"+shared.ID, "#summary")
	if n := s.count("#actions button"); n != 0 {
		t.Errorf("the viewer is offered %d actions on a sandbox", n)
	}
	for sel, want := range map[string]string{"#no-actions": "sandboxes:write", "#terminal-note": "exec"} {
		if got := s.str(sel, `(document.querySelector(`+jsString(sel)+`) || {}).textContent || ''`); !strings.Contains(got, want) || !strings.Contains(got, "viewer") {
			t.Errorf("viewer's %s says %q, want words naming the viewer role and %q", sel, got, want)
		}
	}
	if s.count("#terminal") != 0 {
		t.Error("the viewer got a terminal")
	}
	checkAxe("viewer", "sandbox")
	s.shot("viewer-sandbox")
	for _, pg := range []string{"templates", "pools", "volumes", "snapshots"} {
		s.page("#/"+pg, "main .card")
		s.shot("viewer-" + pg)
	}
	s.page("#/keys", "#denied")
	s.shot("viewer-keys-denied")
	s.signOut()

	// The member: creates from the form (an egress rule, a label, a
	// secret), runs a command in the new sandbox's terminal, edits a file.
	s.signIn(keys["member"].Key, "member")
	noneOf("member", s.nav(), "Keys", "Secrets", "Audit", "Tenants")
	s.page("#/sandboxes", sbRow)
	if s.count("#sandboxes input.pick") == 0 {
		t.Error("the member cannot select sandboxes for bulk delete")
	}
	s.run("open the form", chromedp.Click(chromedp.CSS("#new-sandbox")), chromedp.WaitVisible(chromedp.CSS("#create-form")))
	s.fill("#new-name", "from-form")
	s.fill("#new-network", "egress")
	s.fill("#new-allow", "example.com:443")
	s.fill("#new-labels", "made=by-form")
	s.fill("#new-secrets", "TOKEN=API_TOKEN")
	s.fill("#new-memory", "256")
	checkAxe("member", "create form")
	s.shot("member-create-form")
	s.run("create", chromedp.Click(chromedp.CSS("#create-submit")), chromedp.WaitVisible(chromedp.CSS("#summary")),
		waitText("main h1", "from-form"), chromedp.WaitVisible(chromedp.CSS(`main h1 .state.running`)))
	made, err := member.GetSandbox(ctx, "from-form")
	if err != nil {
		t.Fatal(err)
	}
	if made.Network != "egress" || !slices.Contains(made.Allow, "example.com:443") || made.Labels["made"] != "by-form" ||
		made.Resources.MemoryBytes != 256<<20 || len(made.Secrets) != 1 || made.Secrets[0].Name != "TOKEN" {
		t.Errorf("the form made %+v", made)
	}
	ops := s.strs("actions", `[...document.querySelectorAll('#actions button')].map(b => b.dataset.op)`)
	if !slices.Contains(ops, "pause") || !slices.Contains(ops, "delete") || slices.Contains(ops, "resume") || slices.Contains(ops, "start") {
		t.Errorf("a running sandbox offers %q", ops)
	}
	s.run("rules shown", waitText("#rules", "example.com:443"))
	s.run("terminal", chromedp.WaitVisible(chromedp.CSS(`#terminal .xterm-rows`)), waitText(`#terminal-status`, "connected"))
	s.waitTerminalLine("no shell prompt", promptLine)
	s.typeLine(`echo "made-$API_TOKEN"`)
	s.waitTerminalLine("the secret's value", func(l string) bool { return l == "made-s3cret-from-the-vault" })
	s.shot("member-sandbox")
	// Edit a file in the browser; berth exec reads the change.
	execOut(t, d, made.ID, "sh", "-c", "echo before > /tmp/edit.txt")
	s.fill("#files-path", "/tmp")
	s.run("open /tmp", chromedp.Click(chromedp.CSS(`#files button[type=submit]`)), waitText("#file-list", "edit.txt"),
		chromedp.Click(chromedp.CSS(`#file-list button.edit[data-name="edit.txt"]`)), chromedp.WaitVisible(chromedp.CSS("#editor-text")))
	s.fill("#editor-text", "edited in the console\n")
	s.run("save", chromedp.Click(chromedp.CSS("#editor-save")), chromedp.WaitNotPresent(chromedp.CSS("#editor")))
	if got := execOut(t, d, made.ID, "cat", "/tmp/edit.txt"); got != "edited in the console\n" {
		t.Errorf("after the edit, the file holds %q", got)
	}
	s.shot("member-files")
	// Pause shows Resume and no Pause; the state follows the events.
	s.run("pause", chromedp.Click(chromedp.CSS(`#actions button[data-op="pause"]`)), chromedp.WaitVisible(chromedp.CSS(`#actions button[data-op="resume"]`)))
	if s.count(`#actions button[data-op="pause"]`) != 0 {
		t.Error("a paused sandbox still offers pause")
	}
	s.run("resume", chromedp.Click(chromedp.CSS(`#actions button[data-op="resume"]`)), chromedp.WaitVisible(chromedp.CSS(`#actions button[data-op="pause"]`)))
	// Search narrows the list; bulk delete removes what is selected, and
	// the rows go with the events.
	var bulk []string
	for _, n := range []string{"bulk-a", "bulk-b"} {
		sb, err := member.CreateSandbox(ctx, api.CreateSandboxRequest{Name: n, Labels: map[string]string{"batch": "7"}})
		if err != nil {
			t.Fatal(err)
		}
		bulk = append(bulk, sb.ID)
	}
	s.page("#/sandboxes", `#sandboxes tr[data-id="`+bulk[1]+`"]`)
	s.fill("#sb-search", "batch=7")
	s.run("search", waitText("#sb-count", "2 of 4"))
	for _, id := range bulk {
		s.run("select "+id, chromedp.Click(chromedp.CSS(`#sandboxes tr[data-id="`+id+`"] input.pick`)))
	}
	s.shot("member-bulk-select")
	s.run("confirm bulk delete", chromedp.Click(chromedp.CSS("#bulk-delete")), waitText("#bulk-delete", "Really"),
		chromedp.Click(chromedp.CSS("#bulk-delete")), chromedp.WaitNotPresent(chromedp.CSS(`#sandboxes tr[data-id="`+bulk[0]+`"]`)),
		chromedp.WaitNotPresent(chromedp.CSS(`#sandboxes tr[data-id="`+bulk[1]+`"]`)))
	for _, id := range bulk {
		if sb, err := member.GetSandbox(ctx, id); err == nil && sb.State != "deleted" && sb.State != "deleting" {
			t.Errorf("bulk delete left %s %s", id, sb.State)
		}
	}
	s.fill("#sb-search", "")
	s.signOut()

	// The tenant's admin: keys, secrets (names only), the audit log.
	s.signIn(keys["admin"].Key, "admin")
	nav := s.nav()
	noneOf("team admin", nav, "Tenants")
	for _, want := range []string{"Keys", "Secrets", "Audit"} {
		if !slices.Contains(nav, want) {
			t.Errorf("the tenant's admin has no %s page: %q", want, nav)
		}
	}
	s.page("#/keys", "#keys")
	if got := s.str("keys", `document.querySelector('#keys').textContent`); !strings.Contains(got, "team-viewer") || !strings.Contains(got, "team-member") {
		t.Errorf("the keys page lists %q", got)
	}
	checkAxe("team admin", "keys")
	s.shot("admin-keys")
	s.page("#/secrets", "#secrets")
	if got := s.str("secrets", `document.querySelector('main').textContent`); !strings.Contains(got, "TOKEN") || strings.Contains(got, "s3cret") {
		t.Errorf("the secrets page shows %q", got)
	}
	s.shot("admin-secrets")
	s.page("#/audit", "#audit")
	s.run("verify", chromedp.Click(chromedp.CSS("#audit-verify")), waitText("#audit-verified", "intact"))
	if got := s.str("audit", `document.querySelector('#audit').textContent`); !strings.Contains(got, "POST /v1/sandboxes") {
		t.Errorf("the tenant's audit log lists no create: %.300q", got)
	}
	checkAxe("team admin", "audit")
	s.shot("admin-audit")
	s.page("#/", "#quota")
	s.shot("admin-dashboard")
	s.signOut()

	// The host's administrator, with a warm pool filled: its members are
	// no one's sandboxes and never listed.
	if _, err := host.SetPool(ctx, "base", 2); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if p, err := host.GetPool(ctx, "base"); err == nil && p.Ready >= 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the pool never filled")
		}
	}
	s.signIn(hostKey, "admin")
	s.page("#/sandboxes", sbRow)
	s.run("live", waitText("#live", "live"))
	// Pool members are in the event stream (the old console listed every
	// sandbox named there) but in no list.
	listed := map[string]bool{}
	sbs, err := host.ListSandboxes(ctx, false)
	if err != nil {
		t.Fatal(err)
	}
	for _, sb := range sbs {
		listed[sb.ID] = true
	}
	var pool []string
	for _, id := range eventSandboxes(t, base, hostKey) {
		if !listed[id] {
			pool = append(pool, id)
		}
	}
	if len(pool) < 2 {
		t.Fatalf("the event stream names %d sandboxes no list shows; want the pool's 2 members", len(pool))
	}
	// Let the stream's updates land (a re-page follows events by 1.5 s).
	time.Sleep(3 * time.Second)
	rows := s.strs("rows", `[...document.querySelectorAll('#sandboxes tbody tr[data-id]')].map(r => r.dataset.id)`)
	for _, id := range pool {
		if slices.Contains(rows, id) {
			t.Errorf("the warm pool's member %s is listed as a sandbox", id)
		}
	}
	if len(rows) != len(sbs) {
		t.Errorf("the list shows %d rows, the API %d sandboxes", len(rows), len(sbs))
	}
	s.shot("host-sandboxes")
	s.page("#/pools", "#pools")
	s.shot("host-pools")
	s.page("#/tenants", "#tenants")
	if got := s.str("tenants", `document.querySelector('#tenants').textContent`); !strings.Contains(got, "team") {
		t.Errorf("the tenants page lists %q", got)
	}
	checkAxe("host", "tenants")
	s.shot("host-tenants")
	s.page("#/", "#charts")
	s.shot("host-dashboard")
	// A phone's width: every page fits.
	s.run("phone", chromedp.EmulateViewport(375, 812, chromedp.EmulateMobile))
	for _, pg := range []string{"sandboxes", "sandbox/" + shared.ID, "templates", "keys", "audit"} {
		s.page("#/"+pg, "main h1")
		if w := s.str("width", `document.documentElement.scrollWidth + ' ' + window.innerWidth`); func() bool {
			var sw, iw int
			_, _ = fmt.Sscan(w, &sw, &iw)
			return sw > iw+1
		}() {
			t.Errorf("page %s is wider than a 375 px screen (%s)", pg, w)
		}
		s.shot("phone-" + strings.ReplaceAll(strings.Split(pg, "/")[0], "/", "-"))
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

// eventSandboxes is every sandbox id the event log names, as key sees it.
func eventSandboxes(t *testing.T, base, key string) []string {
	t.Helper()
	var ids []string
	after := int64(0)
	for {
		req, _ := http.NewRequest("GET", base+"/v1/events?limit=500&after="+strconv.FormatInt(after, 10), nil)
		req.Header.Set("Authorization", "Bearer "+key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var evs []api.Event
		err = json.NewDecoder(resp.Body).Decode(&evs)
		resp.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		if len(evs) == 0 {
			return ids
		}
		for _, e := range evs {
			if e.SandboxID != "" && !slices.Contains(ids, e.SandboxID) {
				ids = append(ids, e.SandboxID)
			}
			after = max(after, e.ID)
		}
	}
}
