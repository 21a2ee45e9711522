package e2e

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/client"
	"github.com/berth-sh/berth/internal/cgroups"
	"github.com/berth-sh/berth/internal/node/local"
)

// startRunscDaemon starts a daemon and fails the test, naming the
// daemon's reason, when it does not offer the runsc class (runsc not
// installed, dynamically linked, or unable to start a sandbox here): the
// suite covers both runtime classes, and a host without runsc has not run
// it.
func startRunscDaemon(t *testing.T) *daemon {
	t.Helper()
	d := startDaemon(t)
	rep, err := d.c.Doctor(context.Background(), false)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(rep.Runtime, "runsc") {
		why := "see the daemon log"
		if m := regexp.MustCompile(`runtime class runsc unavailable.*reason=(.*)`).FindStringSubmatch(d.logs.String()); m != nil {
			why = m[1]
		}
		t.Fatalf("the daemon offers no runsc class (%s): the e2e suite needs gVisor's runsc, statically linked, on PATH: "+
			"install it with scripts/install-runsc.sh (make deps runs it)", why)
	}
	return d
}

func sh(t *testing.T, d *daemon, id, script string) string {
	t.Helper()
	return strings.TrimSpace(execOut(t, d, id, "sh", "-c", script))
}

// TestRunscConformance runs the runtime conformance basics on the gVisor
// class through the daemon: create, exec, files, limits, pause/resume,
// stop/start of a persistent sandbox, delete, and no leaks.
func TestRunscConformance(t *testing.T) {
	parallel(t)
	d := startRunscDaemon(t)
	ctx := context.Background()
	sb, err := d.c.CreateSandbox(ctx, api.CreateSandboxRequest{Runtime: "runsc",
		Resources: api.Resources{MemoryBytes: 256 << 20, Pids: 64, CPUs: 0.5}})
	if err != nil {
		t.Fatal(err)
	}
	if iso := sb.Isolation; iso.Runtime != "runsc" || iso.SharedKernel || iso.Seccomp != "gvisor-sentry" || !iso.UserNamespace {
		t.Errorf("isolation = %+v, want runsc, no shared kernel, gvisor-sentry, user namespace", iso)
	}
	if got := sh(t, d, sb.ID, "uname -r"); !strings.Contains(got, "gvisor") {
		t.Errorf("uname -r = %q, want gVisor's kernel", got)
	}
	// Files round trip, both ways between the API and processes.
	data := bytes.Repeat([]byte("berth-gvisor\n"), 10000)
	if _, err := d.c.WriteFile(ctx, sb.ID, "/workspace/in.txt", 0o644, bytes.NewReader(data)); err != nil {
		t.Fatal(err)
	}
	if got := sh(t, d, sb.ID, "wc -c < /workspace/in.txt; cp /workspace/in.txt /tmp/out.txt"); got != strconv.Itoa(len(data)) {
		t.Errorf("size inside = %s, want %d", got, len(data))
	}
	var back bytes.Buffer
	if _, _, err := d.c.ReadFile(ctx, sb.ID, "/tmp/out.txt", &back); err != nil {
		t.Fatal(err)
	} else if !bytes.Equal(back.Bytes(), data) {
		t.Errorf("read back %d bytes, want the %d written", back.Len(), len(data))
	}
	// Limits: the memory limit is what the sandbox sees, and the host
	// cgroup holds the sandbox.
	if got := sh(t, d, sb.ID, "head -1 /proc/meminfo"); !strings.Contains(strings.Join(strings.Fields(got), " "), "MemTotal: 262144 kB") {
		t.Errorf("meminfo: %q, want MemTotal of the 256 MiB limit", got)
	}
	cg := "/" + local.InstanceName(d.dataDir) + "/" + sb.ID
	if len(cgroups.Procs(cg)) == 0 {
		t.Errorf("no processes in the sandbox's host cgroup %s", cg)
	}
	// Exit codes and stderr pass through.
	var out, errb strings.Builder
	exit, err := d.c.Exec(ctx, sb.ID, api.ExecRequest{Cmd: []string{"sh", "-c", "echo out; echo err >&2; exit 7"}}, &out, &errb)
	if err != nil || exit.Code != 7 || out.String() != "out\n" || errb.String() != "err\n" {
		t.Errorf("exec: %+v %v %q %q", exit, err, out.String(), errb.String())
	}
	// Pause: no exec; resume: processes carry on.
	// Each count replaces the file whole (a rename): a read between a
	// truncate and its write would read nothing.
	sh(t, d, sb.ID, "nohup sh -c 'i=0; while :; do i=$((i+1)); echo $i > /tmp/c.new; mv /tmp/c.new /tmp/c; sleep 0.05; done' >/dev/null 2>&1 &")
	time.Sleep(300 * time.Millisecond)
	if _, err := d.c.Pause(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := d.c.Exec(ctx, sb.ID, api.ExecRequest{Cmd: []string{"true"}}, io.Discard, io.Discard); !client.IsConflict(err) {
		t.Errorf("exec in a paused sandbox: %v, want a conflict", err)
	}
	if _, err := d.c.Resume(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	c1, _ := strconv.Atoi(sh(t, d, sb.ID, "cat /tmp/c"))
	time.Sleep(300 * time.Millisecond)
	if c2, _ := strconv.Atoi(sh(t, d, sb.ID, "cat /tmp/c")); c1 == 0 || c2 <= c1 {
		t.Errorf("counter after resume: %d then %d, want it to keep counting", c1, c2)
	}
	// A persistent runsc sandbox: files survive stop/start.
	ps, err := d.c.CreateSandbox(ctx, api.CreateSandboxRequest{Runtime: "runsc", Persistent: true})
	if err != nil {
		t.Fatal(err)
	}
	sh(t, d, ps.ID, "echo kept > /workspace/k")
	if _, err := d.c.Stop(ctx, ps.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := d.c.Start(ctx, ps.ID); err != nil {
		t.Fatal(err)
	}
	if got := sh(t, d, ps.ID, "cat /workspace/k"); got != "kept" {
		t.Errorf("after stop/start: %q", got)
	}
	for _, id := range []string{sb.ID, ps.ID} {
		if _, err := d.c.DeleteSandbox(ctx, id, true); err != nil {
			t.Fatal(err)
		}
	}
	assertDoctorClean(t, d)
	assertNoLeaks(t, d)
	if len(cgroups.Procs(cg)) > 0 || cgroups.Exists(cg) {
		t.Errorf("cgroup %s left after delete", cg)
	}
	// Unknown classes are refused with the ones available.
	_, err = d.c.CreateSandbox(ctx, api.CreateSandboxRequest{Runtime: "kata"})
	if err == nil || !strings.Contains(err.Error(), "runc, runsc") {
		t.Errorf("create with runtime kata: %v, want a 400 naming runc, runsc", err)
	}
}

// TestRunscSecurityBoundary runs the security suite's checks that apply
// under gVisor, from inside a runsc sandbox.
func TestRunscSecurityBoundary(t *testing.T) {
	parallel(t)
	d := startRunscDaemon(t)
	ctx := context.Background()
	sb, err := d.c.CreateSandbox(ctx, api.CreateSandboxRequest{Runtime: "runsc"})
	if err != nil {
		t.Fatal(err)
	}
	got, err := d.c.GetSandbox(ctx, sb.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.Isolation.SharedKernel || got.Isolation.Runtime != "runsc" {
		t.Errorf("inspect isolation = %+v, want runsc with shared_kernel=false", got.Isolation)
	}
	run := func(cmd string) (string, int) {
		var out strings.Builder
		exit, err := d.c.Exec(ctx, sb.ID, api.ExecRequest{Cmd: []string{"sh", "-c", cmd}, TimeoutSeconds: 20}, &out, &out)
		if err != nil {
			t.Fatalf("%s: %v", cmd, err)
		}
		return out.String(), exit.Code
	}
	// Left out from the runc suite: "unshare -U" and keyctl succeed under
	// gVisor, and are served by the Sentry, not by the host kernel.
	mustFail := map[string]string{
		"mount tmpfs":           "mkdir -p /mnt/x && mount -t tmpfs none /mnt/x",
		"new mount namespace":   "unshare -m true",
		"new network namespace": "unshare -n true",
		"write /proc/sys":       "echo 1 > /proc/sys/kernel/panic",
		"write /sys":            "echo x > /sys/kernel/uevent_helper",
		"write host /usr":       "touch /usr/bin/berth-was-here",
		"mknod":                 "mknod /tmp/sda b 8 0",
		"raw socket":            "python3 -c 'import socket; socket.socket(socket.AF_INET, socket.SOCK_RAW, 1)'",
		"load kernel module":    "python3 -c 'import ctypes; l=ctypes.CDLL(None); import sys; sys.exit(0 if l.syscall(175, 0, 0, 0)==0 else 1)'",
		"read kcore":            "head -c 1 /proc/kcore",
		"change hostname of ns": "hostname pwned",
		"chroot escape tools":   "test -e /var/lib/berth || test -e /proc/1/root/../../../../etc/shadow && exit 0; exit 1",
		"see host processes":    "ps -eo args | grep -v grep | grep -q 'berth serve' && exit 0; test $(ps -e | wc -l) -gt 8",
		"write agent binary":    "echo x >> /.berth/berth",
		"setuid escalation":     "cp /usr/bin/id /tmp/id && chmod u+s /tmp/id && su -s /bin/sh nobody -c /tmp/id | grep -q 'euid=0' && exit 0 || exit 1",
	}
	for name, cmd := range mustFail {
		if out, code := run(cmd); code == 0 {
			t.Errorf("%s succeeded inside the runsc sandbox: %q", name, out)
		}
	}
	checks := map[string]string{
		"grep NoNewPrivs /proc/self/status":                               "NoNewPrivs:\t1",
		"grep CapEff /proc/self/status":                                   "CapEff:\t00000000200405fb",
		"grep -c ' /sys/fs/cgroup cgroup2 ro,' /proc/mounts":              "1",
		"cat /proc/1/cmdline | tr '\\0' ' '":                              "/.berth/berth --socket",
		"ip -o link 2>/dev/null | wc -l; cat /sys/class/net/lo/operstate": "1",
		"uname -r":                           "gvisor",
		"test -e /proc/kcore || echo absent": "absent",
	}
	for cmd, want := range checks {
		out, _ := run(cmd)
		if !strings.Contains(strings.Join(strings.Fields(out), " "), strings.Join(strings.Fields(want), " ")) {
			t.Errorf("%s: got %q, want %q", cmd, out, want)
		}
	}
	// Files the sandbox creates are owned on the host by the mapped root.
	// /tmp included: berth binds the root's own /tmp over the tmpfs gVisor
	// would mount there, so /tmp stays on the disk-capped writable layer.
	run("touch /workspace/owned /tmp/owned")
	upper := filepath.Join(d.dataDir, "pool", "scratch", sb.ID, "mnt", "upper")
	if _, err := os.Stat(filepath.Join(upper, "tmp", "owned")); err != nil {
		t.Errorf("/tmp is not on the writable layer: %v", err)
	}
	fi, err := os.Stat(filepath.Join(upper, "workspace", "owned"))
	if err != nil {
		t.Fatal(err)
	}
	if st := fi.Sys().(*syscall.Stat_t); st.Uid != local.DefaultIDMap.HostUID {
		t.Errorf("file made in the sandbox is owned by host uid %d, want %d", st.Uid, local.DefaultIDMap.HostUID)
	}
}

// counterScript counts in a shell variable (memory only; /tmp/c is just a
// view of it) and, on SIGUSR1, writes its count and a random token it
// drew at start and keeps only in memory.
const counterScript = `tok=$(od -An -N4 -tu4 /dev/urandom | tr -d ' ')
trap 'echo "$i $tok" > /tmp/tok' USR1
i=0
while :; do i=$((i+1)); echo $i > /tmp/c; sleep 0.1; done
`

// TestRunscHibernateAcrossRestart: a process with state in memory keeps
// counting from where it was after hibernate → daemon restart → wake.
func TestRunscHibernateAcrossRestart(t *testing.T) {
	parallel(t)
	d := startRunscDaemon(t)
	ctx := context.Background()
	sb, err := d.c.CreateSandbox(ctx, api.CreateSandboxRequest{Runtime: "runsc", Persistent: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.c.WriteFile(ctx, sb.ID, "/tmp/counter.sh", 0o755, strings.NewReader(counterScript)); err != nil {
		t.Fatal(err)
	}
	pid := sh(t, d, sb.ID, "nohup sh /tmp/counter.sh >/dev/null 2>&1 & echo $!")
	readTok := func() (int, string) {
		t.Helper()
		out := sh(t, d, sb.ID, "rm -f /tmp/tok; kill -USR1 "+pid+"; for n in $(seq 50); do test -s /tmp/tok && break; sleep 0.05; done; cat /tmp/tok")
		f := strings.Fields(out)
		if len(f) != 2 {
			t.Fatalf("counter's answer: %q", out)
		}
		n, _ := strconv.Atoi(f[0])
		return n, f[1]
	}
	time.Sleep(600 * time.Millisecond)
	n1, tok1 := readTok()
	if n1 < 3 {
		t.Fatalf("counter at %d, not counting", n1)
	}
	t0 := time.Now()
	hib, err := d.c.Hibernate(ctx, sb.ID)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("hibernate took %s", time.Since(t0))
	if hib.State != "stopped" || hib.Reason != "hibernated" {
		t.Fatalf("after hibernate: state %s reason %q, want stopped/hibernated", hib.State, hib.Reason)
	}
	// Compute and memory are released: no process in its cgroup.
	cg := "/" + local.InstanceName(d.dataDir) + "/" + sb.ID
	if procs := cgroups.Procs(cg); len(procs) > 0 {
		t.Errorf("processes left in %s after hibernate: %v", cg, procs)
	}
	if _, err := d.c.Exec(ctx, sb.ID, api.ExecRequest{Cmd: []string{"true"}}, io.Discard, io.Discard); !client.IsConflict(err) {
		t.Errorf("exec in a hibernated sandbox: %v, want a conflict", err)
	}
	d.stop()
	time.Sleep(500 * time.Millisecond) // would count 5 more, were it running
	d.start()
	got, err := d.c.GetSandbox(ctx, sb.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.State != "stopped" || got.Reason != "hibernated" {
		t.Fatalf("after daemon restart: state %s reason %q, want stopped/hibernated", got.State, got.Reason)
	}
	// start of a hibernated sandbox restores it (as wake does).
	t0 = time.Now()
	woke, err := d.c.Start(ctx, sb.ID)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("start (restore) took %s", time.Since(t0))
	if woke.State != "running" {
		t.Fatalf("after wake: %s", woke.State)
	}
	if alive := sh(t, d, sb.ID, "kill -0 "+pid+" && echo alive"); alive != "alive" {
		t.Fatalf("counter process %s is gone after wake", pid)
	}
	time.Sleep(300 * time.Millisecond)
	n2, tok2 := readTok()
	if tok2 != tok1 {
		t.Errorf("in-memory token %q after wake, was %q: memory not restored", tok2, tok1)
	}
	// It went on from where it was: more than before, and not the ~50
	// more it would have counted had it run (or restarted from 1).
	if n2 <= n1 || n2 > n1+40 {
		t.Errorf("counter %d after wake, was %d at hibernate: want it to continue from there", n2, n1)
	}
	t.Logf("counter %d at hibernate, %d after wake; token %s kept", n1, n2, tok1)
	// Hibernating again works (the agent listens again), and wake without
	// a restart too.
	if _, err := d.c.Hibernate(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := d.c.Wake(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	if n3, tok3 := readTok(); tok3 != tok1 || n3 < n2 {
		t.Errorf("second wake: %d %q, want >= %d and %q", n3, tok3, n2, tok1)
	}
	// A hibernated sandbox is deleted with its checkpoint image.
	if _, err := d.c.Hibernate(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := d.c.DeleteSandbox(ctx, sb.ID, true); err != nil {
		t.Fatal(err)
	}
	assertDoctorClean(t, d)
	assertNoLeaks(t, d)
}

// TestHibernateRuncUnsupported: runc cannot checkpoint here; the API says
// so with a 409 and the reason, and the sandbox keeps running.
func TestHibernateRuncUnsupported(t *testing.T) {
	parallel(t)
	d := startDaemon(t)
	ctx := context.Background()
	sb, err := d.c.CreateSandbox(ctx, api.CreateSandboxRequest{Runtime: "runc"})
	if err != nil {
		t.Fatal(err)
	}
	_, err = d.c.Hibernate(ctx, sb.ID)
	if !client.IsConflict(err) || !strings.Contains(err.Error(), "runc") || !strings.Contains(err.Error(), "CRIU") {
		t.Errorf("hibernate on runc: %v, want a 409 naming runc and CRIU", err)
	}
	if got := sh(t, d, sb.ID, "echo still"); got != "still" {
		t.Errorf("sandbox after refused hibernate: %q", got)
	}
	if _, err := d.c.Wake(ctx, sb.ID); !client.IsConflict(err) {
		t.Errorf("wake of a running sandbox: %v, want a conflict", err)
	}
	_, stderr, code := d.cli("hibernate", sb.ID)
	if code == 0 || !strings.Contains(stderr, "not supported") {
		t.Errorf("berth hibernate on runc: exit %d, %q", code, stderr)
	}
}
