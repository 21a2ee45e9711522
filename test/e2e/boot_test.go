package e2e

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/internal/testenv"
)

// TestStartAfterCrashesWithSandboxes: the daemon is killed again and again
// while sandboxes run (each pinning the agent copy it bind-mounted from
// the share tmpfs); every start must succeed, the sandboxes of every
// generation must still answer, a new one must be creatable, and the
// share must hold one copy of an unchanged binary, not one per start.
func TestStartAfterCrashesWithSandboxes(t *testing.T) {
	parallel(t)
	d := startDaemon(t)
	ctx := context.Background()
	// The agent the daemon copies into its share: berth-agent, beside berth.
	fi, err := os.Stat(filepath.Join(filepath.Dir(berthBin), testenv.AgentName))
	if err != nil {
		t.Fatal(err)
	}
	binSize := fi.Size()
	var ids []string
	// Two crashes, each with a sandbox made before it: the old share took
	// one copy per start (three copies of the agent, each pinned by a
	// sandbox), which outgrew it when it was sized for two copies of the
	// whole berth binary, and holds more than one copy (checked below).
	crashes := 2
	for i := range crashes {
		sb, err := d.c.CreateSandbox(ctx, api.CreateSandboxRequest{})
		if err != nil {
			t.Fatalf("create after %d crashes: %v", i, err)
		}
		ids = append(ids, sb.ID)
		d.kill()
		if err := d.tryStart(); err != nil {
			t.Fatalf("start after %d crashes with running sandboxes: %v", i+1, err)
		}
	}
	for _, id := range ids {
		if out := execOut(t, d, id, "echo", "alive"); out != "alive\n" {
			t.Fatalf("sandbox %s after the crashes: %q", id, out)
		}
	}
	sb, err := d.c.CreateSandbox(ctx, api.CreateSandboxRequest{})
	if err != nil {
		t.Fatalf("create after the crashes: %v", err)
	}
	if out := execOut(t, d, sb.ID, "echo", "new"); out != "new\n" {
		t.Fatalf("new sandbox: %q", out)
	}
	var fs unix.Statfs_t
	if err := unix.Statfs(filepath.Join(d.dataDir, "share"), &fs); err != nil {
		t.Fatal(err)
	}
	if used := int64(fs.Blocks-fs.Bfree) * fs.Bsize; used >= 2*binSize {
		t.Fatalf("the share holds %d bytes after %d crashes: more than one copy of the %d-byte agent", used, crashes, binSize)
	}
	assertDoctorClean(t, d)
}

// TestSecondDaemonRefused: a second daemon on a data dir whose daemon
// runs is refused at once, with the holder's pid in the message, and the
// first daemon and its sandboxes are untouched.
func TestSecondDaemonRefused(t *testing.T) {
	parallel(t)
	d := startDaemon(t)
	ctx := context.Background()
	sb, err := d.c.CreateSandbox(ctx, api.CreateSandboxRequest{})
	if err != nil {
		t.Fatal(err)
	}
	cctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	sock := filepath.Join(filepath.Dir(d.socket), "second.sock")
	cmd := exec.CommandContext(cctx, berthBin, "serve", "--data-dir", d.dataDir, "--socket", sock)
	var stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stderr, &stderr
	err = cmd.Run()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || cctx.Err() != nil {
		t.Fatalf("a second daemon on the same data dir was not refused (err %v):\n%s", err, stderr.String())
	}
	want := "pid " + strconv.Itoa(d.pid())
	if !strings.Contains(stderr.String(), want) {
		t.Fatalf("the refusal does not name the holder (%s):\n%s", want, stderr.String())
	}
	if _, err := os.Lstat(sock); err == nil {
		t.Fatal("the refused daemon left a socket")
	}
	if out := execOut(t, d, sb.ID, "echo", "still"); out != "still\n" {
		t.Fatalf("first daemon's sandbox: %q", out)
	}
	// Once the holder is gone, the lock is free: a crash never leaves
	// the data dir locked.
	d.kill()
	d.start()
	if out := execOut(t, d, sb.ID, "echo", "adopted"); out != "adopted\n" {
		t.Fatalf("after the restart: %q", out)
	}
}

// TestKilledBuildLeavesNoSandbox: a daemon killed while a template build
// runs leaves the build's sandbox; the next start removes it (the build
// failed with its daemon) instead of leaving it to its 2 h timeout.
func TestKilledBuildLeavesNoSandbox(t *testing.T) {
	parallel(t)
	d := startDaemon(t)
	ctx := context.Background()
	d.stop()
	d.startWithEnv("BERTH_FAILPOINTS=build.after-launch")
	if _, err := d.c.BuildTemplate(ctx, api.BuildTemplateRequest{Name: "killed-build", From: "base", Run: []string{"true"}}, nil); err == nil {
		t.Fatal("the build succeeded although the daemon should have died")
	}
	d.waitExit()
	d.startWithEnv()
	all, err := d.c.ListSandboxes(ctx, true)
	if err != nil {
		t.Fatal(err)
	}
	builds := 0
	for _, sb := range all {
		if sb.Labels["berth.build"] != "1" {
			continue
		}
		builds++
		if sb.State != "deleted" {
			t.Errorf("build sandbox %s is %s after the restart, want deleted", sb.ID, sb.State)
		}
	}
	if builds == 0 {
		t.Fatal("no build sandbox recorded: the failpoint did not fire where the test expects")
	}
	if _, err := d.c.GetTemplate(ctx, "killed-build"); err == nil {
		t.Error("the killed build made its template")
	}
	assertDoctorClean(t, d)
}

// TestRunscSandboxesWaitForTheirClass: a daemon whose runsc probe fails at
// start (here a failpoint; in life the data dir full for a moment) keeps
// its gVisor sandboxes as they run, instead of judging them by runc (which
// knows no such container: an ephemeral one was destroyed, a persistent
// one started again under runc), probes runsc again, and once it answers
// offers the class and adopts them: the same processes, the same memory.
func TestRunscSandboxesWaitForTheirClass(t *testing.T) {
	parallel(t)
	d := startRunscDaemon(t)
	ctx := context.Background()
	var ids []string
	for _, persistent := range []bool{false, true} {
		sb, err := d.c.CreateSandbox(ctx, api.CreateSandboxRequest{Runtime: "runsc", Persistent: persistent, TimeoutSeconds: 600})
		if err != nil {
			t.Fatal(err)
		}
		// A process whose pid tells a restart from an adoption.
		execOut(t, d, sb.ID, "sh", "-c", "sleep 3600 >/dev/null 2>&1 & echo $! > /tmp/pid")
		ids = append(ids, sb.ID)
	}
	pids := map[string]string{}
	for _, id := range ids {
		pids[id] = execOut(t, d, id, "cat", "/tmp/pid")
	}
	d.stop()
	d.startWithEnv("BERTH_FAILPOINTS=runsc.probe=1*return(no space left on device)")
	if v, err := d.c.Version(ctx); err != nil || strings.Contains(v.Runtime, "runsc") {
		t.Fatalf("runsc offered although its probe failed: %+v %v", v, err)
	}
	for _, id := range ids {
		sb, err := d.c.GetSandbox(ctx, id)
		if err != nil || sb.State != "running" {
			t.Fatalf("sandbox %s while its class is unavailable: %+v %v", id, sb, err)
		}
	}
	waitFor(t, "runsc offered after its probe passed", func() bool {
		v, err := d.c.Version(ctx)
		return err == nil && strings.Contains(v.Runtime, "runsc")
	})
	for _, id := range ids {
		var out string
		waitFor(t, "sandbox "+id+" adopted", func() bool {
			var b strings.Builder
			exit, err := d.c.Exec(ctx, id, api.ExecRequest{Cmd: []string{"sh", "-c", "cat /tmp/pid && kill -0 $(cat /tmp/pid) && echo alive"}}, &b, &b)
			out = b.String()
			return err == nil && exit.Code == 0
		})
		if out != pids[id]+"alive\n" {
			t.Fatalf("sandbox %s was not adopted as it ran: %q, before %q", id, out, pids[id])
		}
		sb, err := d.c.GetSandbox(ctx, id)
		if err != nil || sb.State != "running" || sb.Isolation.Runtime != "runsc" {
			t.Fatalf("sandbox %s after its class came: %+v %v", id, sb, err)
		}
	}
	if _, err := d.c.CreateSandbox(ctx, api.CreateSandboxRequest{Runtime: "runsc"}); err != nil {
		t.Fatalf("a create on runsc once it came: %v", err)
	}
	assertDoctorClean(t, d)
}
