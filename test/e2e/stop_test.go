package e2e

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"

	"github.com/berth-sh/berth/api"
)

// Graceful stop (#14 item 4): stop sends the stop signal (SIGTERM here) to
// background processes and to every other process of the sandbox, waits
// for them, and kills one ignoring it once the grace has passed.
func TestGracefulStopRunc(t *testing.T) {
	parallel(t)
	gracefulStopScenario(t, startDaemon(t), "")
}
func TestGracefulStopRunsc(t *testing.T) {
	parallel(t)
	gracefulStopScenario(t, startRunscDaemon(t), "runsc")
}

func gracefulStopScenario(t *testing.T, d *daemon, runtime string) {
	ctx := context.Background()
	sb, err := d.c.CreateSandbox(ctx, api.CreateSandboxRequest{Runtime: runtime, Persistent: true})
	if err != nil {
		t.Fatal(err)
	}
	id := sb.ID
	run := func(args ...string) string {
		t.Helper()
		out, errOut, code := d.cli(args...)
		if code != 0 {
			t.Fatalf("berth %s: %d %q %q", strings.Join(args, " "), code, out, errOut)
		}
		return strings.TrimSpace(out)
	}
	// A background process of the process table, and an orphan started by
	// an exec (not in the table: only kill(-1) from PID 1 reaches it).
	run("exec", "-d", "--tag", "trap", id, "--", "sh", "-c",
		`trap "echo got-term > /workspace/t; exit 0" TERM; echo ready; while :; do sleep 0.1; done`)
	run("exec", id, "--", "sh", "-c",
		`nohup sh -c 'trap "echo got-term > /workspace/o; exit 0" TERM; touch /tmp/o-ready; while :; do sleep 0.1; done' >/dev/null 2>&1 &`)
	waitFor(t, "the traps to be set", func() bool {
		out, _, _ := d.cli("logs", id, "trap")
		_, _, code := d.cli("exec", id, "--", "test", "-e", "/tmp/o-ready")
		return strings.Contains(out, "ready") && code == 0
	})
	begin := time.Now()
	run("stop", id)
	if el := time.Since(begin); el > 8*time.Second {
		t.Errorf("stop of processes that exit on TERM took %s", el)
	}
	run("start", id)
	if got := run("exec", id, "--", "cat", "/workspace/t"); got != "got-term" {
		t.Errorf("background process's TERM marker after stop: %q", got)
	}
	if got := run("exec", id, "--", "cat", "/workspace/o"); got != "got-term" {
		t.Errorf("orphan process's TERM marker after stop: %q", got)
	}

	// One that ignores TERM is killed after --stop-timeout, not later.
	run("exec", "-d", "--tag", "stubborn", id, "--", "sh", "-c",
		`trap "echo ignored > /workspace/i" TERM; echo ready; while :; do sleep 0.1; done`)
	waitFor(t, "the stubborn trap", func() bool {
		out, _, _ := d.cli("logs", id, "stubborn")
		return strings.Contains(out, "ready")
	})
	const grace = 2 * time.Second
	begin = time.Now()
	run("stop", "--stop-timeout", grace.String(), id)
	el := time.Since(begin)
	if el < grace-200*time.Millisecond || el > grace+5*time.Second {
		t.Errorf("stop of a process ignoring TERM with --stop-timeout %s took %s", grace, el)
	}
	run("start", id)
	if got := run("exec", id, "--", "cat", "/workspace/i"); got != "ignored" {
		t.Errorf("the stubborn process never got TERM: %q", got)
	}
	if ps := procList(t, d, id); len(ps) != 0 {
		for _, p := range ps {
			if p.State == "running" {
				t.Errorf("a process survived the stop: %+v", p)
			}
		}
	}
	// A bad timeout is refused, and the sandbox keeps running.
	if _, errOut, code := d.cli("stop", "--stop-timeout", "-1s", id); code == 0 || !strings.Contains(errOut, "timeout") {
		t.Errorf("stop --stop-timeout -1s: %d %q", code, errOut)
	}
	if _, err := d.c.DeleteSandbox(ctx, id, true); err != nil {
		t.Fatal(err)
	}
}

// An image with STOPSIGNAL SIGINT: its sandboxes get SIGINT at stop, not
// SIGTERM.
func TestStopSignalFromImageRunc(t *testing.T) {
	parallel(t)
	stopSignalScenario(t, startDaemon(t), "")
}
func TestStopSignalFromImageRunsc(t *testing.T) {
	parallel(t)
	stopSignalScenario(t, startRunscDaemon(t), "runsc")
}

func stopSignalScenario(t *testing.T, d *daemon, runtime string) {
	ctx := context.Background()
	img := busyboxImage(t)
	cfg, _ := img.ConfigFile()
	cfg = cfg.DeepCopy()
	cfg.Config.StopSignal = "SIGINT"
	img, err := mutate.ConfigFile(img, cfg)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	lp, err := layout.Write(filepath.Join(dir, "oci"), empty.Index)
	if err != nil {
		t.Fatal(err)
	}
	if err := lp.AppendImage(img); err != nil {
		t.Fatal(err)
	}
	if _, e, code := d.cli("template", "import", "intstop", filepath.Join(dir, "oci")); code != 0 {
		t.Fatalf("import: %s", e)
	}
	sb, err := d.c.CreateSandbox(ctx, api.CreateSandboxRequest{Template: "intstop", Runtime: runtime, Persistent: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, e, code := d.cli("exec", "-d", "--tag", "trap", sb.ID, "--", "sh", "-c",
		`trap "echo got-term > /workspace/s; exit 0" TERM; trap "echo got-int > /workspace/s; exit 0" INT; echo ready; while :; do sleep 0.1; done`); code != 0 {
		t.Fatalf("exec -d: %s", e)
	}
	waitFor(t, "the traps", func() bool {
		out, _, _ := d.cli("logs", sb.ID, "trap")
		return strings.Contains(out, "ready")
	})
	if _, e, code := d.cli("stop", sb.ID); code != 0 {
		t.Fatalf("stop: %s", e)
	}
	if _, e, code := d.cli("start", sb.ID); code != 0 {
		t.Fatalf("start: %s", e)
	}
	if out, e, code := d.cli("exec", sb.ID, "--", "cat", "/workspace/s"); code != 0 || strings.TrimSpace(out) != "got-int" {
		t.Fatalf("STOPSIGNAL SIGINT image: marker %q (%d %s), want got-int", out, code, e)
	}
	if _, err := d.c.DeleteSandbox(ctx, sb.ID, true); err != nil {
		t.Fatal(err)
	}
}
