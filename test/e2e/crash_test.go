package e2e

import (
	"context"
	"io"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/berth-sh/berth/api"
)

// TestCrashMidCreateAndDelete kills the daemon with SIGKILL at each point
// between a create's or delete's side effects, restarts it, and checks that
// the reconciler finishes or undoes the work: nothing orphaned, running
// sandboxes adopted and usable.
func TestCrashMidCreateAndDelete(t *testing.T) {
	parallel(t)
	d := startDaemon(t)
	ctx := context.Background()
	// A sandbox that runs across every crash: it must be adopted each time.
	keeper, err := d.c.CreateSandbox(ctx, api.CreateSandboxRequest{Name: "keeper"})
	if err != nil {
		t.Fatal(err)
	}
	d.c.Exec(ctx, keeper.ID, api.ExecRequest{Cmd: []string{"sh", "-c", "echo kept > /tmp/state"}}, io.Discard, io.Discard)

	for _, fp := range []string{"create.before-mount", "create.after-mount", "create.after-start"} {
		t.Run(fp, func(t *testing.T) {
			d.stop()
			d.startWithEnv("BERTH_FAILPOINTS=" + fp)
			_, err := d.c.CreateSandbox(ctx, api.CreateSandboxRequest{Name: "victim-" + strings.ReplaceAll(fp, ".", "-")})
			if err == nil {
				t.Fatal("create succeeded although the daemon should have died")
			}
			d.waitExit()
			d.startWithEnv()
			// The interrupted create was finished: it runs and answers.
			sb, err := d.c.GetSandbox(ctx, "victim-"+strings.ReplaceAll(fp, ".", "-"))
			if err != nil {
				t.Fatal(err)
			}
			if sb.State != "running" {
				t.Fatalf("interrupted create ended %s (%s)", sb.State, sb.Error)
			}
			out := execOut(t, d, sb.ID, "echo", "finished")
			if out != "finished\n" {
				t.Fatalf("exec in finished sandbox: %q", out)
			}
			if out := execOut(t, d, keeper.ID, "cat", "/tmp/state"); out != "kept\n" {
				t.Fatalf("keeper not adopted: %q", out)
			}
			assertDoctorClean(t, d)
		})
	}
	for _, fp := range []string{"delete.after-runtime", "delete.after-unmount"} {
		t.Run(fp, func(t *testing.T) {
			d.stop()
			d.startWithEnv()
			sb, err := d.c.CreateSandbox(ctx, api.CreateSandboxRequest{})
			if err != nil {
				t.Fatal(err)
			}
			d.stop()
			d.startWithEnv("BERTH_FAILPOINTS=" + fp)
			if _, err := d.c.DeleteSandbox(ctx, sb.ID, true); err == nil {
				t.Fatal("delete succeeded although the daemon should have died")
			}
			d.waitExit()
			d.startWithEnv()
			got, err := d.c.GetSandbox(ctx, sb.ID)
			if err != nil || got.State != "deleted" {
				t.Fatalf("interrupted delete: %+v %v", got, err)
			}
			if _, err := os.Stat(d.dataDir + "/sandboxes/" + sb.ID); err == nil {
				t.Fatal("sandbox dir left after interrupted delete")
			}
			assertDoctorClean(t, d)
		})
	}
}

// TestExecAcrossDaemonRestart: the agent keeps the sandbox usable while the
// daemon is away, and a SIGKILLed daemon adopts its sandboxes.
func TestExecAcrossDaemonRestart(t *testing.T) {
	parallel(t)
	d := startDaemon(t)
	ctx := context.Background()
	sb, err := d.c.CreateSandbox(ctx, api.CreateSandboxRequest{})
	if err != nil {
		t.Fatal(err)
	}
	// A background process in the sandbox survives daemon restarts.
	execOut(t, d, sb.ID, "sh", "-c", "sleep 1000 >/dev/null 2>&1 &")
	d.stop()
	d.startWithEnv()
	if out := execOut(t, d, sb.ID, "echo", "after-graceful"); out != "after-graceful\n" {
		t.Fatalf("after graceful restart: %q", out)
	}
	d.kill()
	d.startWithEnv()
	if out := execOut(t, d, sb.ID, "sh", "-c", "echo after-kill; pgrep sleep >/dev/null && echo sleeping"); out != "after-kill\nsleeping\n" {
		t.Fatalf("after SIGKILL restart: %q", out)
	}
	got, _ := d.c.GetSandbox(ctx, sb.ID)
	if got.State != "running" {
		t.Fatalf("state after restarts: %s", got.State)
	}
}

// TestOrphansFoundAndRemoved: host resources with no record (as a crash
// before the record was written, or a wiped database, would leave) are
// listed by doctor and removed by doctor --fix.
func TestOrphansFoundAndRemoved(t *testing.T) {
	parallel(t)
	d := startDaemon(t)
	ctx := context.Background()
	sb, err := d.c.CreateSandbox(ctx, api.CreateSandboxRequest{})
	if err != nil {
		t.Fatal(err)
	}
	_ = sb
	// Lose the records: stop the daemon and move the database away.
	d.stop()
	os.Rename(d.dataDir+"/berth.db", d.dataDir+"/berth.db.lost")
	os.Remove(d.dataDir + "/berth.db-wal")
	os.Remove(d.dataDir + "/berth.db-shm")
	// Start without the start-up orphan sweep so doctor has work to do.
	d.startWithEnv("BERTH_FAILPOINTS=startup.skip-sweep")
	out, _, code := d.cli("doctor")
	if code == 0 || !strings.Contains(out, "runtime") || !strings.Contains(out, "mount") || !strings.Contains(out, "cgroup") {
		t.Fatalf("doctor did not report the orphans (code %d):\n%s", code, out)
	}
	if out, e, code := d.cli("doctor", "--fix"); code != 0 {
		t.Fatalf("doctor --fix failed: %s %s", out, e)
	}
	assertDoctorClean(t, d)
	assertNoLeaks(t, d)
}

func execOut(t *testing.T, d *daemon, id string, cmd ...string) string {
	t.Helper()
	var out strings.Builder
	exit, err := d.c.Exec(context.Background(), id, api.ExecRequest{Cmd: cmd}, &out, io.Discard)
	if err != nil {
		t.Fatalf("exec %v: %v", cmd, err)
	}
	if exit.Code != 0 {
		t.Fatalf("exec %v: exit %+v (%s)", cmd, exit, out.String())
	}
	return out.String()
}

func assertDoctorClean(t *testing.T, d *daemon) {
	t.Helper()
	rep, err := d.c.Doctor(context.Background(), false)
	if err != nil {
		t.Fatal(err)
	}
	if !rep.Healthy || len(rep.Findings) > 0 {
		t.Fatalf("doctor: %+v", rep.Findings)
	}
}

// waitExit waits for a daemon that is expected to die (a failpoint).
func (d *daemon) waitExit() {
	select {
	case <-d.proc.Done():
	case <-time.After(30 * time.Second):
		d.t.Fatal("daemon did not die at its failpoint")
	}
}
