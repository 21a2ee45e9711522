package e2e

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/internal/cgroups"
	"github.com/berth-sh/berth/internal/node/local"
	"github.com/berth-sh/berth/internal/runtime"
)

// hostTasks counts the threads of every process in a host cgroup.
func hostTasks(cg string) int {
	n := 0
	for _, p := range cgroups.Procs(cg) {
		ents, _ := os.ReadDir(fmt.Sprintf("/proc/%d/task", p))
		n += len(ents)
	}
	return n
}

// assertOOMScores checks that every host process of a runsc sandbox has
// oom_score_adj 500.
func assertOOMScores(t *testing.T, rs *runtime.Runsc, id, cg, when string) {
	t.Helper()
	pids := rs.HostPids(id, cg)
	if len(pids) < 2 {
		t.Fatalf("%s: host processes %v, want the sandbox and its gofer at least", when, pids)
	}
	var bad []string
	for _, p := range pids {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/oom_score_adj", p))
		if err != nil {
			continue // exited meanwhile
		}
		if v := strings.TrimSpace(string(b)); v != "500" {
			bad = append(bad, fmt.Sprintf("%d=%s", p, v))
		}
	}
	if len(bad) > 0 {
		t.Errorf("%s: host processes without oom_score_adj 500: %v (of %d)", when, bad, len(pids))
	}
	t.Logf("%s: %d host processes, all oom_score_adj 500", when, len(pids))
}

// TestRunscTaskLimit: --pids bounds the tasks (processes and threads) in
// a runsc sandbox, where the host pids cgroup does not see them; the
// sandbox stays usable and the host unaffected; every host process of
// the sandbox carries oom_score_adj +500.
func TestRunscTaskLimit(t *testing.T) {
	parallel(t)
	d := startRunscDaemon(t)
	ctx := context.Background()
	sb, err := d.c.CreateSandbox(ctx, api.CreateSandboxRequest{Runtime: "runsc", Resources: api.Resources{Pids: 64}})
	if err != nil {
		t.Fatal(err)
	}
	rs, err := runtime.NewRunsc("", filepath.Join(d.dataDir, "runsc"))
	if err != nil {
		t.Fatal(err)
	}
	cg := "/" + local.InstanceName(d.dataDir) + "/" + sb.ID
	assertOOMScores(t, rs, sb.ID, cg, "after start")
	guest := func() int64 {
		lim, cur, err := rs.GuestPids(ctx, sb.ID)
		if err != nil {
			t.Fatal(err)
		}
		if lim != 64 {
			t.Fatalf("sentry pids.max = %d, want 64", lim)
		}
		return cur
	}
	t.Logf("idle: %d guest tasks, %d host tasks (host limit %d)", guest(), hostTasks(cg), runtime.RunscHostPids(64))

	// The limit is visible inside and cannot be raised or escaped.
	if got := sh(t, d, sb.ID, "cat /sys/fs/cgroup$(sed -n 's/^0:://p' /proc/self/cgroup)/pids.max"); got != "64" {
		t.Errorf("pids.max inside = %q", got)
	}
	if got := sh(t, d, sb.ID, `c=/sys/fs/cgroup$(sed -n 's/^0:://p' /proc/self/cgroup)
for a in "echo max > $c/pids.max" "mkdir $c/escape" "echo \$\$ > /sys/fs/cgroup/cgroup.procs" "mount -o remount,rw /sys/fs/cgroup" "umount /sys/fs/cgroup" "mount -t cgroup2 none /mnt"; do
	if sh -c "$a" 2>/dev/null; then echo "ALLOWED: $a"; fi
done; cat $c/pids.max`); got != "64" {
		t.Errorf("raising the task limit from inside: %q", got)
	}

	// Threads: Python stops at the limit.
	out := sh(t, d, sb.ID, `python3 -c '
import threading, time
n = 0
try:
    while n < 3000:
        threading.Thread(target=time.sleep, args=(3,), daemon=True).start(); n += 1
except RuntimeError as e:
    print("stopped:", e)
print(n)'`)
	lines := strings.Split(out, "\n")
	n, _ := strconv.Atoi(lines[len(lines)-1])
	if !strings.Contains(out, "stopped") || n >= 64 || n < 16 {
		t.Errorf("thread flood: %q, want it stopped below 64 threads", out)
	}
	t.Logf("thread flood: %d threads started, then %q; host tasks %d", n, lines[0], hostTasks(cg))

	// Processes: a shell loop of background sleeps stops at the limit.
	for round := 1; round <= 2; round++ {
		var stderr strings.Builder
		exit, err := d.c.Exec(ctx, sb.ID, api.ExecRequest{
			Cmd:            []string{"sh", "-c", `i=0; while [ $i -lt 3000 ]; do sleep 3 & i=$((i+1)); done; echo all-started`},
			TimeoutSeconds: 30,
		}, io.Discard, &stderr)
		if err != nil {
			t.Fatalf("exec: %v", err)
		}
		if exit.Code == 0 || !strings.Contains(stderr.String(), "fork") {
			t.Fatalf("process flood was not stopped: %+v stderr %q", exit, tail(stderr.String(), 300))
		}
		g, h := guest(), hostTasks(cg)
		t.Logf("process flood %d: %d guest tasks, %d host tasks (host limit %d)", round, g, h, runtime.RunscHostPids(64))
		if g > 64 || g < 32 {
			t.Errorf("flood left %d tasks in the sandbox; limit 64", g)
		}
		if h >= int(runtime.RunscHostPids(64)) {
			t.Errorf("%d host tasks reach the host limit %d", h, runtime.RunscHostPids(64))
		}
		// The host is unaffected.
		t0 := time.Now()
		if err := exec.Command("true").Run(); err != nil {
			t.Fatal(err)
		}
		if el := time.Since(t0); el > time.Second {
			t.Errorf("host process start took %s during the flood", el)
		}
		// Once the sleeps end, the sandbox is usable again.
		var got string
		for deadline := time.Now().Add(15 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
			var o strings.Builder
			if ex, err := d.c.Exec(ctx, sb.ID, api.ExecRequest{Cmd: []string{"echo", "alive"}}, &o, io.Discard); err == nil && ex.Code == 0 {
				got = o.String()
				break
			}
		}
		if got != "alive\n" {
			t.Fatalf("exec after the flood: %q", got)
		}
	}
	assertOOMScores(t, rs, sb.ID, cg, "after the floods")
	if _, err := d.c.DeleteSandbox(ctx, sb.ID, true); err != nil {
		t.Fatal(err)
	}
	assertDoctorClean(t, d)
}
