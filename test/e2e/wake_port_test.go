package e2e

import (
	"context"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/berth-sh/berth/api"
)

// TestPreviewWakesStoppedSandbox: one port request to a stopped
// --auto-resume sandbox starts it, waits until its service listens
// again (a bounded wait, the daemon's) and answers with the page: 200,
// not 502 "nothing listens there". Then the same after a pause.
func TestPreviewWakesStoppedSandbox(t *testing.T) {
	parallel(t)
	d := startDaemon(t)
	ctx := context.Background()
	if _, e, code := d.cli("template", "build", "wakesvc", "--from", "base",
		"--run", "mkdir -p /srv && echo woken-site > /srv/index.html",
		"--service", "python3 -m http.server 8000 -d /srv", "--service-restart", "always"); code != 0 {
		t.Fatalf("build with a service: %d %q", code, e)
	}
	sb, err := d.c.CreateSandbox(ctx, api.CreateSandboxRequest{Template: "wakesvc", Persistent: true, Policy: api.Policy{AutoResume: true}})
	if err != nil {
		t.Fatal(err)
	}
	hc := unixHTTP(d)
	hc.Timeout = 2 * time.Minute // generous: the wait inside is the daemon's, bounded at 30 s
	waitFor(t, "the service on :8000", func() bool {
		code, body := getPort(t, hc, sb.ID, "8000", "index.html")
		return code == 200 && body == "woken-site\n"
	})
	once := func(what string) {
		t.Helper()
		// One request, no retry: the wake and the wait are the daemon's.
		resp, err := hc.Get("http://berth/v1/sandboxes/" + sb.ID + "/ports/8000/index.html")
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || string(b) != "woken-site\n" {
			t.Fatalf("%s: %d %q, want 200 and the page", what, resp.StatusCode, b)
		}
		if got, err := d.c.GetSandbox(ctx, sb.ID); err != nil || got.State != "running" {
			t.Fatalf("%s: sandbox %+v %v, want running", what, got, err)
		}
	}
	if _, err := d.c.Stop(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	once("a preview request to the stopped sandbox")
	if _, err := d.c.Pause(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	once("a preview request to the paused sandbox")
	if _, err := d.c.DeleteSandbox(ctx, sb.ID, true); err != nil {
		t.Fatal(err)
	}
}
