package e2e

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/browser"
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

// bait is what a hostile sandbox names its files and labels: rendered as
// HTML it would run its onerror (and ask the daemon for /console/x).
const bait = `<img src=x onerror="document.title=document.domain;alert(1)">`

// browserLog is what the devtools protocol saw of one browser session:
// every request, every console message and uncaught exception, every
// dialog.
type browserLog struct {
	ctx      context.Context // the browser's, to dismiss a dialog
	mu       sync.Mutex
	requests []string
	problems []string
	loads    int
}

func (b *browserLog) listen(ev any) {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch e := ev.(type) {
	case *network.EventRequestWillBeSent:
		b.requests = append(b.requests, e.Request.URL)
	case *network.EventWebSocketCreated:
		b.requests = append(b.requests, e.URL)
	case *runtime.EventConsoleAPICalled:
		if e.Type == runtime.ConsoleAPICalledTypeError || e.Type == runtime.ConsoleAPICalledTypeAssert {
			var args []string
			for _, a := range e.Args {
				args = append(args, fmt.Sprintf("%v%s", a.Value, a.Description))
			}
			b.problems = append(b.problems, "console."+string(e.Type)+": "+strings.Join(args, " "))
		}
	case *runtime.EventExceptionThrown:
		msg := e.ExceptionDetails.Text
		if e.ExceptionDetails.Exception != nil {
			msg += " " + e.ExceptionDetails.Exception.Description
		}
		b.problems = append(b.problems, "exception: "+msg)
	case *log.EventEntryAdded:
		if e.Entry.Level == log.EntryLevelError {
			b.problems = append(b.problems, "log: "+e.Entry.Text+" "+e.Entry.URL)
		}
	case *page.EventJavascriptDialogOpening:
		b.problems = append(b.problems, "dialog: "+e.Message)
		// Dismissed, so the session goes on; the test fails on the problem.
		go chromedp.Call(b.ctx, page.HandleJavaScriptDialog, page.HandleJavaScriptDialogParams{Accept: false})
	case *page.EventLoadEventFired:
		b.loads++
	}
}

func (b *browserLog) snapshot() (requests, problems []string, loads int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]string(nil), b.requests...), append([]string(nil), b.problems...), b.loads
}

// artifactsDir is where a test's screenshots are kept: $BERTH_ARTIFACTS,
// else test/e2e/artifacts (git-ignored), one directory per test.
func artifactsDir(t *testing.T) string {
	base := os.Getenv("BERTH_ARTIFACTS")
	if base == "" {
		base = "artifacts"
	}
	dir, err := filepath.Abs(filepath.Join(base, t.Name()))
	if err != nil {
		t.Fatal(err)
	}
	os.RemoveAll(dir)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestConsoleInBrowser drives the web console in Debian's Chromium
// (headless, over the devtools protocol): sign in with a key, watch a
// sandbox made through the API appear in the list without a reload, open
// it and see its events, run `echo hi` in the terminal and read hi on the
// screen, upload and download a file, visit every page (laptop and phone
// sizes), sign out, and sign in again with `berth console`'s one-time
// link — whose replay is refused. Throughout, a hostile file name and
// label are shown as text and run nothing, no page logs an error, and the
// browser asks nothing of any host but the daemon. Screenshots go to
// artifactsDir.
func TestConsoleInBrowser(t *testing.T) {
	parallel(t)
	chromium, err := exec.LookPath("chromium")
	if err != nil {
		t.Fatal("the console test needs Debian's chromium: run scripts/install-deps.sh (make deps)")
	}
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	addr := ln.Addr().String()
	ln.Close()
	d := startDaemonWith(t, "--insecure-listen", addr)
	keyb, _ := os.ReadFile(d.dataDir + "/admin.key")
	key := strings.TrimSpace(string(keyb))
	admin, err := client.New("http://"+addr, key)
	if err != nil {
		t.Fatal(err)
	}
	base := "http://" + addr
	shots := artifactsDir(t)
	downloads := t.TempDir()
	ctx := context.Background()

	// A sandbox that plants the bait, made before the browser opens.
	hostile, err := admin.CreateSandbox(ctx, api.CreateSandboxRequest{Labels: map[string]string{"note": bait}})
	if err != nil {
		t.Fatal(err)
	}
	execOut(t, d, hostile.ID, "sh", "-c", "cd /tmp && echo hello-from-the-sandbox > hello.txt && echo x > '"+bait+"'")

	profile := t.TempDir()
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(chromium), chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU, chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck, chromedp.UserDataDir(profile), chromedp.WindowSize(1280, 900),
		chromedp.Flag("disable-background-networking", true), chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true), chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-features", "Translate,OptimizationHints,MediaRouter,AutofillServerCommunication"),
		// Network safety: no name resolves but the daemon's loopback
		// address, whatever Chromium tries on its own.
		chromedp.Flag("host-resolver-rules", "MAP * ~NOTFOUND , EXCLUDE 127.0.0.1"),
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(ctx, opts...)
	defer cancelAlloc()
	bctx, cancelBrowser := chromedp.NewContext(actx)
	defer cancelBrowser()
	bl := &browserLog{ctx: bctx}
	start := time.Now()
	// The first run starts the browser: under the test's context, not a
	// timeout (which would end the browser with it).
	if err := chromedp.Listen(bctx, bl.listen); err != nil {
		t.Fatalf("starting %s: %v", chromium, err)
	}
	if err := chromedp.Do(bctx, chromedp.Func(func(ctx context.Context, _ *chromedp.Target) error {
		if _, err := chromedp.Call(ctx, network.Enable, network.EnableParams{}); err != nil {
			return err
		}
		if _, err := chromedp.Call(ctx, log.Enable, cdp.Empty{}); err != nil {
			return err
		}
		if _, err := chromedp.Call(ctx, runtime.Enable, cdp.Empty{}); err != nil {
			return err
		}
		if _, err := chromedp.Call(ctx, page.Enable, page.EnableParams{}); err != nil {
			return err
		}
		_, err := chromedp.Call(ctx, browser.SetDownloadBehavior, browser.SetDownloadBehaviorParams{
			Behavior: browser.SetDownloadBehaviorBehaviorAllow, DownloadPath: downloads})
		return err
	})); err != nil {
		t.Fatalf("the devtools protocol: %v", err)
	}
	tctx, cancelT := context.WithTimeout(bctx, 90*time.Second)
	defer cancelT()
	fail := func(what string, err error) {
		t.Helper()
		sctx, c := context.WithTimeout(bctx, 10*time.Second)
		shot(t, sctx, shots, "failed")
		c()
		_, problems, _ := bl.snapshot()
		t.Fatalf("%s: %v\nbrowser problems: %q\ndaemon log tail:\n%s", what, err, problems, tail(d.logs.String(), 3000))
	}
	run := func(what string, steps ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		if err := chromedp.Do(tctx, steps...); err != nil {
			fail(what, err)
		}
	}
	text := func(what, sel string) string {
		t.Helper()
		v, err := chromedp.Run(tctx, chromedp.Text(chromedp.CSS(sel)))
		if err != nil {
			fail(what, err)
		}
		return v
	}
	str := func(what, expr string) string {
		t.Helper()
		v, err := chromedp.Run(tctx, chromedp.Evaluate[string](expr))
		if err != nil {
			fail(what, err)
		}
		return v
	}
	strs := func(what, expr string) []string {
		t.Helper()
		v, err := chromedp.Run(tctx, chromedp.Evaluate[[]string](expr))
		if err != nil {
			fail(what, err)
		}
		return v
	}
	css := func(s string) chromedp.CSS { return chromedp.CSS(s) }

	// Sign in with the key.
	run("sign in", chromedp.Navigate(base+"/console/"), chromedp.WaitVisible(css("#apikey")),
		chromedp.SendKeys(css("#apikey"), key), chromedp.Click(css("#signin-submit")),
		chromedp.WaitVisible(css("#charts")))
	if stored := str("read the session", `sessionStorage.getItem('berth.key')`); stored != key {
		t.Fatalf("sessionStorage holds %q", stored)
	}
	// The dashboard draws from /metrics: wait for two samples.
	run("dashboard", chromedp.WaitVisible(css(`[data-chart="creates"] polyline`)))
	shot(t, tctx, shots, "dashboard")

	// The list, then a sandbox made through the API appears in it.
	// The list follows the event stream (the indicator says live: the
	// list's polling, its fallback, is off while the stream is up).
	run("list", chromedp.Click(css(`a[href="#/sandboxes"]`)), chromedp.WaitVisible(css(`#sandboxes tr[data-id="`+hostile.ID+`"]`)),
		waitText("#live", "live"))
	_, _, loadsBefore := bl.snapshot()
	sb, err := admin.CreateSandbox(ctx, api.CreateSandboxRequest{Name: "console-e2e"})
	if err != nil {
		t.Fatal(err)
	}
	execOut(t, d, sb.ID, "sh", "-c", "echo downloaded-through-the-console > /tmp/down.txt")
	row := `#sandboxes tr[data-id="` + sb.ID + `"]`
	run("the new sandbox appears", chromedp.WaitVisible(css(row)), chromedp.WaitVisible(css(row+` .state.running`)))
	if rowText := text("its row", row); !strings.Contains(rowText, "console-e2e") || !strings.Contains(rowText, "running") {
		t.Errorf("the row says %q", rowText)
	}
	if state := text("stream state", "#live"); state != "live" {
		t.Errorf("the event stream is %q, so the row may have come from polling", state)
	}
	if _, _, loads := bl.snapshot(); loads != loadsBefore {
		t.Errorf("the page reloaded (%d loads, %d before) to show the new sandbox", loads, loadsBefore)
	}
	if labelText := text("the hostile label", `#sandboxes tr[data-id="`+hostile.ID+`"]`); !strings.Contains(labelText, "note="+bait) {
		t.Errorf("the hostile label is not shown as text: %q", labelText)
	}
	shot(t, tctx, shots, "sandboxes")

	// Open it: its events, then the terminal.
	run("open the sandbox", chromedp.Click(css(row+` a.sb-link`)), chromedp.WaitVisible(css(`#timeline tbody tr`)))
	if timeline := text("timeline", `#timeline`); !strings.Contains(timeline, "running") {
		t.Errorf("the timeline shows no transition to running: %q", timeline)
	}
	run("terminal connects", chromedp.WaitVisible(css(`#terminal .xterm-rows`)), waitText(`#terminal-status`, "connected"),
		chromedp.Click(css(`#terminal`)), chromedp.Focus(css(`#terminal .xterm-helper-textarea`)))
	// Typed once the shell shows its prompt, as a person would: typed
	// ahead, the tty echoes the command before the shell runs, and its
	// output lands after the prompt ("# hi").
	// waitLine waits until a line of the terminal (its trailing blanks
	// cut) satisfies ok; what names what is awaited.
	waitLine := func(what string, ok func(line string) bool) {
		for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(100 * time.Millisecond) {
			screen := strs("read the terminal", `[...document.querySelectorAll('#terminal .xterm-rows > div')].map(d => d.textContent.trimEnd())`)
			if slices.ContainsFunc(screen, ok) {
				return
			}
			if time.Now().After(deadline) {
				shot(t, tctx, shots, "terminal-failed")
				t.Fatalf("the terminal shows %s: %q", what, screen)
			}
		}
	}
	waitLine("no shell prompt", func(l string) bool {
		l = strings.TrimSpace(l)
		return strings.HasSuffix(l, "#") || strings.HasSuffix(l, "$")
	})
	run("type a command", chromedp.Focus(css(`#terminal .xterm-helper-textarea`)),
		// Typed as an input method would (SendKeys' key and char events
		// both reach xterm.js, doubling every letter), then Enter.
		chromedp.Func(func(ctx context.Context, _ *chromedp.Target) error {
			_, err := chromedp.Call(ctx, input.InsertText, input.InsertTextParams{Text: "echo hi"})
			return err
		}), chromedp.KeyEvent("\r"))
	waitLine("no line that reads hi", func(l string) bool { return l == "hi" })
	shot(t, tctx, shots, "sandbox")

	// Files: upload, then download.
	local := filepath.Join(t.TempDir(), "upload.txt")
	os.WriteFile(local, []byte("uploaded-through-the-console\n"), 0o644)
	run("open /tmp", chromedp.WaitVisible(css(`#file-list`)), chromedp.SetValue(css(`#files-path`), "/tmp"),
		chromedp.Click(css(`#files button[type=submit]`)), waitText(`#file-list`, "down.txt"))
	run("upload", chromedp.SetUploadFiles(css(`#files-upload`), []string{local}),
		waitText(`#file-list`, "upload.txt"))
	if got := execOut(t, d, sb.ID, "cat", "/tmp/upload.txt"); got != "uploaded-through-the-console\n" {
		t.Errorf("the uploaded file holds %q", got)
	}
	run("download", chromedp.Click(css(`#file-list button[data-name="down.txt"]`)))
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		got, err := os.ReadFile(filepath.Join(downloads, "down.txt"))
		if err == nil && len(got) > 0 {
			if string(got) != "downloaded-through-the-console\n" {
				t.Errorf("the download holds %q", got)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no download arrived in %s: %v", downloads, err)
		}
	}

	// The hostile sandbox's files: the bait is a name, as text.
	run("hostile files", goHash("#/sandbox/"+hostile.ID), chromedp.WaitVisible(css(`#file-list`)),
		chromedp.SetValue(css(`#files-path`), "/tmp"), chromedp.Click(css(`#files button[type=submit]`)), waitText(`#file-list`, "hello.txt"))
	names := strs("names", `[...document.querySelectorAll('#file-list .fname')].map(e => e.textContent)`)
	imgs := str("images", `String(document.querySelectorAll('main img').length)`)
	title := str("title", `document.title`)
	if !slices.Contains(names, bait) || imgs != "0" || title != "berth console" {
		t.Errorf("the hostile file name: names %q, %s img elements, title %q", names, imgs, title)
	}
	shot(t, tctx, shots, "hostile")

	// Every page, at a laptop's size and at a phone's.
	for _, size := range []struct {
		name          string
		width, height int64
		mobile        bool
	}{{"laptop", 1280, 900, false}, {"phone", 390, 844, true}} {
		if size.mobile {
			run("size "+size.name, chromedp.EmulateViewport(size.width, size.height, chromedp.EmulateMobile))
		} else {
			run("size "+size.name, chromedp.EmulateViewport(size.width, size.height))
		}
		for _, pg := range []string{"sandboxes", "templates", "pools", "volumes", "snapshots", "audit", ""} {
			run("page "+pg, goHash("#/"+pg), chromedp.WaitVisible(css(`main h1`)), chromedp.WaitNotPresent(css(`main .loading`)))
			if pg == "sandboxes" {
				run("list rows", chromedp.WaitVisible(css(`#sandboxes`)))
			}
			if errs := strs("errors "+pg, `[...document.querySelectorAll('main .error')].map(e => e.textContent).filter(Boolean)`); len(errs) > 0 {
				t.Errorf("page %q (%s) shows errors: %q", pg, size.name, errs)
			}
			if w := str("width "+pg, `document.documentElement.scrollWidth + ' ' + window.innerWidth`); func() bool {
				var sw, iw int
				fmt.Sscan(w, &sw, &iw)
				return sw > iw+1
			}() {
				t.Errorf("page %q is wider than the %s screen (scroll width, window width: %s)", pg, size.name, w)
			}
			name := pg
			if name == "" {
				name = "dashboard"
			}
			shot(t, tctx, shots, size.name+"-"+name)
		}
	}
	run("laptop again", chromedp.ResetViewport())
	run("audit", goHash("#/audit"), chromedp.WaitVisible(css(`main table`)))
	if auditText := text("audit", `main table`); !strings.Contains(auditText, "POST /v1/sandboxes") {
		t.Errorf("the audit page lists no create: %.300q", auditText)
	}

	// Sign out; sign in with berth console's one-time link.
	run("sign out", chromedp.Click(css(`#signout`)), chromedp.WaitVisible(css("#apikey")))
	if stored := str("session after sign-out", `sessionStorage.getItem('berth.key') || ''`); stored != "" {
		t.Fatalf("the key survived the sign-out: %q", stored)
	}
	out, errOut, code := d.cli("console")
	link := regexp.MustCompile(`http://\S+/console/#code=\S+`).FindString(out)
	if code != 0 || !strings.HasPrefix(link, base+"/console/#code=berth_signin_") {
		t.Fatalf("berth console: %d %q %q", code, out, errOut)
	}
	// A new page, as a link opened from a terminal is.
	run("sign in by link", chromedp.Navigate("about:blank"), chromedp.Navigate(link), chromedp.WaitVisible(css("#charts")))
	hash := str("hash", `location.hash`)
	stored := str("session key", `sessionStorage.getItem('berth.key') || ''`)
	if strings.Contains(hash, "code") || !strings.HasPrefix(stored, "berth_") || stored == key {
		t.Errorf("after the link: hash %q, session key %q", hash, stored)
	}
	run("sign out again", chromedp.Click(css(`#signout`)), chromedp.WaitVisible(css("#apikey")))
	// The console's key died with the sign-out.
	c2, err := client.New(base, stored)
	if err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if _, err := c2.ListSandboxes(ctx, false); err != nil {
			break
		}
		if time.Now().After(deadline) {
			t.Error("the console key from the link still works after sign-out")
			break
		}
	}
	_, problems, _ := bl.snapshot()
	if len(problems) > 0 {
		t.Errorf("the browser reported problems:\n%s", strings.Join(problems, "\n"))
	}
	// The link again (a replay): refused, and the page says so (the
	// browser logs the refused exchange, the one problem allowed here).
	run("replay the link", chromedp.Navigate("about:blank"), chromedp.Navigate(link), waitText("#signin-error", "did not work"))
	shot(t, tctx, shots, "replayed-link")
	t.Logf("browser session: %v, %d screenshots in %s", time.Since(start).Round(time.Millisecond), countFiles(shots), shots)

	requests, after, _ := bl.snapshot()
	for _, p := range after[len(problems):] {
		if !strings.Contains(p, "status of 401") || !strings.HasSuffix(p, "/v1/console/session") {
			t.Errorf("the browser reported a problem at the replay: %s", p)
		}
	}
	sawStream := false
	for _, r := range requests {
		u, err := url.Parse(r)
		if err != nil {
			t.Errorf("unparsable request %q", r)
			continue
		}
		switch u.Scheme {
		case "data", "blob", "about":
			continue
		case "http", "ws":
			if u.Host == addr {
				sawStream = sawStream || u.Path == "/v1/events"
				if strings.HasSuffix(u.Path, "/x") || strings.Contains(u.RawQuery, "code") || strings.Contains(u.RawQuery, "berth_") {
					t.Errorf("a request the bait made, or one carrying a credential in its URL: %s", r)
				}
				continue
			}
		}
		t.Errorf("a request to another host than the daemon: %s", r)
	}
	if !sawStream {
		t.Error("the list never read the event stream /v1/events")
	}
	if len(requests) < 20 {
		t.Errorf("only %d requests recorded: is the recorder listening?", len(requests))
	}
	for _, id := range []string{sb.ID, hostile.ID} {
		if _, err := admin.DeleteSandbox(ctx, id, true); err != nil {
			t.Error(err)
		}
	}
}

// goHash moves the console to the route hash (a same-document
// navigation: no load to wait for).
func goHash(hash string) chromedp.Action[chromedp.Void] {
	return chromedp.Func(func(ctx context.Context, t *chromedp.Target) error {
		_, err := chromedp.Evaluate[string](fmt.Sprintf(`location.hash = %q`, hash))(ctx, t)
		return err
	})
}

// waitText waits until the element sel's text contains want.
func waitText(sel, want string) chromedp.Action[chromedp.Void] {
	return chromedp.Func(func(ctx context.Context, t *chromedp.Target) error {
		for {
			got, err := chromedp.Evaluate[string](fmt.Sprintf(`(document.querySelector(%q) || {}).textContent || ''`, sel))(ctx, t)
			if err != nil {
				return err
			}
			if strings.Contains(got, want) {
				return nil
			}
			select {
			case <-ctx.Done():
				return fmt.Errorf("%s never read %q (last %q): %w", sel, want, got, ctx.Err())
			case <-time.After(100 * time.Millisecond):
			}
		}
	})
}

// shot keeps a screenshot of the page as name.png in dir.
func shot(t *testing.T, ctx context.Context, dir, name string) {
	buf, err := chromedp.Run(ctx, chromedp.CaptureScreenshot())
	if err != nil {
		t.Logf("screenshot %s: %v", name, err)
		return
	}
	if err := os.WriteFile(filepath.Join(dir, name+".png"), buf, 0o644); err != nil {
		t.Error(err)
	}
}

func countFiles(dir string) int {
	es, _ := os.ReadDir(dir)
	return len(es)
}
