package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/client"
	"github.com/berth-sh/berth/internal/webhook"
)

// TestPersistentStateSurvivesEverything: 50 MiB of random files with
// checksums, on the workspace volume and in the persisted root layer,
// survive 50 pause/resume cycles, 20 stop/start cycles and a daemon
// SIGKILL; a reset sandbox matches its template again.
func TestPersistentStateSurvivesEverything(t *testing.T) {
	parallel(t)
	d := startDaemon(t)
	ctx := context.Background()
	sb, err := d.c.CreateSandbox(ctx, api.CreateSandboxRequest{Name: "keeper", Persistent: true, PersistRoot: true,
		VolumeSizeBytes: 256 << 20})
	if err != nil {
		t.Fatal(err)
	}
	other, err := d.c.CreateSandbox(ctx, api.CreateSandboxRequest{Name: "resettable", Persistent: true, PersistRoot: true})
	if err != nil {
		t.Fatal(err)
	}
	execOut(t, d, sb.ID, "sh", "-c", `set -e
		mkdir -p /workspace/data /opt/rootlayer
		for i in $(seq 1 40); do head -c 1048576 /dev/urandom > /workspace/data/f$i; done
		for i in $(seq 1 10); do head -c 1048576 /dev/urandom > /opt/rootlayer/g$i; done
		echo "installed" > /etc/berth-test-package
		sha256sum /workspace/data/* /opt/rootlayer/* /etc/berth-test-package > /root/sums
		sync`)
	check := func(when string) {
		t.Helper()
		var out strings.Builder
		exit, err := d.c.Exec(ctx, sb.ID, api.ExecRequest{Cmd: []string{"sha256sum", "-c", "--quiet", "/root/sums"}}, &out, &out)
		if err != nil || exit.Code != 0 {
			t.Fatalf("checksums after %s: %v %+v %s", when, err, exit, out.String())
		}
	}
	check("writing")
	for i := 0; i < 50; i++ {
		if _, err := d.c.Pause(ctx, sb.ID); err != nil {
			t.Fatal(err)
		}
		if _, err := d.c.Resume(ctx, sb.ID); err != nil {
			t.Fatal(err)
		}
	}
	check("50 pause/resume cycles")
	for i := 0; i < 20; i++ {
		if got, err := d.c.Stop(ctx, sb.ID); err != nil || got.State != "stopped" {
			t.Fatalf("stop %d: %+v %v", i, got, err)
		}
		if got, err := d.c.Start(ctx, sb.ID); err != nil || got.State != "running" {
			t.Fatalf("start %d: %+v %v", i, got, err)
		}
	}
	check("20 stop/start cycles")
	if got, _ := d.c.GetSandbox(ctx, sb.ID); got.Hostname != "keeper" {
		t.Fatalf("hostname not kept: %q", got.Hostname)
	}
	d.kill()
	d.startWithEnv()
	check("daemon SIGKILL and restart")
	// Reset the other one: it matches its template again.
	execOut(t, d, other.ID, "sh", "-c", "echo dirty > /workspace/x; echo dirty > /etc/dirty")
	if _, err := d.c.Reset(ctx, other.ID); err != nil {
		t.Fatal(err)
	}
	if out := execOut(t, d, other.ID, "sh", "-c", "ls -A /workspace | wc -l; test -e /etc/dirty && echo dirty || echo clean"); out != "0\nclean\n" {
		t.Fatalf("after reset: %q", out)
	}
	check("resetting another sandbox")
	// Wrong-state operations are 409s naming the state.
	_, err = d.c.Resume(ctx, sb.ID)
	if !client.IsConflict(err) || !strings.Contains(err.Error(), "running") {
		t.Fatalf("resume of a running sandbox: %v", err)
	}
}

func TestVolumeQuotaAndKeptVolume(t *testing.T) {
	parallel(t)
	d := startDaemon(t)
	ctx := context.Background()
	sb, err := d.c.CreateSandbox(ctx, api.CreateSandboxRequest{Persistent: true, VolumeSizeBytes: 32 << 20, KeepVolume: true})
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	exit, err := d.c.Exec(ctx, sb.ID, api.ExecRequest{Cmd: []string{"sh", "-c",
		"dd if=/dev/zero of=/workspace/big bs=1M count=64 2>&1; r=$?; sync; exit $r"}}, &out, &out)
	if err != nil {
		t.Fatal(err)
	}
	if exit.Code == 0 || !strings.Contains(out.String(), "No space left on device") {
		t.Fatalf("write past the quota: %+v %q", exit, out.String())
	}
	execOut(t, d, sb.ID, "sh", "-c", "rm /workspace/big; echo precious > /workspace/keep")
	got, _ := d.c.GetSandbox(ctx, sb.ID)
	if got.Storage == nil || got.Storage.SizeBytes != 32<<20 || got.Storage.UsedBytes == 0 {
		t.Fatalf("storage not reported: %+v", got.Storage)
	}
	volName := got.Storage.Name
	// Retention deletes a stopped sandbox; its kept volume stays.
	if _, err := d.c.DeleteSandbox(ctx, sb.ID, true); err != nil {
		t.Fatal(err)
	}
	v, err := d.c.GetVolume(ctx, volName)
	if err != nil || v.State != "available" {
		t.Fatalf("kept volume: %+v %v", v, err)
	}
	sb2, err := d.c.CreateSandbox(ctx, api.CreateSandboxRequest{Volumes: []api.VolumeMount{{Name: volName, Path: "/data"}}})
	if err != nil {
		t.Fatal(err)
	}
	if out := execOut(t, d, sb2.ID, "cat", "/data/keep"); out != "precious\n" {
		t.Fatalf("kept volume content: %q", out)
	}
	// Attached volumes cannot be deleted or attached twice.
	if err := d.c.DeleteVolume(ctx, volName); !client.IsConflict(err) {
		t.Fatalf("delete of an attached volume: %v", err)
	}
	if _, err := d.c.CreateSandbox(ctx, api.CreateSandboxRequest{Volumes: []api.VolumeMount{{Name: volName}}}); !client.IsConflict(err) {
		t.Fatalf("second attach: %v", err)
	}
	d.c.DeleteSandbox(ctx, sb2.ID, true)
	if err := d.c.DeleteVolume(ctx, volName); err != nil {
		t.Fatal(err)
	}
}

func TestRetentionDeletesStoppedSandboxAndVolume(t *testing.T) {
	parallel(t)
	d := startDaemon(t)
	ctx := context.Background()
	sb, err := d.c.CreateSandbox(ctx, api.CreateSandboxRequest{Persistent: true,
		Policy: api.Policy{RetentionSeconds: 1}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.c.Stop(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	waitState(t, d, sb.ID, "deleted", 5*time.Second)
	got, _ := d.c.GetSandbox(ctx, sb.ID)
	if got.Cause != "policy" || !strings.Contains(got.Reason, "retention") {
		t.Fatalf("deleted by %s: %s", got.Cause, got.Reason)
	}
	vs, _ := d.c.ListVolumes(ctx)
	if len(vs) != 0 {
		t.Fatalf("volume survived retention: %+v", vs)
	}
}

func TestIdlePolicy(t *testing.T) {
	d := startDaemon(t)
	ctx := context.Background()
	sb, err := d.c.CreateSandbox(ctx, api.CreateSandboxRequest{Persistent: true,
		Policy: api.Policy{IdleTimeoutSeconds: 2, OnIdle: "pause", AutoResume: true}})
	if err != nil {
		t.Fatal(err)
	}
	// An open exec session is activity, even while its command sleeps.
	start := time.Now()
	execOut(t, d, sb.ID, "sh", "-c", "sleep 3; echo done")
	if got, _ := d.c.GetSandbox(ctx, sb.ID); got.State != "running" {
		t.Fatalf("paused during an exec session: %s after %s", got.State, time.Since(start))
	}
	// A busy background process is activity too.
	execOut(t, d, sb.ID, "sh", "-c", "(timeout 4 sh -c 'while :; do :; done') >/dev/null 2>&1 &")
	time.Sleep(3500 * time.Millisecond)
	if got, _ := d.c.GetSandbox(ctx, sb.ID); got.State != "running" {
		t.Fatalf("paused while a background process is busy: %s", got.State)
	}
	// Quiet now: paused within 1 s of its deadline (2 s after activity ends).
	quiet := time.Now()
	waitState(t, d, sb.ID, "paused", 8*time.Second)
	got, _ := d.c.GetSandbox(ctx, sb.ID)
	if got.Cause != "policy" || got.PausedAt == nil || got.LastActivityAt == nil {
		t.Fatalf("paused by %+v", got)
	}
	if lag := got.PausedAt.Sub(got.LastActivityAt.Add(2 * time.Second)); lag > time.Second || lag < -100*time.Millisecond {
		t.Fatalf("idle pause lag %s (last activity %s, paused %s)", lag, got.LastActivityAt, got.PausedAt)
	}
	_ = quiet
	// Auto-resume serves an exec on the paused sandbox.
	if out := execOut(t, d, sb.ID, "echo", "back"); out != "back\n" {
		t.Fatalf("auto-resume exec: %q", out)
	}
	// Timers come from stored timestamps: a restart in between does not
	// reset or lose them.
	d.stop()
	time.Sleep(500 * time.Millisecond)
	d.startWithEnv()
	ready := time.Now()
	waitState(t, d, sb.ID, "paused", 6*time.Second)
	got, _ = d.c.GetSandbox(ctx, sb.ID)
	// Due at the stored deadline, or at once if that passed while the
	// daemon was down (a slow, e.g. -race, start); a timer reset by the
	// restart would come 2 s after it instead.
	due := got.LastActivityAt.Add(2 * time.Second)
	if ready.After(due) {
		due = ready
	}
	if lag := got.PausedAt.Sub(due); lag > time.Second {
		t.Fatalf("idle pause after restart lagged %s (deadline %s, daemon ready %s, paused %s)",
			lag, got.LastActivityAt.Add(2*time.Second), ready, got.PausedAt)
	}
}

func TestQuarantineAndDiff(t *testing.T) {
	parallel(t)
	d := startDaemon(t)
	ctx := context.Background()
	sb, err := d.c.CreateSandbox(ctx, api.CreateSandboxRequest{Persistent: true})
	if err != nil {
		t.Fatal(err)
	}
	execOut(t, d, sb.ID, "sh", "-c", "echo evidence > /workspace/notes; echo x > /etc/newfile; echo y >> /etc/hosts; rm /etc/shells; sleep 1000 >/dev/null 2>&1 &")
	diff, err := d.c.Diff(ctx, sb.ID)
	if err != nil {
		t.Fatal(err)
	}
	kinds := map[string]string{}
	for _, e := range diff {
		kinds[e.Path] = e.Kind
	}
	for p, k := range map[string]string{"/workspace/notes": "added", "/etc/newfile": "added", "/etc/hosts": "changed", "/etc/shells": "removed"} {
		if kinds[p] != k {
			t.Errorf("diff %s: %q, want %q (all: %v)", p, kinds[p], k, kinds)
		}
	}
	q, err := d.c.Quarantine(ctx, sb.ID)
	if err != nil || q.State != "quarantined" {
		t.Fatalf("quarantine: %+v %v", q, err)
	}
	if _, err := d.c.Exec(ctx, sb.ID, api.ExecRequest{Cmd: []string{"true"}}, io.Discard, io.Discard); !client.IsConflict(err) {
		t.Fatalf("exec in quarantine: %v", err)
	}
	if _, err := d.c.WriteFile(ctx, sb.ID, "/tmp/x", 0o644, strings.NewReader("x")); !client.IsConflict(err) {
		t.Fatalf("write in quarantine: %v", err)
	}
	// Reads stay possible, from the frozen sandbox's root and volume.
	var buf strings.Builder
	if _, _, err := d.c.ReadFile(ctx, sb.ID, "/workspace/notes", &buf); err != nil || buf.String() != "evidence\n" {
		t.Fatalf("read volume in quarantine: %q %v", buf.String(), err)
	}
	buf.Reset()
	if _, _, err := d.c.ReadFile(ctx, sb.ID, "/etc/newfile", &buf); err != nil || buf.String() != "x\n" {
		t.Fatalf("read root in quarantine: %q %v", buf.String(), err)
	}
	r, err := d.c.Release(ctx, sb.ID)
	if err != nil || r.State != "running" {
		t.Fatalf("release: %+v %v", r, err)
	}
	if out := execOut(t, d, sb.ID, "sh", "-c", "pgrep -c sleep"); out != "1\n" {
		t.Fatalf("processes did not survive quarantine: %q", out)
	}
}

func TestLifecycleWebhook(t *testing.T) {
	parallel(t)
	var mu sync.Mutex
	var got []api.Event
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if !webhook.Verify("hooksecret", body, r.Header.Get(webhook.SignatureHeader)) {
			w.WriteHeader(401)
			return
		}
		var ev api.Event
		jsonDecode(t, string(body), &ev)
		mu.Lock()
		got = append(got, ev)
		mu.Unlock()
	}))
	defer srv.Close()
	d := startDaemonWith(t, "--webhook-url", srv.URL, "--webhook-secret", "hooksecret")
	ctx := context.Background()
	sb, err := d.c.CreateSandbox(ctx, api.CreateSandboxRequest{})
	if err != nil {
		t.Fatal(err)
	}
	d.c.DeleteSandbox(ctx, sb.ID, true)
	deadline := time.Now().Add(10 * time.Second)
	for {
		mu.Lock()
		var seq []string
		for _, e := range got {
			if e.SandboxID == sb.ID {
				seq = append(seq, e.To)
			}
		}
		mu.Unlock()
		if strings.Join(seq, ",") == "creating,running,deleting,deleted" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("webhook saw %v", seq)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func waitState(t *testing.T, d *daemon, id, state string, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		got, err := d.c.GetSandbox(context.Background(), id)
		if err == nil && got.State == state {
			return
		}
		if time.Now().After(deadline) {
			st := "?"
			if got != nil {
				st = fmt.Sprintf("%s (%s)", got.State, got.Reason)
			}
			t.Fatalf("sandbox %s not %s within %s: %s", id, state, within, st)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
