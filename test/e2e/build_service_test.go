package e2e

import (
	"context"
	"strings"
	"testing"

	"github.com/berth-sh/berth/api"
)

// berth template build --service (#14 item 4): a built template carries a
// supervised service, which its sandboxes run and which answers on its
// port after create; a bad service is refused before anything is built.
func TestTemplateBuildService(t *testing.T) {
	parallel(t)
	d := startDaemon(t)
	ctx := context.Background()
	if _, e, code := d.cli("template", "build", "websvc", "--from", "base",
		"--run", "mkdir -p /srv && echo built-site > /srv/index.html",
		"--service", "python3 -m http.server 8000 -d /srv", "--service-restart", "always"); code != 0 {
		t.Fatalf("build with a service: %d %q", code, e)
	}
	if _, err := d.c.GetTemplate(ctx, "websvc"); err != nil {
		t.Fatal(err)
	}
	sb, err := d.c.CreateSandbox(ctx, api.CreateSandboxRequest{Template: "websvc"})
	if err != nil {
		t.Fatal(err)
	}
	hc := unixHTTP(d)
	waitFor(t, "the built template's service on :8000", func() bool {
		code, body := getPort(t, hc, sb.ID, "8000", "index.html")
		return code == 200 && body == "built-site\n"
	})
	if p, ok := procNamed(procList(t, d, sb.ID), "service"); !ok || p.State != "running" || p.Restart != "always" ||
		strings.Join(p.Argv, " ") != "python3 -m http.server 8000 -d /srv" {
		t.Fatalf("service process: %+v %v", p, ok)
	}

	// Refused before any step runs: nothing named badsvc exists after.
	for _, args := range [][]string{
		{"--service", "sleep 1", "--service-restart", "sometimes"},
		{"--service-restart", "always"},
	} {
		argv := append([]string{"template", "build", "badsvc", "--from", "base", "--run", "true"}, args...)
		if _, e, code := d.cli(argv...); code == 0 || !strings.Contains(e, "restart") {
			t.Errorf("build %v: %d %q", args, code, e)
		}
		if _, err := d.c.GetTemplate(ctx, "badsvc"); err == nil {
			t.Errorf("build %v left a template behind", args)
		}
	}
	if _, err := d.c.DeleteSandbox(ctx, sb.ID, true); err != nil {
		t.Fatal(err)
	}
}
