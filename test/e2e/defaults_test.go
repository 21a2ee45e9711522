package e2e

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/berth-sh/berth/api"
)

// TestPolicyDefaults: a request's own policy wins, then the template's,
// then the server's.
func TestPolicyDefaults(t *testing.T) {
	parallel(t)
	d := startDaemonWith(t, "--default-idle-timeout", "5m", "--default-max-age", "48h")
	ctx := context.Background()
	file := filepath.Join(t.TempDir(), "t.yaml")
	os.WriteFile(file, []byte(`name: policed
from: base
policy: {idle_timeout: 10m, on_idle: stop, retention: 24h}
network: {mode: none}
`), 0o644)
	if _, e, code := d.cli("apply", "-f", file); code != 0 {
		t.Fatalf("apply: %s", e)
	}
	plain, err := d.c.CreateSandbox(ctx, api.CreateSandboxRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if plain.Policy.IdleTimeoutSeconds != 300 || plain.Policy.MaxAgeSeconds != 48*3600 {
		t.Fatalf("server defaults: %+v", plain.Policy)
	}
	fromTpl, err := d.c.CreateSandbox(ctx, api.CreateSandboxRequest{Template: "policed"})
	if err != nil {
		t.Fatal(err)
	}
	if p := fromTpl.Policy; p.IdleTimeoutSeconds != 600 || p.OnIdle != "stop" || p.RetentionSeconds != 86400 || p.MaxAgeSeconds != 48*3600 {
		t.Fatalf("template defaults: %+v", p)
	}
	own, err := d.c.CreateSandbox(ctx, api.CreateSandboxRequest{Template: "policed", Policy: api.Policy{IdleTimeoutSeconds: 30, OnIdle: "pause"}})
	if err != nil {
		t.Fatal(err)
	}
	if p := own.Policy; p.IdleTimeoutSeconds != 30 || p.OnIdle != "pause" || p.RetentionSeconds != 86400 {
		t.Fatalf("request over template: %+v", p)
	}
}
