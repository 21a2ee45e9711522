package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

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
