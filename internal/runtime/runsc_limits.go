package runtime

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/berth-sh/berth/internal/cgroups"
	"github.com/berth-sh/berth/internal/errdefs"
)

// Limits of a runsc sandbox that the host kernel cannot enforce by itself.
//
// Tasks. gVisor runs the sandbox's tasks (processes and threads) as
// goroutines of the Sentry, so the host pids cgroup never sees a thread
// the sandbox starts (measured: 3,000 Python threads under a host limit of
// 192 added 6 host tasks), and a host limit low enough to stop a process
// flood kills the Sentry itself instead of failing one fork. The limit
// that matters is the one of the Sentry's own pids controller
// (pkg/sentry/fsimpl/cgroup2fs/pids.go, with --in-sandbox-cgroup=v2),
// which checks every task creation inside the sandbox, hierarchically, and
// fails it with EAGAIN past pids.max. (The default v1 controller is
// unusable as a bound: kernel.Task.chargeLocked charges whichever of the
// task's seven v1 cgroups a map iteration yields first, so a fork at the
// limit is refused only one time in seven; measured: floods overshot 64
// by 4 to 6 tasks before the shell gave up, and a loop that retries
// would not be stopped.) runsc does not apply spec.linux.resources.pids
// to the Sentry's cgroups; it creates "/<container id>" and puts the
// container's tasks in it only when the spec mounts cgroupfs
// (runsc/boot/vfs.go, setupContainerCgroup2). So RunscSpec adds a cgroup
// mount at /sys/fs/cgroup (and drops the cgroup namespace, see below),
// and Start runs berth's helper in the sandbox with CAP_SYS_ADMIN
// (setGuestPids): it writes pids.max of that cgroup and remounts
// /sys/fs/cgroup read-only, before anything but the agent runs there.
// runsc's own write-control cannot: on v2 files it passes a nil file
// description to the write and crashes the Sentry; on v1 limit files it
// answers "control file not writable". Without a cgroup namespace the
// sandbox sees its cgroup path (/<sandbox id>) in /proc/self/cgroup; in
// one rooted there the helper's write would be refused (nsdelegate).
//
// oom_score_adj. runsc gives the sandbox (Sentry) and gofer processes the
// spec's process.oomScoreAdj, but the systrap stub processes that run the
// sandbox's address spaces are forked from a stub the Sentry makes before
// runsc adjusts it, and keep 0. Start raises every process of the
// sandbox's host cgroup, and the gofer, to the spec's value; stubs made
// later are forked from an adjusted one and inherit it.

// runscGuestPidsAnnotation records the sandbox's own task limit (the
// bundle's linux.resources.pids is the host limit), so that Restore can
// set it again.
const runscGuestPidsAnnotation = "sh.berth.runsc.guest-pids"

// runscHelperAnnotation records Spec.Helper for Restore.
const runscHelperAnnotation = "sh.berth.runsc.helper"

// runscCgroupMount makes runsc give the container its own cgroup inside
// the Sentry, whose pids.max bounds its tasks. Read-write until the
// helper has written the limit and remounted it read-only; after that
// root in the sandbox (no CAP_SYS_ADMIN to remount or mount another view)
// cannot raise the limit.
var runscCgroupMount = specs.Mount{
	Destination: "/sys/fs/cgroup", Type: "cgroup", Source: "cgroup",
	Options: []string{"nosuid", "noexec", "nodev"},
}

// RunscHostPids is the host pids-cgroup limit of a runsc sandbox whose
// tasks the Sentry limits to pids. The host cgroup holds gVisor's own
// threads (the Sentry's and the gofer's: about 25 for an idle sandbox on
// systrap) and, on systrap, one stub process for every address space in
// the sandbox; guest threads cost no host task. Measured here: 26 host
// tasks idle, 32 after 3,000 guest threads, 47 with 10 extra processes,
// 107 with 40, and at most the figure in docs/gvisor.md with the guest
// at its limit. 2·pids + 64 leaves room for a guest at its own limit, so
// the host limit is a backstop for gVisor itself: hitting it would kill
// the whole sandbox (the Sentry cannot create a thread), where the guest
// limit fails one fork with EAGAIN.
func RunscHostPids(pids int64) int64 { return 2*pids + 64 }

// setGuestPids sets the task limit of container id inside its Sentry by
// running berth's helper (agentd.LimitTasksVerb) in the sandbox with
// CAP_SYS_ADMIN: it writes pids.max of the container's cgroup and
// remounts /sys/fs/cgroup read-only.
func (r *Runsc) setGuestPids(ctx context.Context, id, helper string, pids int64) error {
	if pids <= 0 || helper == "" {
		return nil
	}
	out, err := r.run(ctx, "exec", "--cap", "CAP_SYS_ADMIN", "--user", "0:0", id,
		helper, runscLimitTasksVerb, strconv.FormatInt(pids, 10))
	if err != nil {
		if msg := strings.TrimSpace(string(out)); msg != "" {
			err = fmt.Errorf("%w: %s", err, msg)
		}
		return fmt.Errorf("runsc: setting the sandbox's task limit to %d: %w", pids, err)
	}
	return nil
}

// SetHostname changes running container id's host name by running
// berth's helper (agentd.SetHostnameVerb) at path helper in the sandbox
// with CAP_SYS_ADMIN: gVisor keeps the sandbox's UTS namespace inside the
// Sentry, out of the host's nsenter's reach. The caller runs it only on
// sandboxes in which nothing but the agent has run (a warm-pool member
// being claimed), as the limit above is set before anything else runs.
func (r *Runsc) SetHostname(ctx context.Context, id, helper, name string) error {
	if !r.known(id) {
		return fmt.Errorf("runsc container %s: %w", id, errdefs.ErrNotFound)
	}
	out, err := r.run(ctx, "exec", "--cap", "CAP_SYS_ADMIN", "--user", "0:0", id, helper, runscSetHostnameVerb, name)
	if err != nil {
		if msg := strings.TrimSpace(string(out)); msg != "" {
			err = fmt.Errorf("%w: %s", err, msg)
		}
		return fmt.Errorf("runsc: setting the sandbox's host name: %w", err)
	}
	return nil
}

// runscSetHostnameVerb is agentd.SetHostnameVerb.
const runscSetHostnameVerb = "agent-set-hostname"

// runscLimitTasksVerb is agentd.LimitTasksVerb (the runtime does not
// import the agent).
const runscLimitTasksVerb = "agent-limit-tasks"

// GuestPids returns the task limit and count of container id as its
// Sentry's pids controller sees them.
func (r *Runsc) GuestPids(ctx context.Context, id string) (limit, current int64, err error) {
	read := func(file string) (int64, error) {
		out, err := r.run(ctx, "read-control", id, "pids", "/"+id, file)
		if err != nil {
			return 0, err
		}
		s := strings.TrimSpace(string(out))
		if s == "max" {
			return -1, nil
		}
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("runsc read-control %s: %q", file, s)
		}
		return n, nil
	}
	if limit, err = read("pids.max"); err != nil {
		return 0, 0, err
	}
	current, err = read("pids.current")
	return limit, current, err
}

// HostPids returns the host processes of container id: every process of
// its host cgroup and its gofer (read from runsc's state file, in case a
// runsc version leaves it outside the cgroup).
func (r *Runsc) HostPids(id, cgroupsPath string) []int {
	pids := cgroups.Procs(cgroupsPath)
	if g := r.goferPid(id); g > 0 && !slices.Contains(pids, g) {
		pids = append(pids, g)
	}
	return pids
}

// goferPid reads the gofer's pid from runsc's state file for id
// ("<id>_sandbox:<sandbox id>.state", runsc/container/state_file.go).
func (r *Runsc) goferPid(id string) int {
	matches, _ := filepath.Glob(filepath.Join(r.root, id+"_sandbox:*.state"))
	for _, m := range matches {
		data, err := os.ReadFile(m)
		if err != nil || len(data) > 1<<20 {
			continue
		}
		var st struct {
			GoferPid int `json:"goferPid"`
		}
		if json.Unmarshal(data, &st) == nil && st.GoferPid > 0 {
			return st.GoferPid
		}
	}
	return 0
}

// raiseOOMScoreAdj gives every host process of container id at least
// score. A few passes catch processes forked from one not yet raised while
// the first pass ran.
func (r *Runsc) raiseOOMScoreAdj(id, cgroupsPath string, score int) error {
	var errs []error
	for pass := 0; pass < 4; pass++ {
		changed := false
		errs = errs[:0]
		for _, pid := range r.HostPids(id, cgroupsPath) {
			did, err := raiseOOMScore(pid, score)
			if err != nil {
				errs = append(errs, err)
			}
			changed = changed || did
		}
		if !changed {
			break
		}
	}
	return errors.Join(errs...)
}

// raiseOOMScore sets /proc/pid/oom_score_adj to score if it is lower
// (raising needs no privilege; lowering would need CAP_SYS_RESOURCE). A
// process that is gone is not an error.
func raiseOOMScore(pid, score int) (bool, error) {
	path := fmt.Sprintf("/proc/%d/oom_score_adj", pid)
	b, err := os.ReadFile(path)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return false, nil
		}
		return false, err
	}
	cur, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err == nil && cur >= score {
		return false, nil
	}
	if err := os.WriteFile(path, []byte(strconv.Itoa(score)), 0); err != nil {
		if errors.Is(err, os.ErrNotExist) || errors.Is(err, syscall.ESRCH) {
			return false, nil
		}
		return false, fmt.Errorf("oom_score_adj of pid %d: %w", pid, err)
	}
	return true, nil
}

// afterStart applies what runsc leaves out once the container runs: the
// task limit inside the Sentry and the oom_score_adj of its host
// processes. A restored sandbox brings its limit and read-only cgroup
// mount back from the checkpoint (the Sentry's cgroupfs is part of it);
// it is only checked.
func (r *Runsc) afterStart(ctx context.Context, id string, spec *specs.Spec, restored bool) error {
	if n, err := strconv.ParseInt(spec.Annotations[runscGuestPidsAnnotation], 10, 64); err == nil {
		if restored {
			lim, _, err := r.GuestPids(ctx, id)
			if err != nil {
				return fmt.Errorf("runsc: reading the restored sandbox's task limit: %w", err)
			}
			if lim != n {
				return fmt.Errorf("runsc: restored sandbox's task limit is %d, want %d", lim, n)
			}
		} else if err := r.setGuestPids(ctx, id, spec.Annotations[runscHelperAnnotation], n); err != nil {
			return err
		}
	}
	if spec.Process != nil && spec.Process.OOMScoreAdj != nil && spec.Linux != nil {
		if err := r.raiseOOMScoreAdj(id, spec.Linux.CgroupsPath, *spec.Process.OOMScoreAdj); err != nil {
			return fmt.Errorf("runsc: %w", err)
		}
	}
	return nil
}
