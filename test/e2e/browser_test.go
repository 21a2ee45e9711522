package e2e

import (
	"context"
	"encoding/base64"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/client"
)

// browserDomain is the --domain of the browser tests: Chromium maps every
// name under it to the daemon's loopback address (--host-resolver-rules),
// so no name is ever looked up.
const browserDomain = "berth.test"

// browserEnv is a daemon with a TCP listener and a --domain, its admin
// client, and Chromium.
type browserEnv struct {
	t        *testing.T
	d        *daemon
	addr     string // 127.0.0.1:port
	port     string
	admin    *client.Client
	chromium string
}

func newBrowserEnv(t *testing.T) *browserEnv {
	chromium, err := exec.LookPath("chromium")
	if err != nil {
		t.Fatal("the browser test needs Debian's chromium: run scripts/install-deps.sh (make deps)")
	}
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	addr := ln.Addr().String()
	ln.Close()
	d := startDaemonWith(t, "--insecure-listen", addr, "--domain", browserDomain)
	key, _ := os.ReadFile(d.dataDir + "/admin.key")
	admin, err := client.New("http://"+addr, strings.TrimSpace(string(key)))
	if err != nil {
		t.Fatal(err)
	}
	_, port, _ := net.SplitHostPort(addr)
	return &browserEnv{t: t, d: d, addr: addr, port: port, admin: admin, chromium: chromium}
}

// serve writes files into sandbox id's /srv/<port> and serves them there
// on 127.0.0.1:port, and waits until the port listens.
func (b *browserEnv) serve(id string, port int, files map[string]string) {
	b.t.Helper()
	dir := "/srv/" + strconv.Itoa(port)
	script := "mkdir -p " + dir
	for name, content := range files {
		script += " && echo " + base64.StdEncoding.EncodeToString([]byte(content)) + " | base64 -d > " + dir + "/" + name
	}
	script += " && (cd " + dir + " && python3 -m http.server " + strconv.Itoa(port) + " --bind 127.0.0.1 >/dev/null 2>&1 &)"
	execOut(b.t, b.d, id, "sh", "-c", script)
	deadline := time.Now().Add(15 * time.Second)
	for {
		out, _, code := b.d.cli("exec", id, "--", "python3", "-c", "import socket; socket.create_connection(('127.0.0.1', "+strconv.Itoa(port)+"), 1)")
		if code == 0 {
			return
		}
		if time.Now().After(deadline) {
			b.t.Fatalf("port %d never listened: %s", port, out)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// hostURL is the host-routed URL of sandbox id's port.
func (b *browserEnv) hostURL(id string, port int) string {
	return "http://" + strconv.Itoa(port) + "-" + id + "." + browserDomain + ":" + b.port + "/"
}

// dom loads url in a fresh headless Chromium profile and returns the DOM
// it ends with.
func (b *browserEnv) dom(url string) string {
	b.t.Helper()
	profile := b.t.TempDir()
	cctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(cctx, b.chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
		"--no-first-run", "--disable-background-networking", "--disable-component-update", "--disable-sync",
		"--host-resolver-rules=MAP *."+browserDomain+" 127.0.0.1",
		"--user-data-dir="+profile, "--virtual-time-budget=15000", "--dump-dom", url)
	cmd.WaitDelay = 5 * time.Second
	out, err := cmd.Output()
	if err != nil {
		b.t.Fatalf("chromium on %s: %v", url, err)
	}
	return string(out)
}

// TestPortTokenInBrowser: a port token opens one port of one sandbox in a
// real browser session (Debian's Chromium, headless) and no other. The
// browser follows the token's browser_url, the port's own host name: the
// proxy turns the query parameter into a cookie of that host and redirects
// to the bare URL, whose page loads; that page's own script then asks for
// a subresource of its own port (same host: the cookie goes along) and
// for a second port of the same sandbox (another host: no cookie, and
// another origin), and writes both into the DOM the browser prints.
func TestPortTokenInBrowser(t *testing.T) {
	parallel(t)
	b := newBrowserEnv(t)
	ctx := context.Background()
	sb, err := b.admin.CreateSandbox(ctx, api.CreateSandboxRequest{})
	if err != nil {
		t.Fatal(err)
	}
	defer b.admin.DeleteSandbox(context.Background(), sb.ID, true)
	page := `<html><body><h1 id="t">PAGE-8000</h1><pre id="r">pending</pre><script>
(async () => {
  const probe = async (u) => { try { const r = await fetch(u, {credentials: "include"}); return r.status + ":" + (await r.text()).slice(0, 40); } catch (e) { return "error:" + e; } };
  const own = await probe("data.txt");
  const other = await probe("` + b.hostURL(sb.ID, 8001) + `");
  document.getElementById("r").textContent = "OWN=" + own + " OTHER=" + other + " DONE";
})();
</script></body></html>`
	b.serve(sb.ID, 8000, map[string]string{"index.html": page, "data.txt": "own-data"})
	b.serve(sb.ID, 8001, map[string]string{"index.html": "SECRET-8001"})
	tok, err := b.admin.CreatePortToken(ctx, sb.ID, 8000, api.CreatePortTokenRequest{TTLSeconds: 300})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(tok.BrowserURL, b.hostURL(sb.ID, 8000)) {
		t.Fatalf("browser_url %q, want the port's host name %s", tok.BrowserURL, b.hostURL(sb.ID, 8000))
	}
	got := b.dom(tok.BrowserURL)
	if i := strings.Index(got, "OWN="); i >= 0 {
		t.Logf("the page saw: %s", got[i:min(len(got), i+160)])
	}
	if !strings.Contains(got, "PAGE-8000") {
		t.Fatalf("the token's port did not open in the browser:\n%s", got)
	}
	if !strings.Contains(got, "OWN=200:own-data") || !strings.Contains(got, "DONE") {
		t.Fatalf("the page's own subresource (cookie after the redirect) did not load:\n%s", got)
	}
	if strings.Contains(got, "SECRET-8001") {
		t.Fatalf("the token for port 8000 opened port 8001 too:\n%s", got)
	}
	// Straight to the other port with the token: refused.
	if other := b.dom(b.hostURL(sb.ID, 8001) + "?berth_port_token=" + tok.Token); strings.Contains(other, "SECRET-8001") {
		t.Fatalf("port 8001 opened with port 8000's token:\n%s", other)
	}
	// No token, a fresh browser: nothing opens.
	if bare := b.dom(b.hostURL(sb.ID, 8000)); strings.Contains(bare, "PAGE-8000") {
		t.Fatalf("port 8000 opened without a token:\n%s", bare)
	}
	// The path-routed proxy on the daemon's origin is no browser's door:
	// the query token opens nothing there.
	if path := b.dom("http://" + b.addr + "/v1/sandboxes/" + sb.ID + "/ports/8000/?berth_port_token=" + tok.Token); strings.Contains(path, "PAGE-8000") {
		t.Fatalf("the path-routed proxy took a query token from a browser:\n%s", path)
	}
}

// TestPortTokenCrossOriginRefused: another tenant's public sandbox page
// cannot read a token-protected port (issue #30: it could, in Chromium,
// when port-token links set a cookie on the daemon's own origin). The
// attacker's page plants the victim's token links in frames — the
// host-routed one a browser is given, and the path-routed one on the
// daemon's origin — as if its visitor had followed them before, then
// fetches the victim's port both ways with credentials and writes what it
// read into its DOM. Loaded on the daemon's origin (the path-routed
// proxy) and on its own host name, it reads nothing of the victim.
func TestPortTokenCrossOriginRefused(t *testing.T) {
	parallel(t)
	b := newBrowserEnv(t)
	ctx := context.Background()
	victim, err := b.admin.CreateSandbox(ctx, api.CreateSandboxRequest{})
	if err != nil {
		t.Fatal(err)
	}
	defer b.admin.DeleteSandbox(context.Background(), victim.ID, true)
	if _, err := b.admin.CreateTenant(ctx, "evil"); err != nil {
		t.Fatal(err)
	}
	ek, err := b.admin.CreateAPIKey(ctx, api.CreateAPIKeyRequest{Tenant: "evil", Role: "member"})
	if err != nil {
		t.Fatal(err)
	}
	evil, err := client.New("http://"+b.addr, ek.Key)
	if err != nil {
		t.Fatal(err)
	}
	attacker, err := evil.CreateSandbox(ctx, api.CreateSandboxRequest{PublicPorts: []int{9000}})
	if err != nil {
		t.Fatal(err)
	}
	defer b.admin.DeleteSandbox(context.Background(), attacker.ID, true)

	b.serve(victim.ID, 8000, map[string]string{"index.html": "VICTIM-SECRET-8000"})
	tok, err := b.admin.CreatePortToken(ctx, victim.ID, 8000, api.CreatePortTokenRequest{TTLSeconds: 300})
	if err != nil {
		t.Fatal(err)
	}
	pathURL := "http://" + b.addr + "/v1/sandboxes/" + victim.ID + "/ports/8000/"
	attack := `<html><body><pre id="r">pending</pre><script>
(async () => {
  const frame = (u) => new Promise((done) => { const f = document.createElement("iframe"); f.onload = done; f.onerror = done; f.src = u; document.body.appendChild(f); setTimeout(done, 3000); });
  await frame("` + tok.BrowserURL + `");
  await frame("` + pathURL + `?berth_port_token=` + tok.Token + `");
  const probe = async (u) => { try { const r = await fetch(u, {credentials: "include"}); return r.status + ":" + (await r.text()).slice(0, 40); } catch (e) { return "error:" + e; } };
  const viaPath = await probe("` + pathURL + `");
  const viaHost = await probe("` + b.hostURL(victim.ID, 8000) + `");
  document.getElementById("r").textContent = "PATH=" + viaPath + " HOST=" + viaHost + " DONE";
})();
</script></body></html>`
	b.serve(attacker.ID, 9000, map[string]string{"attack.html": attack})

	// The control: the victim's own link opens the port in the browser.
	if got := b.dom(tok.BrowserURL); !strings.Contains(got, "VICTIM-SECRET-8000") {
		t.Fatalf("the victim's token link did not open its port:\n%s", got)
	}
	for _, u := range []string{
		"http://" + b.addr + "/v1/sandboxes/" + attacker.ID + "/ports/9000/attack.html", // the daemon's origin
		b.hostURL(attacker.ID, 9000) + "attack.html",                                    // the attacker's own name
	} {
		got := b.dom(u)
		// What the page's script wrote (its <pre>), if it ran at all.
		if i := strings.Index(got, `<pre id="r">`); i >= 0 {
			rest := got[i+len(`<pre id="r">`):]
			if j := strings.Index(rest, "</pre>"); j >= 0 {
				rest = rest[:j]
			}
			t.Logf("the attacker's page at %s: %s", u, rest)
		}
		if strings.Contains(got, "VICTIM-SECRET-8000") {
			t.Fatalf("the attacker's page at %s read the token-protected port:\n%s", u, got)
		}
	}
}
