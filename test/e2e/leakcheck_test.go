package e2e

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/internal/cgroups"
	"github.com/berth-sh/berth/internal/node/local"
	"github.com/berth-sh/berth/internal/testenv"
)

// TestLeakCheckFindsLeaks: the leak check every harness trusts does see
// each kind of leftover it claims to — a mount under the data dir, a
// sandbox cgroup under the instance's parent, a process of the daemon's
// group, a process naming the data dir, a sandbox dir — and Clean removes
// what it can, after which Check finds nothing.
func TestLeakCheckFindsLeaks(t *testing.T) {
	parallel(t)
	base, err := testenv.TempDir("", "e2e")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(base)
	data := filepath.Join(base, "data")
	s := testenv.Scope{DataDir: data}
	if left := testenv.Check(s); len(left) > 0 {
		t.Fatalf("a fresh dir has leaks: %v", left)
	}
	mnt := filepath.Join(data, "sandboxes", "sb1", "rootfs")
	if err := os.MkdirAll(mnt, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("tmpfs", mnt, "tmpfs", 0, "size=1m"); err != nil {
		t.Fatal(err)
	}
	defer unix.Unmount(mnt, unix.MNT_DETACH)
	parent := "/" + local.InstanceName(data)
	cg := cgroups.Paths(parent + "/sb1")[0]
	if err := os.MkdirAll(cg, 0o755); err != nil {
		t.Fatal(err)
	}
	group := exec.Command("sleep", "300")
	group.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	naming := exec.Command("sh", "-c", "while :; do sleep 1; done", data+"/x")
	for _, c := range []*exec.Cmd{group, naming} {
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		defer c.Wait()
		defer c.Process.Kill()
	}
	s.PGID = group.Process.Pid
	kinds := map[string]int{}
	for _, l := range testenv.Check(s) {
		kinds[l.Kind]++
		t.Logf("found: %s", l)
	}
	for kind, n := range map[string]int{"mount": 1, "cgroup": 1, "process": 2, "file": 1} {
		if kinds[kind] < n {
			t.Errorf("%d %s leaks found, want %d", kinds[kind], kind, n)
		}
	}
	// While the daemon runs, its process group is not a leak.
	s.Running = true
	for _, l := range testenv.Check(s) {
		if l.Kind == "process" && !slices.Contains([]int{naming.Process.Pid}, pidOf(l.What)) {
			t.Errorf("running daemon's group counted: %s", l)
		}
	}
	s.Running = false
	group.Process.Kill()
	group.Wait()
	naming.Process.Kill()
	naming.Wait()
	if _, err := testenv.Clean(s); err != nil {
		t.Errorf("clean: %v", err)
	}
	os.RemoveAll(filepath.Join(data, "sandboxes"))
	if left := testenv.Check(s); len(left) > 0 {
		t.Errorf("after Clean: %v", left)
	}
	if left := testenv.CgroupDirs(parent); len(left) > 0 {
		t.Errorf("cgroup parent left after Clean: %v", left)
	}
}

func pidOf(what string) int {
	var pid int
	for _, c := range what {
		if c < '0' || c > '9' {
			break
		}
		pid = pid*10 + int(c-'0')
	}
	return pid
}

// TestCleanWithoutTheDaemon: when a daemon cannot be started again to
// delete its sandboxes, testenv.Clean alone takes the host back — the
// sandbox's processes (one with its working directory in a volume, so the
// volume's mount is busy), the overlay and volume mounts, the volume's loop
// device and the cgroups — and Check finds nothing after it. This is what
// the harness falls back to; without it a failed restart left a pinned
// loop device to every later run on the machine.
func TestCleanWithoutTheDaemon(t *testing.T) {
	parallel(t)
	base, err := testenv.TempDir("", "e2e")
	if err != nil {
		t.Fatal(err)
	}
	data := filepath.Join(base, "data")
	var args []string
	p, err := testenv.Start(context.Background(), testenv.Config{
		Binary: berthBin, DataDir: data, Socket: filepath.Join(base, "berth.sock"), Args: args,
		LogLevel: "debug", UserAgent: "berth-e2e", ReadyTimeout: 30 * time.Second, StopTimeout: 20 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	s := p.Scope()
	defer func() {
		testenv.Clean(s)
		if err := testenv.RemoveDir(base); err != nil {
			t.Error(err)
		}
	}()
	ctx := context.Background()
	c := p.Client()
	if _, err := c.CreateVolume(ctx, api.CreateVolumeRequest{Name: "v", SizeBytes: 16 << 20}); err != nil {
		t.Fatal(err)
	}
	sb, err := c.CreateSandbox(ctx, api.CreateSandboxRequest{Volumes: []api.VolumeMount{{Name: "v", Path: "/data"}}})
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if x, err := c.Exec(ctx, sb.ID, api.ExecRequest{Cmd: []string{"sh", "-c", "cd /data && setsid sleep 600 >/dev/null 2>&1 </dev/null & echo started"}}, &out, &out); err != nil || x.Code != 0 {
		t.Fatalf("exec: %v %+v %s", err, x, out.String())
	}
	p.Kill()
	kinds := map[string]int{}
	for _, l := range testenv.Check(s) {
		kinds[l.Kind]++
	}
	for _, kind := range []string{"mount", "loop", "cgroup"} {
		if kinds[kind] == 0 {
			t.Errorf("before Clean: no %s left by the killed daemon's sandbox, so this test proves nothing (%v)", kind, kinds)
		}
	}
	if _, err := testenv.Clean(s); err != nil {
		t.Errorf("clean: %v", err)
	}
	for _, l := range testenv.Check(s) {
		if l.Kind == "file" {
			continue // the sandbox's dir and runtime state: the data dir is the caller's to remove
		}
		t.Errorf("after Clean: %s", l)
	}
}
