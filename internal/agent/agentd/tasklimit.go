package agentd

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// The task limit of a gVisor sandbox (see internal/runtime/runsc_limits.go).
//
// gVisor runs a sandbox's tasks inside its Sentry, where the host pids
// cgroup does not see them; the Sentry's own cgroup v2 pids controller
// does (runsc --in-sandbox-cgroup=v2). runsc puts the container in a
// cgroup "/<container id>" of that hierarchy and mounts the hierarchy at
// /sys/fs/cgroup, but sets no limit on it, and its write-control
// command crashes the Sentry on v2 files in this gVisor version. So the
// runtime runs this helper once after start, through runsc exec with
// CAP_SYS_ADMIN, before anything but the agent runs in the sandbox: it
// writes the limit into its own cgroup's pids.max, then remounts
// /sys/fs/cgroup read-only, so that root in the sandbox (no CAP_SYS_ADMIN
// to remount or mount another view) cannot raise the limit. Limits are
// hierarchical in v2, so no cgroup below could escape it either.

// LimitTasksVerb is the verb of the agent binary (berth-agent) that runs the
// helper: `berth-agent agent-limit-tasks N`.
const LimitTasksVerb = "agent-limit-tasks"

// cgroupRoot is where runsc mounts the container's cgroups.
const cgroupRoot = "/sys/fs/cgroup"

// maxTasksLimit is the highest pids.max gVisor accepts (pidMaxLimit).
const maxTasksLimit = 4 << 20

// LimitTasksMain is the helper's entry point; it returns the exit code.
func LimitTasksMain(args []string) int {
	if len(args) != 1 {
		fmt.Fprintf(os.Stderr, "usage: berth %s N\n", LimitTasksVerb)
		return 2
	}
	n, err := strconv.ParseInt(args[0], 10, 64)
	if err != nil || n < 1 || n > maxTasksLimit {
		fmt.Fprintf(os.Stderr, "berth %s: limit %q is not in 1..%d\n", LimitTasksVerb, args[0], maxTasksLimit)
		return 2
	}
	if err := limitTasks(cgroupRoot, n); err != nil {
		fmt.Fprintf(os.Stderr, "berth %s: %v\n", LimitTasksVerb, err)
		return 1
	}
	return 0
}

// limitTasks sets pids.max of the calling process's cgroup (v2, under
// root) to n and makes every mount at or under root read-only.
func limitTasks(root string, n int64) error {
	cg, err := ownCgroup("/proc/self/cgroup")
	if err != nil {
		return err
	}
	if cg == "/" {
		return errors.New("in the root cgroup, which has no pids.max")
	}
	file := filepath.Join(root, cg, "pids.max")
	if err := os.WriteFile(file, []byte(strconv.FormatInt(n, 10)), 0); err != nil {
		return fmt.Errorf("setting the task limit: %w", err)
	}
	if b, err := os.ReadFile(file); err != nil || strings.TrimSpace(string(b)) != strconv.FormatInt(n, 10) {
		return fmt.Errorf("task limit reads back %q (%v), want %d", b, err, n)
	}
	mounts, err := mountsUnder(root)
	if err != nil {
		return err
	}
	if len(mounts) == 0 {
		return fmt.Errorf("no cgroup mounts under %s", root)
	}
	// Deepest first does not matter for a bind remount; every one is done.
	const flags = unix.MS_REMOUNT | unix.MS_BIND | unix.MS_RDONLY | unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC
	var errs []error
	for _, m := range mounts {
		if err := unix.Mount("", m, "", flags, ""); err != nil {
			errs = append(errs, fmt.Errorf("remounting %s read-only: %w", m, err))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	// Check what the sandbox will see.
	if err := unix.Access(file, unix.W_OK); !errors.Is(err, unix.EROFS) {
		return fmt.Errorf("%s still writable after the remount (access: %v)", file, err)
	}
	return nil
}

// ownCgroup returns the cgroup v2 path ("0::<path>") of a
// /proc/<pid>/cgroup file.
func ownCgroup(procFile string) (string, error) {
	b, err := os.ReadFile(procFile)
	if err != nil {
		return "", err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if p, ok := strings.CutPrefix(line, "0::"); ok && strings.HasPrefix(p, "/") && !strings.Contains(p, "..") {
			return filepath.Clean(p), nil
		}
	}
	return "", fmt.Errorf("no cgroup v2 entry in %s: %q", procFile, b)
}

// mountsUnder lists the mount points at or under root, from
// /proc/self/mountinfo.
func mountsUnder(root string) ([]string, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 64<<10)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 5 {
			continue
		}
		mp := fields[4]
		if mp == root || strings.HasPrefix(mp, root+"/") {
			out = append(out, mp)
		}
	}
	return out, sc.Err()
}
