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

// TestPortTokenInBrowser: a port token opens one port of one sandbox in a
// real browser session (Debian's Chromium, headless) and no other. The
// browser follows the token URL: the proxy turns the query parameter into
// a cookie scoped to the port's path and redirects to the bare URL, whose
// page loads; that page's own script then asks for a second port of the
// same sandbox (same origin, so the browser sends what it has) and for a
// subresource of its own port, and writes both statuses into the DOM that
// the browser prints. The address bar never keeps the token.
func TestPortTokenInBrowser(t *testing.T) {
	chromium, err := exec.LookPath("chromium")
	if err != nil {
		t.Fatal("the browser test needs Debian's chromium: run scripts/install-deps.sh (make deps)")
	}
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	addr := ln.Addr().String()
	ln.Close()
	d := startDaemonWith(t, "--insecure-listen", addr)
	key, _ := os.ReadFile(d.dataDir + "/admin.key")
	admin, err := client.New("http://"+addr, strings.TrimSpace(string(key)))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	sb, err := admin.CreateSandbox(ctx, api.CreateSandboxRequest{})
	if err != nil {
		t.Fatal(err)
	}
	// Port 8000 serves a page whose script probes port 8001 and its own
	// data.txt; port 8001 serves a secret page the token must not open.
	page := `<html><body><h1 id="t">PAGE-8000</h1><pre id="r">pending</pre><script>
(async () => {
  const probe = async (u) => { try { const r = await fetch(u); return r.status + ":" + (await r.text()).slice(0, 40); } catch (e) { return "error:" + e; } };
  const own = await probe("data.txt");
  const other = await probe("/v1/sandboxes/` + sb.ID + `/ports/8001/");
  document.getElementById("r").textContent = "OWN=" + own + " OTHER=" + other + " DONE";
})();
</script></body></html>`
	execOut(t, d, sb.ID, "sh", "-c", "mkdir -p /srv/a /srv/b && echo "+base64.StdEncoding.EncodeToString([]byte(page))+" | base64 -d > /srv/a/index.html && echo own-data > /srv/a/data.txt && echo SECRET-8001 > /srv/b/index.html && "+
		"(cd /srv/a && python3 -m http.server 8000 --bind 127.0.0.1 >/dev/null 2>&1 &) && (cd /srv/b && python3 -m http.server 8001 --bind 127.0.0.1 >/dev/null 2>&1 &)")
	waitPort := func(port int) {
		deadline := time.Now().Add(15 * time.Second)
		for {
			out, _, code := d.cli("exec", sb.ID, "--", "python3", "-c", "import socket; socket.create_connection(('127.0.0.1', "+strconv.Itoa(port)+"), 1)")
			if code == 0 {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("port %d never listened: %s", port, out)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	waitPort(8000)
	waitPort(8001)
	tok, err := admin.CreatePortToken(ctx, sb.ID, 8000, api.CreatePortTokenRequest{TTLSeconds: 300})
	if err != nil {
		t.Fatal(err)
	}
	dom := func(url string) string {
		t.Helper()
		profile := t.TempDir()
		cctx, cancel := context.WithTimeout(ctx, 60*time.Second)
		defer cancel()
		cmd := exec.CommandContext(cctx, chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
			"--no-first-run", "--disable-background-networking", "--disable-component-update", "--disable-sync",
			"--user-data-dir="+profile, "--virtual-time-budget=10000", "--dump-dom", url)
		cmd.WaitDelay = 5 * time.Second
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("chromium on %s: %v", url, err)
		}
		return string(out)
	}
	base := "http://" + addr
	got := dom(base + "/v1/sandboxes/" + sb.ID + "/ports/8000/?berth_port_token=" + tok.Token)
	if i := strings.Index(got, "OWN="); i >= 0 {
		t.Logf("the page saw: %s", got[i:min(len(got), i+160)])
	}
	if !strings.Contains(got, "PAGE-8000") {
		t.Fatalf("the token's port did not open in the browser:\n%s", got)
	}
	if !strings.Contains(got, "OWN=200:own-data") || !strings.Contains(got, "DONE") {
		t.Fatalf("the page's own subresource (cookie after the redirect) did not load:\n%s", got)
	}
	if strings.Contains(got, "SECRET-8001") || !strings.Contains(got, "OTHER=401") {
		t.Fatalf("the token for port 8000 opened port 8001 too:\n%s", got)
	}
	// Straight to the other port with the token: refused.
	if other := dom(base + "/v1/sandboxes/" + sb.ID + "/ports/8001/?berth_port_token=" + tok.Token); strings.Contains(other, "SECRET-8001") {
		t.Fatalf("port 8001 opened with port 8000's token:\n%s", other)
	}
	// No token, a fresh browser: nothing opens.
	if bare := dom(base + "/v1/sandboxes/" + sb.ID + "/ports/8000/"); strings.Contains(bare, "PAGE-8000") {
		t.Fatalf("port 8000 opened without a token:\n%s", bare)
	}
	if _, err := admin.DeleteSandbox(ctx, sb.ID, true); err != nil {
		t.Fatal(err)
	}
}
