package e2e

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/berth-sh/berth/api"
)

// storedRoot is the host uid every on-disk layer, writable layer and
// volume keeps sandbox root's files as; each sandbox sees them through
// idmapped mounts in its own range.
const storedRoot = 100000000

// initPid is the host pid of sandbox id's PID 1.
func initPid(t *testing.T, d *daemon, id string) int {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(d.dataDir, "sandboxes", id, "bundle", "init.pid"))
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	return pid
}

// hostUids returns the real, effective, saved and fs uids of a host pid.
func hostUids(t *testing.T, pid int) string {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "Uid:"); ok {
			return strings.Join(strings.Fields(v), " ")
		}
	}
	t.Fatalf("no Uid line for %d", pid)
	return ""
}

// usernsOwner is the host uid owning the user namespace of a host pid.
func usernsOwner(t *testing.T, pid int) uint32 {
	t.Helper()
	f, err := os.Open(fmt.Sprintf("/proc/%d/ns/user", pid))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var uid uint32
	if _, _, e := unix.Syscall(unix.SYS_IOCTL, f.Fd(), unix.NS_GET_OWNER_UID, uintptr(unsafe.Pointer(&uid))); e != 0 {
		t.Fatal(e)
	}
	return uid
}

// hostOwner stats path inside sandbox pid's root from the host.
func hostOwner(t *testing.T, pid int, path string) (uid, gid uint32) {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Lstat(fmt.Sprintf("/proc/%d/root%s", pid, path), &st); err != nil {
		t.Fatal(err)
	}
	return st.Uid, st.Gid
}

func inspect(t *testing.T, d *daemon, id string) *api.Sandbox {
	t.Helper()
	sb, err := d.c.GetSandbox(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return sb
}

// TestHostIDsPerSandbox: two sandboxes run as different host uids, in user
// namespaces their own host root uid owns; their files show on the host in
// their own range (and stay in the stored range on disk); ranges survive a
// daemon restart, and a deleted sandbox's range is released and reused.
func TestHostIDsPerSandbox(t *testing.T) {
	d := startDaemon(t)
	ctx := context.Background()
	a, err := d.c.CreateSandbox(ctx, api.CreateSandboxRequest{Name: "a"})
	if err != nil {
		t.Fatal(err)
	}
	b, err := d.c.CreateSandbox(ctx, api.CreateSandboxRequest{Name: "b", Persistent: true})
	if err != nil {
		t.Fatal(err)
	}
	ia, ib := a.Isolation, b.Isolation
	for _, iso := range []api.Isolation{ia, ib} {
		if iso.IDMode != "per-sandbox" || iso.UsernsOwner != "sandbox" || iso.HostIDs != 65536 ||
			iso.HostUID != iso.HostGID || iso.HostUID <= storedRoot || (iso.HostUID-storedRoot)%65536 != 0 {
			t.Fatalf("isolation %+v", iso)
		}
	}
	if ia.HostUID == ib.HostUID {
		t.Fatalf("both sandboxes have host uid %d", ia.HostUID)
	}
	pa, pb := initPid(t, d, a.ID), initPid(t, d, b.ID)
	for _, c := range []struct {
		pid  int
		base uint32
	}{{pa, ia.HostUID}, {pb, ib.HostUID}} {
		want := strings.Repeat(fmt.Sprint(c.base)+" ", 4)
		if got := hostUids(t, c.pid); got != strings.TrimSpace(want) {
			t.Errorf("pid %d runs as host uids %q, want %q", c.pid, got, want)
		}
		if o := usernsOwner(t, c.pid); o != c.base {
			t.Errorf("pid %d: user namespace owned by host uid %d, want %d", c.pid, o, c.base)
		}
	}
	// Files: the root layer and the workspace volume, as root and as 1000.
	execOut(t, d, b.ID, "sh", "-c", "touch /tmp/r /workspace/r; touch /tmp/u /workspace/u; chown 1000:1001 /tmp/u /workspace/u; ls -ln /usr/bin/env")
	for _, f := range []struct {
		path string
		off  uint32
	}{{"/tmp/r", 0}, {"/workspace/r", 0}, {"/tmp/u", 1000}, {"/workspace/u", 1000}, {"/etc", 0}} {
		uid, gid := hostOwner(t, pb, f.path)
		if uid != ib.HostUID+f.off || (f.off != 0 && gid != ib.HostGID+f.off+1) {
			t.Errorf("%s is host %d:%d, want uid %d", f.path, uid, gid, ib.HostUID+f.off)
		}
	}
	var st syscall.Stat_t
	if err := syscall.Lstat(filepath.Join(d.dataDir, "pool", "scratch", b.ID, "mnt", "upper", "tmp", "u"), &st); err == nil {
		if st.Uid != storedRoot+1000 {
			t.Errorf("on disk /tmp/u is stored as %d, want %d", st.Uid, storedRoot+1000)
		}
	} else if _, err2 := os.Stat(filepath.Join(d.dataDir, "pool")); err2 == nil {
		t.Errorf("upper dir file: %v", err)
	}
	if out := execOut(t, d, a.ID, "sh", "-c", "stat -c '%u %g' /etc /usr/bin; id -u"); out != "0 0\n65534 65534\n0\n" {
		t.Errorf("a sees its layers as %q", out)
	}

	// A restart keeps every range and every process where it was.
	d.stop()
	d.start()
	for _, sb := range []*api.Sandbox{a, b} {
		got := inspect(t, d, sb.ID)
		if got.State != "running" || got.Isolation.HostUID != sb.Isolation.HostUID || got.Isolation.IDMode != "per-sandbox" {
			t.Errorf("after restart %s: %s %+v, was %+v", sb.Name, got.State, got.Isolation, sb.Isolation)
		}
	}
	if hostUids(t, initPid(t, d, b.ID)) != strings.TrimSpace(strings.Repeat(fmt.Sprint(ib.HostUID)+" ", 4)) {
		t.Errorf("b's init changed uid across the restart")
	}
	c, err := d.c.CreateSandbox(ctx, api.CreateSandboxRequest{Name: "c"})
	if err != nil {
		t.Fatal(err)
	}
	if u := c.Isolation.HostUID; u == ia.HostUID || u == ib.HostUID {
		t.Fatalf("c got a range in use: %d", u)
	}
	// b stops and starts in its range; a is deleted and its range reused.
	if _, err := d.c.Stop(ctx, b.ID); err != nil {
		t.Fatal(err)
	}
	if got := inspect(t, d, b.ID); got.Isolation.HostUID != ib.HostUID {
		t.Errorf("stopped b has %+v", got.Isolation)
	}
	if _, err := d.c.Start(ctx, b.ID); err != nil {
		t.Fatal(err)
	}
	if uid, _ := hostOwner(t, initPid(t, d, b.ID), "/workspace/u"); uid != ib.HostUID+1000 {
		t.Errorf("restarted b sees /workspace/u as host %d", uid)
	}
	if _, err := d.c.DeleteSandbox(ctx, a.ID, false); err != nil {
		t.Fatal(err)
	}
	if got := inspect(t, d, a.ID); got.Isolation.IDMode != "" || got.Isolation.HostUID != 0 {
		t.Errorf("deleted a still holds ids: %+v", got.Isolation)
	}
	e, err := d.c.CreateSandbox(ctx, api.CreateSandboxRequest{Name: "e"})
	if err != nil {
		t.Fatal(err)
	}
	if e.Isolation.HostUID != ia.HostUID {
		t.Errorf("e got %d; the lowest free range is a's released %d", e.Isolation.HostUID, ia.HostUID)
	}
	assertDoctorClean(t, d)
}

// TestHostIDsForkChild: a fork child has its own range; it sees the
// parent's files (root layer and workspace volume) with their owners as
// they were, as its own root and users, and what it creates is in its
// range on the host.
func TestHostIDsForkChild(t *testing.T) {
	d := startDaemon(t)
	ctx := context.Background()
	parent, err := d.c.CreateSandbox(ctx, api.CreateSandboxRequest{Name: "parent", Persistent: true})
	if err != nil {
		t.Fatal(err)
	}
	execOut(t, d, parent.ID, "sh", "-c", "echo p > /workspace/p; echo p > /root/p; touch /workspace/u /root/u; chown 123:456 /workspace/u /root/u")
	resp, err := d.c.Fork(ctx, parent.ID, api.ForkRequest{Count: 2})
	if err != nil {
		t.Fatal(err)
	}
	pp := initPid(t, d, parent.ID)
	seen := map[uint32]bool{parent.Isolation.HostUID: true}
	for _, c := range resp.Children {
		base := c.Isolation.HostUID
		if seen[base] || c.Isolation.IDMode != "per-sandbox" {
			t.Fatalf("child %s: %+v (taken: %v)", c.ID, c.Isolation, seen)
		}
		seen[base] = true
		out := execOut(t, d, c.ID, "sh", "-c", "stat -c '%n %u %g' /workspace/p /root/p /workspace/u /root/u; cat /workspace/p /root/p; touch /workspace/new /root/new; mkdir /home/x; chown 7:8 /home/x")
		want := "/workspace/p 0 0\n/root/p 0 0\n/workspace/u 123 456\n/root/u 123 456\np\np\n"
		if out != want {
			t.Errorf("child sees:\n%s\nwant:\n%s", out, want)
		}
		cp := initPid(t, d, c.ID)
		for _, f := range []struct {
			path string
			off  uint32
		}{{"/workspace/p", 0}, {"/root/u", 123}, {"/workspace/u", 123}, {"/workspace/new", 0}, {"/root/new", 0}, {"/home/x", 7}} {
			if uid, _ := hostOwner(t, cp, f.path); uid != base+f.off {
				t.Errorf("child %s: %s is host uid %d, want %d", c.ID, f.path, uid, base+f.off)
			}
		}
	}
	// The parent's view is unchanged.
	if uid, gid := hostOwner(t, pp, "/workspace/u"); uid != parent.Isolation.HostUID+123 || gid != parent.Isolation.HostGID+456 {
		t.Errorf("parent's /workspace/u is host %d:%d", uid, gid)
	}
	// A sandbox made from a snapshot has its own range as well.
	sn, err := d.c.CreateSnapshot(ctx, parent.ID, api.CreateSnapshotRequest{Name: "s"})
	if err != nil {
		t.Fatal(err)
	}
	restored, err := d.c.CreateSandbox(ctx, api.CreateSandboxRequest{Snapshot: sn.ID})
	if err != nil {
		t.Fatal(err)
	}
	if base := restored.Isolation.HostUID; seen[base] || restored.Isolation.IDMode != "per-sandbox" {
		t.Fatalf("sandbox from snapshot: %+v (taken: %v)", restored.Isolation, seen)
	}
	if out := execOut(t, d, restored.ID, "stat", "-c", "%u %g", "/workspace/u", "/root/u"); out != "123 456\n123 456\n" {
		t.Errorf("sandbox from snapshot sees %q", out)
	}
	if uid, _ := hostOwner(t, initPid(t, d, restored.ID), "/root/u"); uid != restored.Isolation.HostUID+123 {
		t.Errorf("sandbox from snapshot: /root/u is host uid %d", uid)
	}
}

// TestHostIDsPoolMember: a warm-pool member has its own range from when
// it was made, and the sandbox it becomes keeps it.
func TestHostIDsPoolMember(t *testing.T) {
	d := startDaemon(t)
	ctx := context.Background()
	if _, err := d.c.SetPool(ctx, "base", 1); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if p, err := d.c.GetPool(ctx, "base"); err == nil && p.Ready >= 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("pool did not fill")
		}
	}
	first, err := d.c.CreateSandbox(ctx, api.CreateSandboxRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if first.Reason != "create (warm pool)" {
		t.Fatalf("the first create did not claim the pool member: %q", first.Reason)
	}
	second, err := d.c.CreateSandbox(ctx, api.CreateSandboxRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for _, sb := range []*api.Sandbox{first, second} {
		if sb.Isolation.IDMode != "per-sandbox" {
			t.Fatalf("%s: %+v", sb.ID, sb.Isolation)
		}
		want := strings.TrimSpace(strings.Repeat(fmt.Sprint(sb.Isolation.HostUID)+" ", 4))
		if got := hostUids(t, initPid(t, d, sb.ID)); got != want {
			t.Errorf("%s runs as %q, its record says %d", sb.ID, got, sb.Isolation.HostUID)
		}
	}
	if first.Isolation.HostUID == second.Isolation.HostUID {
		t.Errorf("two sandboxes share host uid %d", first.Isolation.HostUID)
	}
}

// TestHostIDsKernelLimits: the per-user kernel counts one sandbox spends
// are its own. A sandbox that takes every inotify instance its uid may
// have leaves the other sandbox, and host root, able to make theirs; one
// that holds thousands of pipes past the pipe-buffer quota leaves the
// other's new pipes at full size (64 KiB, not the minimum).
func TestHostIDsKernelLimits(t *testing.T) {
	d := startDaemon(t)
	ctx := context.Background()
	greedy, err := d.c.CreateSandbox(ctx, api.CreateSandboxRequest{Name: "greedy"})
	if err != nil {
		t.Fatal(err)
	}
	other, err := d.c.CreateSandbox(ctx, api.CreateSandboxRequest{Name: "other"})
	if err != nil {
		t.Fatal(err)
	}
	// The hog holds its inotify instances and pipes in the background and
	// says how far it got.
	const hog = `
import ctypes, fcntl, os, time
libc = ctypes.CDLL(None, use_errno=True)
fds = []
while len(fds) < 100000:
    fd = libc.inotify_init()
    if fd < 0:
        break
    fds.append(fd)
big = 0
pipes = []
for i in range(3000):
    r, w = os.pipe()
    pipes.append((r, w))
    try:
        fcntl.fcntl(w, 1031, 1 << 20)  # F_SETPIPE_SZ
        big += 1
    except OSError:
        pass
r, w = os.pipe()
small = fcntl.fcntl(w, 1032)  # F_GETPIPE_SZ
with open('/tmp/hog.tmp', 'w') as f:
    f.write('%d %d %d %d\n' % (len(fds), ctypes.get_errno(), big, small))
os.rename('/tmp/hog.tmp', '/tmp/hog')
time.sleep(600)
`
	hctx, stop := context.WithCancel(ctx)
	defer stop()
	go d.c.Exec(hctx, greedy.ID, api.ExecRequest{Cmd: []string{"python3", "-c", hog}, TimeoutSeconds: 600}, io.Discard, io.Discard)
	var got string
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		var out strings.Builder
		if exit, err := d.c.Exec(ctx, greedy.ID, api.ExecRequest{Cmd: []string{"cat", "/tmp/hog"}}, &out, io.Discard); err == nil && exit.Code == 0 {
			got = out.String()
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the hog did not report")
		}
	}
	var instances, errno, big, small int
	if _, err := fmt.Sscan(got, &instances, &errno, &big, &small); err != nil {
		t.Fatalf("hog said %q", got)
	}
	t.Logf("greedy: %d inotify instances (then errno %d), %d pipes of 1 MiB, then new pipes of %d bytes", instances, errno, big, small)
	if errno != int(syscall.EMFILE) || instances > 200 {
		t.Fatalf("greedy was not stopped by its inotify limit: %d instances, errno %d", instances, errno)
	}
	if small >= 65536 {
		// Past the quota new pipes get the minimum (8 KiB since Linux 5.14, 4 KiB before).
		t.Fatalf("greedy's new pipes are %d bytes: it did not reach the pipe-buffer quota", small)
	}
	// The other sandbox is untouched by either.
	out := execOut(t, d, other.ID, "python3", "-c", `
import ctypes, fcntl, os
libc = ctypes.CDLL(None, use_errno=True)
n = 0
for i in range(20):
    if libc.inotify_init() >= 0:
        n += 1
r, w = os.pipe()
print(n, fcntl.fcntl(w, 1032))
`)
	if out != "20 65536\n" {
		t.Errorf("other sandbox: %q inotify instances and pipe size, want \"20 65536\"", out)
	}
	// Nor is host root: greedy's namespace is not charged to it.
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC)
	if err != nil {
		t.Errorf("host root cannot make an inotify instance: %v", err)
	} else {
		unix.Close(fd)
	}
}

// TestHostIDsRunsc: a gVisor sandbox runs in its own range too (the
// Sentry's user namespace gets the sandbox's mapping; gVisor serves
// inotify and pipes itself, so the namespace's owner does not matter):
// files it writes to its root show in its range through its overlay and
// are stored in the stored range.
func TestHostIDsRunsc(t *testing.T) {
	d := startRunscDaemon(t)
	ctx := context.Background()
	sb, err := d.c.CreateSandbox(ctx, api.CreateSandboxRequest{Runtime: "runsc"})
	if err != nil {
		t.Fatal(err)
	}
	iso := sb.Isolation
	if iso.IDMode != "per-sandbox" || iso.UsernsOwner != "sentry" || iso.HostUID <= storedRoot {
		t.Fatalf("isolation %+v", iso)
	}
	sh(t, d, sb.ID, "touch /root/r /root/u; chown 1000:1000 /root/u") // runsc mounts its own tmpfs on /tmp
	for _, f := range []struct {
		path string
		off  uint32
	}{{"/root/r", 0}, {"/root/u", 1000}} {
		var st syscall.Stat_t
		if err := syscall.Lstat(filepath.Join(d.dataDir, "sandboxes", sb.ID, "rootfs", f.path), &st); err != nil {
			t.Fatal(err)
		}
		if st.Uid != iso.HostUID+f.off {
			t.Errorf("%s shows as host uid %d, want %d", f.path, st.Uid, iso.HostUID+f.off)
		}
		if err := syscall.Lstat(filepath.Join(d.dataDir, "pool", "scratch", sb.ID, "upper", f.path), &st); err == nil && st.Uid != storedRoot+f.off {
			t.Errorf("%s is stored as %d, want %d", f.path, st.Uid, storedRoot+f.off)
		}
	}
}

// TestHostIDsSharedFallback: where idmapped mounts are unavailable (here
// simulated) the daemon says so and runs every sandbox in the one stored
// range, as before per-sandbox ranges; forks and persistence still work.
func TestHostIDsSharedFallback(t *testing.T) {
	base, err := os.MkdirTemp("", "berth-e2e-")
	if err != nil {
		t.Fatal(err)
	}
	os.Chmod(base, 0o711)
	d := &daemon{t: t, dataDir: base + "/data", socket: base + "/berth.sock", env: []string{"BERTH_FAILPOINTS=ids.no-idmap"}}
	d.start()
	t.Cleanup(func() {
		d.cleanup()
		os.RemoveAll(base)
	})
	if !strings.Contains(d.logs.String(), "idmapped mounts unavailable") {
		t.Errorf("the daemon did not log the fallback:\n%s", d.logs)
	}
	ctx := context.Background()
	sb, err := d.c.CreateSandbox(ctx, api.CreateSandboxRequest{Persistent: true})
	if err != nil {
		t.Fatal(err)
	}
	if iso := sb.Isolation; iso.IDMode != "shared" || iso.HostUID != storedRoot || iso.HostIDs != 65536 {
		t.Fatalf("isolation %+v", iso)
	}
	execOut(t, d, sb.ID, "sh", "-c", "echo x > /workspace/f; chown 5:5 /workspace/f; touch /root/r")
	resp, err := d.c.Fork(ctx, sb.ID, api.ForkRequest{})
	if err != nil {
		t.Fatal(err)
	}
	child := resp.Children[0]
	if child.Isolation.HostUID != storedRoot || child.Isolation.IDMode != "shared" {
		t.Fatalf("child isolation %+v", child.Isolation)
	}
	if out := execOut(t, d, child.ID, "stat", "-c", "%u %s", "/workspace/f", "/root/r"); out != "5 2\n0 0\n" {
		t.Errorf("child sees %q", out)
	}
	if uid, _ := hostOwner(t, initPid(t, d, child.ID), "/workspace/f"); uid != storedRoot+5 {
		t.Errorf("child's /workspace/f is host uid %d", uid)
	}
	for _, id := range []string{child.ID, sb.ID} {
		if _, err := d.c.DeleteSandbox(ctx, id, false); err != nil {
			t.Fatal(err)
		}
	}
	assertDoctorClean(t, d)
}
