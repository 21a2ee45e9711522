package runtime

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/berth-sh/berth/internal/agent"
	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/internal/sandbox"
)

// The runsc tests need root, a statically linked runsc (scripts/
// install-runsc.sh) and /bin/busybox from busybox-static. They skip, naming
// the reason, when any of these is missing or when runsc cannot start a
// sandbox on this host (found by trying once).

const runscBusybox = "/bin/busybox"

var (
	runscProbeOnce sync.Once
	runscProbeErr  error
)

// newTestRunsc returns a Runsc with a private root, or skips the test.
func newTestRunsc(t *testing.T) *Runsc {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("runsc tests need root: run them as root (make unit); they do not skip")
	}
	bin := os.Getenv("BERTH_RUNSC")
	if bin == "" {
		bin = "runsc"
	}
	if _, err := exec.LookPath(bin); err != nil {
		t.Fatalf("runsc is not installed (%v): run scripts/install-runsc.sh", err)
	}
	if _, err := os.Stat(runscBusybox); err != nil {
		t.Fatalf("%s is missing (scripts/install-deps.sh installs busybox-static): %v", runscBusybox, err)
	}
	var opts []RunscOption
	if d := os.Getenv("BERTH_RUNSC_DEBUG"); d != "" {
		opts = append(opts, RunscDebugLog(d))
	}
	r, err := NewRunsc(bin, filepath.Join(t.TempDir(), "runsc-root"), opts...)
	if err != nil {
		t.Fatalf("runsc cannot be used here: %v", err)
	}
	runscProbeOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		probe, err := NewRunsc(bin, filepath.Join(os.TempDir(), fmt.Sprintf("berth-runsc-probe-%d", os.Getpid())))
		if err != nil {
			runscProbeErr = err
			return
		}
		defer os.RemoveAll(probe.Root())
		defer probe.Close()
		runscProbeErr = probe.Probe(ctx, runscBusybox, os.TempDir())
	})
	if runscProbeErr != nil {
		t.Fatalf("runsc cannot start a sandbox on this host: %v", runscProbeErr)
	}
	t.Cleanup(func() {
		// Whatever a failed test left behind.
		ctx := context.Background()
		if cs, err := r.List(ctx); err == nil {
			for _, c := range cs {
				_ = r.Delete(ctx, c.ID)
			}
		}
		_ = r.Close()
	})
	return r
}

// runscTestSpec returns a berth-shaped spec whose init runs script under
// busybox sh, with a busybox root filesystem in a temporary bundle.
func runscTestSpec(t *testing.T, id, script string) *Spec {
	t.Helper()
	dir := t.TempDir()
	// runsc's gofer serves the root filesystem from inside the spec's user
	// namespace, as the mapped root: the path must be traversable by it
	// (berth's sandbox directories are 0711).
	for _, d := range []string{filepath.Dir(dir), dir} {
		if err := os.Chmod(d, 0o711); err != nil {
			t.Fatal(err)
		}
	}
	bundle := filepath.Join(dir, "bundle")
	rootfs := filepath.Join(dir, "rootfs")
	for _, d := range []string{"bin", "proc", "dev", "sys", "tmp", "work"} {
		if err := os.MkdirAll(filepath.Join(rootfs, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	data, err := os.ReadFile(runscBusybox)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(rootfs, "bin", "busybox"), data, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, c := range []string{"sh", "sleep", "echo", "cat", "id"} {
		if err := os.Symlink("busybox", filepath.Join(rootfs, "bin", c)); err != nil {
			t.Fatal(err)
		}
	}
	// A bind-mounted directory the sandbox's root owns, as berth's agent
	// socket directory is.
	work := filepath.Join(dir, "work")
	if err := os.Mkdir(work, 0o755); err != nil {
		t.Fatal(err)
	}
	idmap := IDMap{HostUID: 100000000, HostGID: 100000000, Size: 65536}
	// Like berth's overlay root (id-shifted layers, upper owned by the
	// mapped root), the root filesystem belongs to the sandbox's root:
	// runsc's gofer creates mount points in it as that user.
	for _, p := range []string{work, rootfs} {
		err := filepath.WalkDir(p, func(path string, _ os.DirEntry, err error) error {
			if err != nil {
				return err
			}
			return os.Lchown(path, int(idmap.HostUID), int(idmap.HostGID))
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	return &Spec{
		ID:          id,
		Bundle:      bundle,
		Rootfs:      rootfs,
		Hostname:    "runsc-test",
		Args:        []string{"/bin/sh", "-c", script},
		Env:         []string{"PATH=/bin"},
		Mounts:      []Mount{{Source: work, Destination: "/work"}},
		Resources:   sandbox.Resources{CPUs: 1, MemoryBytes: 256 << 20, Pids: 64},
		IDMap:       idmap,
		CgroupsPath: fmt.Sprintf("/berth-runsc-test-%d/%s", os.Getpid(), id),
		Log:         testLog(t, filepath.Join(dir, "init.log")),
	}
}

// testLog opens a host file as a container's log, for tests that read what
// it printed (the daemon hands containers a pipe instead).
func testLog(t *testing.T, path string) *os.File {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

// runscCounterScript counts in a shell variable (state held only in memory),
// printing each value.
const runscCounterScript = `i=0; while true; do i=$((i+1)); echo "count $i"; sleep 0.1; done`

var runscCountRE = regexp.MustCompile(`count (\d+)`)

// counts returns the values a counter printed into its log so far.
func runscCounts(t *testing.T, logPath string) []int {
	t.Helper()
	data, _ := os.ReadFile(logPath)
	var out []int
	for _, m := range runscCountRE.FindAllStringSubmatch(string(data), -1) {
		n, _ := strconv.Atoi(m[1])
		out = append(out, n)
	}
	return out
}

func runscLastCount(t *testing.T, logPath string) int {
	c := runscCounts(t, logPath)
	if len(c) == 0 {
		return 0
	}
	return c[len(c)-1]
}

// runscWaitCount waits until the counter has printed a value above n.
func runscWaitCount(t *testing.T, logPath string, n int) int {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		if c := runscLastCount(t, logPath); c > n {
			return c
		}
		time.Sleep(50 * time.Millisecond)
	}
	data, _ := os.ReadFile(logPath)
	t.Fatalf("counter did not pass %d; log:\n%s", n, data)
	return 0
}

// runscAssertNoLeaks checks that runsc keeps nothing under its root and that
// the container's cgroup is gone.
func runscAssertNoLeaks(t *testing.T, r *Runsc, s *Spec) {
	t.Helper()
	if err := r.Close(); err != nil {
		t.Error(err)
	}
	ents, err := os.ReadDir(r.Root())
	if err != nil {
		t.Fatal(err)
	}
	var left []string
	for _, e := range ents {
		left = append(left, e.Name())
	}
	if len(left) > 0 {
		t.Errorf("runsc root %s not empty after delete: %v", r.Root(), left)
	}
	hs, _ := os.ReadDir("/sys/fs/cgroup")
	for _, h := range hs {
		p := filepath.Join("/sys/fs/cgroup", h.Name(), s.CgroupsPath)
		if _, err := os.Stat(p); err == nil {
			t.Errorf("cgroup %s left after delete", p)
		}
	}
	if cs, err := r.List(context.Background()); err != nil || len(cs) != 0 {
		t.Errorf("runsc list after delete: %v, %v", cs, err)
	}
	runscRemoveCgroupParents(t, s.CgroupsPath)
}

func runscCgroupFile(t *testing.T, hierarchy, rel, file string) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("/sys/fs/cgroup", hierarchy, rel, file))
	if err != nil {
		t.Errorf("cgroup file: %v", err)
	}
	return strings.TrimSpace(string(data))
}

// runscRemoveCgroupParents removes the per-test parent cgroup runsc created
// (runsc removes the container's own cgroup, not the parents it made).
func runscRemoveCgroupParents(t *testing.T, rel string) {
	parent := filepath.Dir(rel)
	hs, _ := os.ReadDir("/sys/fs/cgroup")
	for _, h := range hs {
		p := filepath.Join("/sys/fs/cgroup", h.Name(), parent)
		var err error
		for i := 0; i < 50; i++ {
			if err = os.Remove(p); err == nil || errors.Is(err, os.ErrNotExist) {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			ents, _ := os.ReadDir(p)
			var sub []string
			for _, e := range ents {
				if e.IsDir() {
					sub = append(sub, e.Name())
				}
			}
			t.Errorf("removing cgroup %s: %v (children %v)", p, err, sub)
		}
	}
}

func TestRunscStaticBinaryRequired(t *testing.T) {
	// A dynamically linked binary (any in /bin) is refused with the reason.
	if _, err := exec.LookPath("runsc"); err != nil {
		t.Fatal("runsc is not installed: run scripts/install-runsc.sh")
	}
	dir := t.TempDir()
	fake := filepath.Join(dir, "runsc")
	data, err := os.ReadFile("/bin/ls")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(fake, data, 0o755); err != nil {
		t.Fatal(err)
	}
	interp, _ := runscELFInterp(fake)
	if interp == "" {
		t.Skip("/bin/ls is statically linked here")
	}
	_, err = NewRunsc(fake, filepath.Join(dir, "root"))
	if err == nil || !strings.Contains(err.Error(), "dynamically linked") {
		t.Fatalf("NewRunsc accepted a dynamically linked runsc: %v", err)
	}
}

func TestRunscSpecAdjustments(t *testing.T) {
	s := &Spec{
		ID: "t", Bundle: "/b", Rootfs: "/r", Hostname: "h", Args: []string{"/init"},
		Resources: sandbox.Resources{CPUs: 0.5, MemoryBytes: 256 << 20, Pids: 64},
		IDMap:     IDMap{HostUID: 100000000, HostGID: 100000000, Size: 65536},
	}
	spec, err := RunscSpec(s)
	if err != nil {
		t.Fatal(err)
	}
	if spec.Linux.Seccomp != nil {
		t.Error("OCI seccomp section kept for runsc")
	}
	if len(spec.Linux.UIDMappings) != 1 || spec.Linux.UIDMappings[0].HostID != s.IDMap.HostUID {
		t.Errorf("uid mappings %+v", spec.Linux.UIDMappings)
	}
	if got := *spec.Linux.Resources.Pids.Limit; got != RunscHostPids(s.Resources.Pids) || got <= s.Resources.Pids {
		t.Errorf("host pids limit %d for %d sandbox processes", got, s.Resources.Pids)
	}
	// Without a helper there is no guest task limit to set, and no cgroup
	// mount for it.
	if _, ok := spec.Annotations[runscGuestPidsAnnotation]; ok || hasCgroupMount(spec.Mounts) {
		t.Errorf("guest task limit without a helper: %v", spec.Annotations)
	}
	s.Helper = "/.berth/berth"
	if spec, err = RunscSpec(s); err != nil {
		t.Fatal(err)
	}
	if spec.Annotations[runscGuestPidsAnnotation] != "64" || spec.Annotations[runscHelperAnnotation] != s.Helper {
		t.Errorf("guest task limit annotations %v", spec.Annotations)
	}
	if !hasCgroupMount(spec.Mounts) {
		t.Errorf("no cgroup mount for the sentry's per-container cgroup: %+v", spec.Mounts)
	}
	// The runc spec is unchanged by it.
	if rs, _ := BuildSpec(s); rs.Linux.Seccomp == nil || hasCgroupMount(rs.Mounts) {
		t.Error("BuildSpec lost its seccomp profile")
	}
}

func hasCgroupMount(ms []specs.Mount) bool {
	for _, m := range ms {
		if m.Type == "cgroup" && m.Destination == "/sys/fs/cgroup" {
			return true
		}
	}
	return false
}

func TestRunscIsolation(t *testing.T) {
	iso := (&Runsc{}).Isolation()
	if iso.Runtime != "runsc" || iso.SharedKernel || iso.Seccomp != "gvisor-sentry" || !iso.UserNamespace {
		t.Errorf("isolation %+v", iso)
	}
}

func TestRunscUnknownContainer(t *testing.T) {
	if _, err := exec.LookPath("runsc"); err != nil {
		t.Fatal("runsc is not installed: run scripts/install-runsc.sh")
	}
	r, err := NewRunsc("", t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := r.State(ctx, "nope"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("State(unknown) = %v, want not found", err)
	}
	if err := r.Delete(ctx, "nope"); err != nil {
		t.Errorf("Delete(unknown) = %v", err)
	}
	if err := r.Kill(ctx, "nope", syscall.SIGKILL); err != nil {
		t.Errorf("Kill(unknown) = %v", err)
	}
	if cs, err := r.List(ctx); err != nil || len(cs) != 0 {
		t.Errorf("List = %v, %v", cs, err)
	}
}

func TestRunscLifecycle(t *testing.T) {
	r := newTestRunsc(t)
	ctx := context.Background()
	s := runscTestSpec(t, fmt.Sprintf("lc-%d", os.Getpid()),
		`id > /work/id; echo created-by-sandbox > /work/file; `+runscCounterScript)
	pid, err := r.Start(ctx, s)
	if err != nil {
		t.Fatal(err)
	}
	if pid <= 0 || syscall.Kill(pid, 0) != nil {
		t.Errorf("Start returned pid %d, not a live process", pid)
	}
	st, err := r.State(ctx, s.ID)
	if err != nil {
		t.Fatal(err)
	}
	if st.Status != StatusRunning || st.ID != s.ID || st.Bundle != s.Bundle {
		t.Errorf("state %+v", st)
	}
	runscWaitCount(t, s.Log.Name(), 2)

	// The sandbox's host processes (Sentry, gofer) live in the sandbox's
	// cgroup, under its limits.
	procs := runscCgroupFile(t, "memory", s.CgroupsPath, "cgroup.procs")
	if !slices.Contains(strings.Fields(procs), strconv.Itoa(pid)) {
		t.Errorf("sandbox pid %d not in its memory cgroup (procs %q)", pid, procs)
	}
	if lim := runscCgroupFile(t, "memory", s.CgroupsPath, "memory.limit_in_bytes"); lim != strconv.FormatInt(s.Resources.MemoryBytes, 10) {
		t.Errorf("memory limit %q, want %d", lim, s.Resources.MemoryBytes)
	}
	t.Logf("cgroup: procs %q pids.max %q pids.current %q cpu quota %q", procs,
		runscCgroupFile(t, "pids", s.CgroupsPath, "pids.max"), runscCgroupFile(t, "pids", s.CgroupsPath, "pids.current"),
		runscCgroupFile(t, "cpu", s.CgroupsPath, "cpu.cfs_quota_us"))

	// The sandbox's root is mapped, not host root: inside it is uid 0, and
	// the file it wrote on the bind mount belongs to the mapped id.
	if data, _ := os.ReadFile(filepath.Join(filepath.Dir(s.Log.Name()), "work", "id")); !strings.Contains(string(data), "uid=0") {
		t.Errorf("id inside the sandbox: %q", data)
	}
	if fi, err := os.Stat(filepath.Join(filepath.Dir(s.Log.Name()), "work", "file")); err != nil {
		t.Errorf("file written through the bind mount: %v", err)
	} else if sys := fi.Sys().(*syscall.Stat_t); sys.Uid != s.IDMap.HostUID {
		t.Logf("file the sandbox created is owned by host uid %d (mapped root is %d)", sys.Uid, s.IDMap.HostUID)
	}

	cs, err := r.List(ctx)
	if err != nil || len(cs) != 1 || cs[0].ID != s.ID {
		t.Errorf("List = %+v, %v", cs, err)
	}

	// Pause stops the counter; Resume lets it go on.
	if err := r.Pause(ctx, s.ID); err != nil {
		t.Fatal(err)
	}
	if st, _ := r.State(ctx, s.ID); st.Status != StatusPaused {
		t.Errorf("after Pause: %+v", st)
	}
	time.Sleep(300 * time.Millisecond)
	frozen := runscLastCount(t, s.Log.Name())
	time.Sleep(700 * time.Millisecond)
	if c := runscLastCount(t, s.Log.Name()); c != frozen {
		t.Errorf("counter moved while paused: %d -> %d", frozen, c)
	}
	if err := r.Resume(ctx, s.ID); err != nil {
		t.Fatal(err)
	}
	if st, _ := r.State(ctx, s.ID); st.Status != StatusRunning {
		t.Errorf("after Resume: %+v", st)
	}
	runscWaitCount(t, s.Log.Name(), frozen)

	// Kill ends init: the container stops.
	if err := r.Kill(ctx, s.ID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		st, err := r.State(ctx, s.ID)
		if err == nil && st.Status == StatusStopped {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after Kill: %+v, %v", st, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	// Killing a stopped container is not an error.
	if err := r.Kill(ctx, s.ID, syscall.SIGKILL); err != nil {
		t.Errorf("Kill(stopped) = %v", err)
	}
	if err := r.Delete(ctx, s.ID); err != nil {
		t.Fatal(err)
	}
	if err := r.Delete(ctx, s.ID); err != nil {
		t.Errorf("second Delete = %v", err)
	}
	if _, err := r.State(ctx, s.ID); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("State after Delete = %v", err)
	}
	if syscall.Kill(pid, 0) == nil {
		time.Sleep(500 * time.Millisecond)
		if syscall.Kill(pid, 0) == nil {
			t.Errorf("sandbox process %d still alive after Delete", pid)
		}
	}
	runscAssertNoLeaks(t, r, s)
}

// A Start that fails, in runsc create (the gofer cannot reach the root
// filesystem) or in runsc start (no such init binary), leaves nothing.
func TestRunscStartFailureLeavesNothing(t *testing.T) {
	r := newTestRunsc(t)
	ctx := context.Background()
	t.Run("create", func(t *testing.T) {
		s := runscTestSpec(t, fmt.Sprintf("fc-%d", os.Getpid()), runscCounterScript)
		if err := os.Chmod(s.Rootfs, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(s.Rootfs, 0, 0); err != nil {
			t.Fatal(err)
		}
		_, err := r.Start(ctx, s)
		if err == nil {
			t.Fatal("Start succeeded on an unreachable root filesystem")
		}
		t.Logf("Start: %v", err)
		runscAssertNoLeaks(t, r, s)
	})
	t.Run("start", func(t *testing.T) {
		s := runscTestSpec(t, fmt.Sprintf("fs-%d", os.Getpid()), "")
		s.Args = []string{"/bin/no-such-init"}
		_, err := r.Start(ctx, s)
		if err == nil {
			t.Fatal("Start succeeded without an init binary")
		}
		t.Logf("Start: %v", err)
		runscAssertNoLeaks(t, r, s)
	})
}

// runsc resolves an unknown id as an abbreviation of a longer one: the
// class must never act on another container through a prefix.
func TestRunscIDPrefix(t *testing.T) {
	r := newTestRunsc(t)
	ctx := context.Background()
	short := fmt.Sprintf("px-%d", os.Getpid())
	s := runscTestSpec(t, short+"-long", runscCounterScript)
	if _, err := r.Start(ctx, s); err != nil {
		t.Fatal(err)
	}
	if _, err := r.State(ctx, short); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("State(prefix) = %v, want not found", err)
	}
	if err := r.Kill(ctx, short, syscall.SIGKILL); err != nil {
		t.Errorf("Kill(prefix) = %v", err)
	}
	if err := r.Pause(ctx, short); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("Pause(prefix) = %v, want not found", err)
	}
	if err := r.Delete(ctx, short); err != nil {
		t.Errorf("Delete(prefix) = %v", err)
	}
	if st, err := r.State(ctx, s.ID); err != nil || st.Status != StatusRunning {
		t.Fatalf("the longer container was hit through its prefix: %+v, %v", st, err)
	}
	s2 := runscTestSpec(t, short, runscCounterScript)
	if _, err := r.Start(ctx, s2); !errors.Is(err, errdefs.ErrConflict) {
		t.Errorf("Start of a prefix id = %v, want conflict", err)
	}
	if err := r.Delete(ctx, s.ID); err != nil {
		t.Fatal(err)
	}
	runscAssertNoLeaks(t, r, s)
}

func TestRunscDeleteRunning(t *testing.T) {
	r := newTestRunsc(t)
	ctx := context.Background()
	s := runscTestSpec(t, fmt.Sprintf("del-%d", os.Getpid()), runscCounterScript)
	if _, err := r.Start(ctx, s); err != nil {
		t.Fatal(err)
	}
	runscWaitCount(t, s.Log.Name(), 1)
	if err := r.Delete(ctx, s.ID); err != nil {
		t.Fatal(err)
	}
	runscAssertNoLeaks(t, r, s)
}

func TestRunscCheckpointRestore(t *testing.T) {
	r := newTestRunsc(t)
	ctx := context.Background()
	s := runscTestSpec(t, fmt.Sprintf("cr-%d", os.Getpid()), runscCounterScript)
	if _, err := r.Start(ctx, s); err != nil {
		t.Fatal(err)
	}
	runscWaitCount(t, s.Log.Name(), 5)
	img := filepath.Join(t.TempDir(), "image")
	if err := r.Checkpoint(ctx, s.ID, img); err != nil {
		t.Fatal(err)
	}
	before := runscLastCount(t, s.Log.Name())
	if _, err := r.State(ctx, s.ID); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("State after Checkpoint = %v, want not found (compute released)", err)
	}
	time.Sleep(500 * time.Millisecond)
	if c := runscLastCount(t, s.Log.Name()); c != before {
		t.Errorf("counter moved after checkpoint: %d -> %d", before, c)
	}
	if err := r.Restore(ctx, s.ID, s.Bundle, img, s.Log); err != nil {
		t.Fatal(err)
	}
	if st, err := r.State(ctx, s.ID); err != nil || st.Status != StatusRunning {
		t.Errorf("State after Restore = %+v, %v", st, err)
	}
	runscWaitCount(t, s.Log.Name(), before+3)
	// The values after the restore continue from where the counter was:
	// no restart from 1, no gap.
	c := runscCounts(t, s.Log.Name())
	for i := 1; i < len(c); i++ {
		if c[i] != c[i-1]+1 {
			t.Fatalf("counter did not continue: ... %v", c[max(0, i-3):min(len(c), i+3)])
		}
	}
	t.Logf("counted to %d before the checkpoint, %d after the restore", before, c[len(c)-1])
	if err := r.Delete(ctx, s.ID); err != nil {
		t.Fatal(err)
	}
	runscAssertNoLeaks(t, r, s)
}

// TestRunscAgent runs berth's agent as a runsc sandbox's init, the way the
// manager does, and talks to it over the socket on the bind-mounted run
// directory (which needs --host-uds=create). It needs the static agent
// binary: BERTH_AGENT_BIN=path (e.g. CGO_ENABLED=0 go build -o
// /tmp/berth-agent ./cmd/berth-agent), else it builds one.
func TestRunscAgent(t *testing.T) {
	r := newTestRunsc(t)
	bin := os.Getenv("BERTH_AGENT_BIN")
	if bin == "" {
		bin = filepath.Join(t.TempDir(), "berth-agent")
		cmd := exec.Command("go", "build", "-o", bin, "../../cmd/berth-agent")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("building the agent (or set BERTH_AGENT_BIN): %v\n%s", err, out)
		}
	}
	ctx := context.Background()
	s := runscTestSpec(t, fmt.Sprintf("agent-%d", os.Getpid()), "")
	run := filepath.Join(filepath.Dir(s.Log.Name()), "work")
	if err := os.MkdirAll(filepath.Join(s.Rootfs, ".berth"), 0o755); err != nil {
		t.Fatal(err)
	}
	_ = os.Lchown(filepath.Join(s.Rootfs, ".berth"), int(s.IDMap.HostUID), int(s.IDMap.HostGID))
	s.Mounts = []Mount{
		{Source: bin, Destination: "/.berth/berth", ReadOnly: true},
		{Source: run, Destination: "/.berth/run"},
	}
	s.Args = []string{"/.berth/berth", "--socket", "/.berth/run/agent.sock"}
	if _, err := r.Start(ctx, s); err != nil {
		t.Fatal(err)
	}
	c := agent.NewClient(filepath.Join(run, "agent.sock"))
	deadline := time.Now().Add(20 * time.Second)
	for {
		pctx, cancel := context.WithTimeout(ctx, time.Second)
		_, err := c.Ping(pctx)
		cancel()
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			log, _ := os.ReadFile(s.Log.Name())
			t.Fatalf("agent not reachable: %v; log:\n%s", err, log)
		}
		time.Sleep(50 * time.Millisecond)
	}
	var out strings.Builder
	exit, err := c.Exec(ctx, agent.ExecRequest{
		Argv: []string{"/bin/sh", "-c", "id; cat /proc/version; dmesg | head -1"},
		Env:  []string{"PATH=/bin"},
	}, agent.ExecIO{Stdout: &out, Stderr: &out})
	if err != nil || exit.Code != 0 {
		t.Fatalf("exec: %+v, %v: %s", exit, err, out.String())
	}
	t.Logf("exec in the runsc sandbox:\n%s", out.String())
	if !strings.Contains(out.String(), "uid=0") || !strings.Contains(out.String(), "gVisor") {
		t.Errorf("not root inside a gVisor kernel: %q", out.String())
	}
	if err := r.Delete(ctx, s.ID); err != nil {
		t.Fatal(err)
	}
	runscAssertNoLeaks(t, r, s)
}
