package e2e

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/berth-sh/berth/api"
)

// unixHTTP is an HTTP client for the daemon's unix socket.
func unixHTTP(d *daemon) *http.Client {
	return &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", d.socket)
	}}}
}

// getPort fetches a path of a sandbox port through the proxy, retrying
// while the server inside is starting (502: nothing listens yet).
func getPort(t *testing.T, hc *http.Client, id, port, path string) (int, string) {
	t.Helper()
	var code int
	var body string
	for i := 0; i < 100; i++ {
		resp, err := hc.Get("http://berth/v1/sandboxes/" + id + "/ports/" + port + "/" + path)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		code, body = resp.StatusCode, string(b)
		if code != 502 {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	return code, body
}

// assertUnreachable checks a proxied request to a closed port: 502 with
// the stable code "unreachable".
func assertUnreachable(t *testing.T, hc *http.Client, id, port string) {
	t.Helper()
	resp, err := hc.Get("http://berth/v1/sandboxes/" + id + "/ports/" + port + "/")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var eb api.ErrorBody
	b, _ := io.ReadAll(resp.Body)
	if err := json.Unmarshal(b, &eb); err != nil || resp.StatusCode != 502 || eb.Error.Code != "unreachable" {
		t.Errorf("closed port %s: %d %s, want 502 with code unreachable", port, resp.StatusCode, b)
	}
}

// TestRunscPortProxy: a runsc sandbox in network mode none (no host
// network namespace to enter) is reached through its agent's dial; a
// closed port is a clean 502, on runsc and runc alike.
func TestRunscPortProxy(t *testing.T) {
	parallel(t)
	d := startRunscDaemon(t)
	ctx := context.Background()
	sb, err := d.c.CreateSandbox(ctx, api.CreateSandboxRequest{Runtime: "runsc"})
	if err != nil {
		t.Fatal(err)
	}
	if sb.Network != "" && sb.Network != "none" {
		t.Fatalf("network %q, want none", sb.Network)
	}
	sh(t, d, sb.ID, "mkdir -p /srv && echo served-from-gvisor > /srv/index.html && head -c 3000000 /dev/zero | tr '\\0' x > /srv/big && cd /srv && (python3 -m http.server 8000 >/dev/null 2>&1 &)")
	hc := unixHTTP(d)
	if code, body := getPort(t, hc, sb.ID, "8000", "index.html"); code != 200 || body != "served-from-gvisor\n" {
		t.Fatalf("proxied GET: %d %q", code, body)
	}
	// A response larger than any buffer on the way.
	if code, body := getPort(t, hc, sb.ID, "8000", "big"); code != 200 || len(body) != 3000000 || strings.Trim(body, "x") != "" {
		t.Errorf("proxied GET of 3 MB: %d, %d bytes", code, len(body))
	}
	// Several in a row and at once: each is its own agent connection.
	done := make(chan string, 8)
	for i := 0; i < 8; i++ {
		go func() {
			code, body := getPort(t, hc, sb.ID, "8000", "index.html")
			if code != 200 {
				body = "status " + http.StatusText(code)
			}
			done <- body
		}()
	}
	for i := 0; i < 8; i++ {
		if b := <-done; b != "served-from-gvisor\n" {
			t.Errorf("concurrent proxied GET: %q", b)
		}
	}
	assertUnreachable(t, hc, sb.ID, "8009")
	// The sandbox is unaffected: exec works, the server still answers.
	if got := sh(t, d, sb.ID, "echo still-here"); got != "still-here" {
		t.Errorf("exec after proxying: %q", got)
	}
	// runc sandboxes answer a closed port the same way.
	rc, err := d.c.CreateSandbox(ctx, api.CreateSandboxRequest{})
	if err != nil {
		t.Fatal(err)
	}
	assertUnreachable(t, hc, rc.ID, "8009")
	for _, id := range []string{sb.ID, rc.ID} {
		if _, err := d.c.DeleteSandbox(ctx, id, true); err != nil {
			t.Fatal(err)
		}
	}
	assertDoctorClean(t, d)
}
