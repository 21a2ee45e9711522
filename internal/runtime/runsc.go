package runtime

import (
	"bytes"
	"context"
	"debug/elf"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/berth-sh/berth/internal/cgroups"
	"github.com/berth-sh/berth/internal/errdefs"
)

// Runsc is the gVisor runtime class: the sandbox's system calls are served
// by gVisor's user-space kernel (the Sentry), so code in the sandbox never
// talks to the host kernel directly. It drives runsc through its
// runc-compatible command line, with its state under its own root.
//
// runsc must be a statically linked build (scripts/install-runsc.sh builds
// one): runsc re-executes itself through /proc/self/exe after it has
// pivoted into an empty root, where a dynamically linked build finds no ELF
// interpreter and every sandbox fails with "error executing umounter:
// fork/exec /proc/self/exe: no such file or directory". NewRunsc refuses
// such a binary. See docs/gvisor.md.
type Runsc struct {
	binary   string
	root     string
	platform string
	hostUDS  string
	overlay  string
	debugLog string
	extra    []string
}

// RunscOption configures a Runsc.
type RunscOption func(*Runsc)

// RunscPlatform selects gVisor's platform: "systrap" (the default; needs no
// hardware virtualisation), "ptrace", or "kvm" (needs /dev/kvm).
func RunscPlatform(p string) RunscOption { return func(r *Runsc) { r.platform = p } }

// RunscHostUDS sets runsc's --host-uds: which host Unix sockets the sandbox
// may reach. The default, "create", lets the sandbox create sockets on its
// bind mounts, which berth's agent needs for /.berth/run/agent.sock to be
// reachable from the host; it gives no access to existing host sockets.
func RunscHostUDS(v string) RunscOption { return func(r *Runsc) { r.hostUDS = v } }

// RunscOverlay sets runsc's --overlay2. The default, "none", makes writes to
// the sandbox's root go to berth's own overlay upper directory on the host
// (as with runc), so that the files survive the sandbox process and
// berth's diff/commit see them. runsc's own default ("root:self") would keep
// them in a file private to the sandbox.
func RunscOverlay(v string) RunscOption { return func(r *Runsc) { r.overlay = v } }

// RunscDebugLog makes runsc write debug logs into dir (one file per runsc
// command and sandbox process).
func RunscDebugLog(dir string) RunscOption { return func(r *Runsc) { r.debugLog = dir } }

// RunscFlags appends global runsc flags, e.g. "--strace".
func RunscFlags(flags ...string) RunscOption {
	return func(r *Runsc) { r.extra = append(r.extra, flags...) }
}

// NewRunsc returns the gVisor runtime class. binary is the runsc
// executable (empty: "runsc" from PATH); root is runsc's state directory,
// private to this daemon.
func NewRunsc(binary, root string, opts ...RunscOption) (*Runsc, error) {
	if binary == "" {
		binary = "runsc"
	}
	path, err := exec.LookPath(binary)
	if err != nil {
		return nil, fmt.Errorf("runsc not found (%s): install it with scripts/install-runsc.sh: %w", binary, err)
	}
	if path, err = filepath.Abs(path); err != nil {
		return nil, err
	}
	if interp, err := runscELFInterp(path); err != nil {
		return nil, fmt.Errorf("runsc %s: %w", path, err)
	} else if interp != "" {
		return nil, fmt.Errorf("runsc %s is dynamically linked (interpreter %s): it cannot re-execute itself "+
			"inside its empty sandbox root and fails with \"error executing umounter: fork/exec /proc/self/exe: "+
			"no such file or directory\"; rebuild it with CGO_ENABLED=0 (scripts/install-runsc.sh)", path, interp)
	}
	if err := os.MkdirAll(root, 0o700); err != nil {
		return nil, err
	}
	r := &Runsc{binary: path, root: root, platform: "systrap", hostUDS: "create", overlay: "none"}
	for _, o := range opts {
		o(r)
	}
	return r, nil
}

// Name implements Runtime.
func (*Runsc) Name() string { return "runsc" }

// NoInheritedListeners tells the manager that runsc cannot hand a host
// socket to the sandbox's init: a listening socket passed as an extra fd
// would be a host fd the Sentry does not serve. berth's agent creates
// /.berth/run/agent.sock itself instead; with --host-uds=create the socket
// is created on the host through the bind mount, where the daemon connects.
func (*Runsc) NoInheritedListeners() {}

// NetworkViaAgent tells the manager that the sandbox's ports cannot be
// reached from the host's side of its network namespace: the sandbox's
// loopback (and, in mode egress, its eth0 address) lives in the Sentry's
// own network stack. The port proxy reaches such sandboxes through the
// agent's dial operation instead, which also reaches servers bound to
// loopback only.
func (*Runsc) NetworkViaAgent() {}

// NetnsBeforeStart tells the manager that a sandbox with a network
// (mode egress) must be given a network namespace already wired to the
// daemon's bridge (Spec.NetnsPath): with --network=sandbox, `runsc
// create` starts the Sentry in that namespace and hands its interfaces,
// addresses and routes to gVisor's netstack as it finds them then; an
// interface added later is never seen. See docs/gvisor.md, "Egress".
func (*Runsc) NetnsBeforeStart() {}

// Root returns runsc's state directory.
func (r *Runsc) Root() string { return r.root }

// Binary returns the path of the runsc executable in use.
func (r *Runsc) Binary() string { return r.binary }

// Platform returns the gVisor platform in use.
func (r *Runsc) Platform() string { return r.platform }

// globalArgs are the flags every runsc invocation gets. --network: see
// runscNetwork; create, start (which configures the network) and restore
// get the sandbox's, other commands "none", which they do not use. --in-sandbox-cgroup=v2: the Sentry's cgroup v2 pids
// controller checks every task creation hierarchically; its v1 one
// charges a random one of the task's cgroups (kernel.Task.chargeLocked
// iterates a map), so a fork at the limit passes six times in seven
// (runsc_limits.go).
func (r *Runsc) globalArgs(network string) []string {
	a := []string{"--root", r.root, "--platform", r.platform, "--network", network,
		"--host-uds", r.hostUDS, "--overlay2", r.overlay, "--in-sandbox-cgroup", "v2"}
	if r.debugLog != "" {
		a = append(a, "--debug", "--debug-log", strings.TrimSuffix(r.debugLog, "/")+"/")
	}
	return append(a, r.extra...)
}

// runscNetwork is the --network a sandbox of spec is created or restored
// with. A sandbox without a network namespace path (mode none) gets
// "none": the Sentry has a loopback only and runsc starts it in an empty
// namespace of its own. A sandbox given a wired namespace (mode egress,
// Spec.NetnsPath) gets "sandbox": runsc starts the Sentry in that
// namespace, opens a packet socket on each of its interfaces, removes
// their addresses from the host kernel's view and serves them from the
// Sentry's netstack; every frame still leaves through the veth whose host
// end the daemon filters (never "host", which would hand the sandbox the
// host's own sockets and bypass that filter).
func runscNetwork(spec *specs.Spec) string {
	if spec != nil && spec.Linux != nil {
		for _, ns := range spec.Linux.Namespaces {
			if ns.Type == specs.NetworkNamespace && ns.Path != "" {
				return "sandbox"
			}
		}
	}
	return "none"
}

// commandNet builds a runsc command with the --network it names.
func (r *Runsc) commandNet(ctx context.Context, network string, global []string, args ...string) *exec.Cmd {
	a := append(r.globalArgs(network), global...)
	cmd := exec.CommandContext(ctx, r.binary, append(a, args...)...)
	cmd.Env = append(os.Environ(), "GOTRACEBACK=single")
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	// Do not leave a runsc command behind a cancelled context.
	cmd.WaitDelay = 5 * time.Second
	return cmd
}

// run runs a runsc command and returns its stdout; errors carry stderr.
func (r *Runsc) run(ctx context.Context, args ...string) ([]byte, error) {
	return r.runNet(ctx, "none", args...)
}

// runNet is run with runsc's --network set to network (runscNetwork).
func (r *Runsc) runNet(ctx context.Context, network string, args ...string) ([]byte, error) {
	cmd := r.commandNet(ctx, network, nil, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.Bytes(), &runscError{args: args, err: err, stderr: strings.TrimSpace(stderr.String())}
	}
	return stdout.Bytes(), nil
}

// runscError is a failed runsc command with what it printed.
type runscError struct {
	args   []string
	err    error
	stderr string
}

func (e *runscError) Error() string {
	msg := e.stderr
	if len(msg) > 2048 {
		msg = "..." + msg[len(msg)-2048:]
	}
	return fmt.Sprintf("runsc %s: %v: %s", strings.Join(e.args, " "), e.err, msg)
}

func (e *runscError) Unwrap() error { return e.err }

// runscNotExist reports whether err says the container does not exist.
func runscNotExist(err error) bool {
	if err == nil {
		return false
	}
	s := err.Error()
	return strings.Contains(s, "does not exist") || strings.Contains(s, "no such file or directory") ||
		strings.Contains(s, "not found")
}

// runscNotRunning reports whether err says the container has no running
// processes to act on.
func runscNotRunning(err error) bool {
	if err == nil {
		return false
	}
	s := err.Error()
	return strings.Contains(s, "not running") || strings.Contains(s, "is stopped") ||
		strings.Contains(s, "invalid state") || strings.Contains(s, "process already finished") ||
		strings.Contains(s, "no such process")
}

// RunscSpec returns the OCI spec for s as runsc runs it: BuildSpec's
// document with the fields gVisor handles differently adjusted.
//
//   - linux.uidMappings/gidMappings and the user namespace: kept. runsc
//     runs the container in a user namespace of the Sentry with these
//     mappings; the Sentry and gofer themselves run as host root confined
//     by their own namespaces, seccomp filters and a pivot_root into an
//     empty directory, and files the sandbox creates are owned on the host
//     by the mapped ids (see docs/gvisor.md).
//   - linux.seccomp: dropped. The syscall filter a gVisor sandbox lives
//     under is the Sentry's own (the application's system calls never reach
//     the host kernel); runsc ignores the OCI section unless --oci-seccomp
//     is given, and Docker's profile inside the Sentry adds little.
//   - maskedPaths/readonlyPaths: ignored by runsc; its /proc and /sys are
//     synthetic and expose no host knobs.
//   - linux.resources: applied by runsc to the sandbox's cgroup (memory,
//     CPU, pids) as with runc; the devices rules are irrelevant (the
//     sandbox opens no host devices).
//   - linux.resources.pids: the sandbox's own limit is set on its cgroup
//     inside the Sentry after start (runsc_limits.go; recorded in an
//     annotation for Restore), for which a read-only cgroup mount at
//     /sys/fs/cgroup is added. The host cgroup's limit is raised to
//     RunscHostPids(pids): it holds gVisor's own threads and stubs, and
//     hitting it kills the whole sandbox.
//   - linux.resources.memory: kept; the limit covers the Sentry's own
//     memory too (tens of MiB), so the application gets a little less.
//   - process.oomScoreAdj: runsc applies it to the Sentry and gofer; Start
//     raises the stub processes it misses (runsc_limits.go).
//   - rlimits: applied.
//   - /tmp: bound to the root's own /tmp. With no /tmp mount in the spec
//     runsc mounts an internal tmpfs there when the image's /tmp is empty
//     (a gVisor optimization); its files would be the Sentry's memory, and
//     escape the disk cap of the writable root layer. The bind keeps /tmp
//     on that layer, as with runc.
func RunscSpec(s *Spec) (*specs.Spec, error) {
	spec, err := BuildSpec(s)
	if err != nil {
		return nil, err
	}
	if !hasMount(spec, "/tmp") {
		spec.Mounts = append(spec.Mounts, specs.Mount{Destination: "/tmp", Type: "bind",
			Source: filepath.Join(s.Rootfs, "tmp"), Options: []string{"rbind", "nosuid", "nodev"}})
	}
	spec.Linux.Seccomp = nil
	spec.Linux.Namespaces[0].Path = "" // the Sentry makes its own user namespace
	if spec.Annotations == nil {
		spec.Annotations = map[string]string{}
	}
	if p := spec.Linux.Resources.Pids; p != nil && p.Limit != nil && *p.Limit > 0 {
		lim := RunscHostPids(*p.Limit)
		spec.Linux.Resources.Pids = &specs.LinuxPids{Limit: &lim}
		if s.Helper != "" {
			spec.Annotations[runscGuestPidsAnnotation] = strconv.FormatInt(*p.Limit, 10)
			spec.Annotations[runscHelperAnnotation] = s.Helper
			spec.Mounts = append(spec.Mounts, runscCgroupMount)
			// In a cgroup namespace rooted at its cgroup the helper
			// could not write that cgroup's pids.max (nsdelegate).
			spec.Linux.Namespaces = slices.DeleteFunc(spec.Linux.Namespaces, func(ns specs.LinuxNamespace) bool {
				return ns.Type == specs.CgroupNamespace
			})
		}
	}
	return spec, nil
}

func hasMount(spec *specs.Spec, dst string) bool {
	for _, m := range spec.Mounts {
		if filepath.Clean(m.Destination) == dst {
			return true
		}
	}
	return false
}

// rootTmp makes the root's /tmp if the image lacks one: sticky and
// world-writable, owned by sandbox root.
func rootTmp(s *Spec) error {
	dir := filepath.Join(s.Rootfs, "tmp")
	if _, err := os.Lstat(dir); err == nil {
		return nil
	}
	if err := os.Mkdir(dir, 0o755); err != nil && !os.IsExist(err) {
		return err
	}
	if err := os.Chown(dir, int(s.IDMap.HostUID), int(s.IDMap.HostGID)); err != nil {
		return err
	}
	return os.Chmod(dir, 0o777|os.ModeSticky)
}

// writeRunscBundle writes config.json for s into its bundle.
func writeRunscBundle(s *Spec) (*specs.Spec, error) {
	if err := rootTmp(s); err != nil {
		return nil, err
	}
	spec, err := RunscSpec(s)
	if err != nil {
		return nil, err
	}
	data, err := json.Marshal(spec)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(s.Bundle, 0o700); err != nil {
		return nil, err
	}
	return spec, os.WriteFile(filepath.Join(s.Bundle, "config.json"), data, 0o600)
}

// Start implements Runtime. It writes config.json into the bundle, then
// runs `runsc create` and `runsc start`; the container's output goes to
// s.Log. The pid returned is the sandbox (Sentry) process on the host.
// A failed Start leaves no runsc state and no cgroup behind (runsc itself
// leaves the container's cgroup when create fails).
func (r *Runsc) Start(ctx context.Context, s *Spec) (int, error) {
	if s.InitSeccompFD > 0 {
		return 0, errors.New("runsc: init cannot be handed a seccomp program; the sentry applies the profile")
	}
	if other := r.prefixClash(s.ID); other != "" {
		return 0, fmt.Errorf("runsc: container id %q and existing %q are prefixes of one another, which runsc cannot tell apart: %w",
			s.ID, other, errdefs.ErrConflict)
	}
	// A fresh start would overwrite the bundle a checkpoint needs and lose
	// the processes saved in it.
	if _, err := os.Stat(filepath.Join(s.Bundle, HibernatedMarker)); err == nil {
		return 0, errdefs.Conflict("sandbox %s is hibernated: use wake to restore it", s.ID)
	}
	spec, err := writeRunscBundle(s)
	if err != nil {
		return 0, err
	}
	pidFile := filepath.Join(s.Bundle, "init.pid")
	_ = os.Remove(pidFile)
	err = r.detached(ctx, s.Bundle, s.Log, runscNetwork(spec), "create", "--bundle", s.Bundle, "--pid-file", pidFile, s.ID)
	if err == nil {
		// runsc configures the sandbox's network in start (StartRoot),
		// from its own --network: it must be the create's.
		_, err = r.runNet(ctx, runscNetwork(spec), "start", s.ID)
	}
	if err == nil {
		err = r.afterStart(ctx, s.ID, spec, false)
	}
	if err != nil {
		r.cleanupFailed(ctx, s.ID, s.CgroupsPath)
		return 0, err
	}
	return runscReadPid(pidFile)
}

// cleanupFailed removes what a failed create, start or restore left.
func (r *Runsc) cleanupFailed(ctx context.Context, id, cgroupsPath string) {
	ctx = context.WithoutCancel(ctx)
	_ = r.Delete(ctx, id)
	if cgroupsPath != "" {
		_ = cgroups.Destroy(cgroupsPath)
	}
}

// runscLogDir is where, inside a bundle, runsc create and restore (and the
// gofer and sandbox processes they start) write their logs: runsc reports
// most sandbox set-up failures only there, as FATAL lines.
func runscLogDir(bundle string) string { return filepath.Join(bundle, "runsc-log") + "/" }

// detached runs a runsc command that leaves a sandbox behind (create,
// restore --detach) with the container's stdio on log (nil: /dev/null)
// and runsc's --network set to network (runscNetwork).
func (r *Runsc) detached(ctx context.Context, bundle string, log *os.File, network string, args ...string) error {
	logf, err := logFile(log)
	if err != nil {
		return err
	}
	if logf != log {
		defer logf.Close()
	}
	devnull, err := os.Open(os.DevNull)
	if err != nil {
		return err
	}
	defer devnull.Close()
	logDir := runscLogDir(bundle)
	if err := os.MkdirAll(logDir, 0o700); err != nil {
		return err
	}
	var global []string
	if r.debugLog == "" {
		global = []string{"--debug-log", logDir}
	}
	cmd := r.commandNet(ctx, network, global, args...)
	// The sandbox inherits these as the container's stdio. runsc's own
	// messages go to stderr too, which the log's reader keeps.
	cmd.Stdin, cmd.Stdout, cmd.Stderr = devnull, logf, logf
	// Pdeathsig would kill the sandbox with the daemon: it outlives us.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	start := time.Now()
	if err := cmd.Run(); err != nil {
		msg := ""
		if f := runscFatals(logDir, start); f != "" {
			msg = " (" + f + ")"
		}
		return fmt.Errorf("runsc %s %s: %w%s", args[0], args[len(args)-1], err, msg)
	}
	return nil
}

// runscFatals returns the distinct FATAL messages runsc processes logged
// into dir since t, which name the cause that `runsc create` itself reports
// only as "cannot read client sync file: waiting for sandbox to start: EOF".
func runscFatals(dir string, since time.Time) string {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return ""
	}
	var out []string
	seen := map[string]bool{}
	for _, e := range ents {
		info, err := e.Info()
		if err != nil || info.ModTime().Before(since.Add(-time.Second)) {
			continue
		}
		data, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(data), "\n") {
			_, msg, ok := strings.Cut(line, "FATAL ERROR: ")
			if !ok || seen[msg] || strings.Contains(msg, "client sync file") {
				continue
			}
			seen[msg] = true
			out = append(out, msg)
		}
	}
	return strings.Join(out, "; ")
}

func runscReadPid(path string) (int, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return 0, fmt.Errorf("runsc: reading pid file: %w", err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(data)))
	if err != nil || pid <= 0 {
		return 0, fmt.Errorf("runsc: bad pid file %s: %q", path, data)
	}
	return pid, nil
}

// runscState is the subset of `runsc state` / `runsc list --format=json`
// output berth uses.
type runscState struct {
	ID     string `json:"id"`
	Pid    int    `json:"pid"`
	Status string `json:"status"`
	Bundle string `json:"bundle"`
}

func (c runscState) state() State {
	return State{ID: c.ID, Status: Status(c.Status), Pid: c.Pid, Bundle: c.Bundle}
}

// containerIDs returns the ids of the containers runsc keeps state for
// under its root: files "<container>_sandbox:<sandbox>.state"
// (runsc/container/state_file.go).
func (r *Runsc) containerIDs() []string {
	ents, err := os.ReadDir(r.root)
	if err != nil {
		return nil
	}
	var ids []string
	for _, e := range ents {
		n := e.Name()
		if !strings.HasSuffix(n, ".state") {
			continue
		}
		if id, _, ok := strings.Cut(n, "_sandbox:"); ok {
			ids = append(ids, id)
		}
	}
	return ids
}

// known reports whether runsc keeps state for exactly id. Every runsc
// command is guarded by it: runsc resolves an id that names no container
// as an abbreviation of a longer one, so `runsc delete --force abc` with
// only "abcdef" present would delete "abcdef".
func (r *Runsc) known(id string) bool {
	return slices.Contains(r.containerIDs(), id)
}

// prefixClash returns a container id that id is a proper prefix of, or
// that is a proper prefix of id. runsc cannot address either of two such
// containers unambiguously ("id is ambiguous"); berth's fixed-length
// sandbox ids never clash.
func (r *Runsc) prefixClash(id string) string {
	for _, other := range r.containerIDs() {
		if other != id && (strings.HasPrefix(other, id) || strings.HasPrefix(id, other)) {
			return other
		}
	}
	return ""
}

// State implements Runtime.
func (r *Runsc) State(ctx context.Context, id string) (State, error) {
	if !r.known(id) {
		return State{}, fmt.Errorf("runsc container %s: %w", id, errdefs.ErrNotFound)
	}
	out, err := r.run(ctx, "state", id)
	if err != nil {
		if runscNotExist(err) {
			return State{}, fmt.Errorf("runsc container %s: %w", id, errdefs.ErrNotFound)
		}
		return State{}, err
	}
	var c runscState
	if err := json.Unmarshal(out, &c); err != nil {
		return State{}, fmt.Errorf("runsc state %s: %w: %q", id, err, out)
	}
	return c.state(), nil
}

// List implements Runtime.
func (r *Runsc) List(ctx context.Context) ([]State, error) {
	out, err := r.run(ctx, "list", "--format=json")
	if err != nil {
		return nil, err
	}
	var cs []runscState
	if t := bytes.TrimSpace(out); len(t) > 0 && !bytes.Equal(t, []byte("null")) {
		if err := json.Unmarshal(t, &cs); err != nil {
			return nil, fmt.Errorf("runsc list: %w: %q", err, out)
		}
	}
	states := make([]State, 0, len(cs))
	for _, c := range cs {
		states = append(states, c.state())
	}
	return states, nil
}

// Kill implements Runtime; it signals every process of the container.
func (r *Runsc) Kill(ctx context.Context, id string, sig syscall.Signal) error {
	if !r.known(id) {
		return nil
	}
	_, err := r.run(ctx, "kill", "--all", id, strconv.Itoa(int(sig)))
	if err != nil && (runscNotExist(err) || runscNotRunning(err)) {
		return nil
	}
	return err
}

// SignalInit sends sig to the container's init process only (Kill signals
// every process): berth's agent takes signals around a checkpoint.
func (r *Runsc) SignalInit(ctx context.Context, id string, sig syscall.Signal) error {
	if !r.known(id) {
		return fmt.Errorf("runsc container %s: %w", id, errdefs.ErrNotFound)
	}
	_, err := r.run(ctx, "kill", id, strconv.Itoa(int(sig)))
	return err
}

// HibernatedMarker is the file the manager keeps in a hibernated sandbox's
// bundle: the bundle (config.json) and root filesystem belong to a
// checkpoint image and must stay as they are until it is restored.
const HibernatedMarker = "berth-hibernated.json"

// Delete implements Runtime: `runsc delete --force` kills the sandbox and
// removes its state and cgroup. Unknown ids are not an error.
func (r *Runsc) Delete(ctx context.Context, id string) error {
	if !r.known(id) {
		return nil
	}
	_, err := r.run(ctx, "delete", "--force", id)
	if err != nil && runscNotExist(err) {
		return nil
	}
	return err
}

// Pause implements Runtime: the Sentry stops every task of the sandbox.
func (r *Runsc) Pause(ctx context.Context, id string) error {
	if !r.known(id) {
		return fmt.Errorf("runsc container %s: %w", id, errdefs.ErrNotFound)
	}
	_, err := r.run(ctx, "pause", id)
	return err
}

// Resume implements Runtime.
func (r *Runsc) Resume(ctx context.Context, id string) error {
	if !r.known(id) {
		return fmt.Errorf("runsc container %s: %w", id, errdefs.ErrNotFound)
	}
	_, err := r.run(ctx, "resume", id)
	return err
}

// Close releases what runsc keeps under its root between sandboxes: the
// "null-netns" bind mount of the empty network namespace runsc's gofers
// share (runsc mounts it on the first create and never removes it; the
// root cannot be removed while it is mounted). Call it when the daemon
// stops; a later Start mounts it again.
func (r *Runsc) Close() error {
	path := filepath.Join(r.root, "null-netns")
	// Concurrent creates may have stacked several mounts there.
	for i := 0; i < 64; i++ {
		if err := syscall.Unmount(path, syscall.MNT_DETACH); err != nil {
			break
		}
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("runsc: removing %s: %w", path, err)
	}
	return nil
}

// Checkpoint saves the container's processes and memory into dir (runsc
// checkpoint --image-path) and stops the sandbox: the container is gone
// from runsc afterwards, its compute and memory released. The root
// filesystem is not in the image; it must be the same when restoring.
func (r *Runsc) Checkpoint(ctx context.Context, id, dir string) error {
	if !r.known(id) {
		return fmt.Errorf("runsc container %s: %w", id, errdefs.ErrNotFound)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	if _, err := r.run(ctx, "checkpoint", "--image-path", dir, id); err != nil {
		return err
	}
	// The sandbox has exited; remove what is left of it so that the id can
	// be restored.
	return r.Delete(context.WithoutCancel(ctx), id)
}

// Restore starts the container id again from the image Checkpoint wrote
// into dir, with the bundle (config.json and root filesystem) it had. The
// container's output goes to log.
func (r *Runsc) Restore(ctx context.Context, id, bundle, dir string, log *os.File) error {
	if _, err := os.Stat(filepath.Join(dir, "checkpoint.img")); err != nil {
		if _, err2 := os.Stat(dir); err2 != nil {
			return fmt.Errorf("runsc restore %s: no checkpoint in %s: %w", id, dir, errdefs.ErrNotFound)
		}
	}
	if r.known(id) {
		return fmt.Errorf("runsc restore %s: container exists: %w", id, errdefs.ErrConflict)
	}
	if other := r.prefixClash(id); other != "" {
		return fmt.Errorf("runsc restore: container id %q and existing %q are prefixes of one another: %w",
			id, other, errdefs.ErrConflict)
	}
	spec, err := runscBundleSpec(bundle)
	if err != nil {
		return err
	}
	var cgroupsPath string
	if spec.Linux != nil {
		cgroupsPath = spec.Linux.CgroupsPath
	}
	pidFile := filepath.Join(bundle, "init.pid")
	_ = os.Remove(pidFile)
	err = r.detached(ctx, bundle, log, runscNetwork(spec), "restore", "--detach", "--bundle", bundle, "--image-path", dir,
		"--pid-file", pidFile, id)
	if err == nil {
		// The task limit is part of the checkpoint (checked); the host
		// processes are new.
		err = r.afterStart(ctx, id, spec, true)
	}
	if err != nil {
		r.cleanupFailed(ctx, id, cgroupsPath)
		return err
	}
	return nil
}

// runscBundleSpec reads a bundle's config.json.
func runscBundleSpec(bundle string) (*specs.Spec, error) {
	data, err := os.ReadFile(filepath.Join(bundle, "config.json"))
	if err != nil {
		return nil, fmt.Errorf("runsc: bundle %s: %w", bundle, err)
	}
	var spec specs.Spec
	if err := json.Unmarshal(data, &spec); err != nil {
		return nil, fmt.Errorf("runsc: bundle %s: %w", bundle, err)
	}
	return &spec, nil
}

// Isolation implements Runtime.
func (*Runsc) Isolation() Isolation {
	return Isolation{
		Runtime:       "runsc",
		SharedKernel:  false,
		UserNamespace: true,
		Seccomp:       "gvisor-sentry",
		Capabilities:  capNames(),
		NoNewPrivs:    true,
		ReadonlyImage: true,
	}
}

// Probe checks that runsc can start a sandbox on this host: it runs
// `busybox echo` in a one-file bundle holding the static binary busybox
// (/bin/busybox from busybox-static) and returns the error runsc reported,
// or nil. scratch is a directory Probe may use.
func (r *Runsc) Probe(ctx context.Context, busybox, scratch string) error {
	return r.ProbeWith(ctx, busybox, []string{"echo", "runsc-probe-ok"}, "runsc-probe-ok", scratch)
}

// ProbeWith is Probe with another statically linked program: it runs
// `bin args...` as the only file of a bundle and checks that its output
// contains want (e.g. the berth binary itself with --version).
func (r *Runsc) ProbeWith(ctx context.Context, bin string, args []string, want, scratch string) error {
	bundle := filepath.Join(scratch, "runsc-probe")
	rootfs := filepath.Join(bundle, "rootfs")
	if err := os.MkdirAll(filepath.Join(rootfs, "bin"), 0o755); err != nil {
		return err
	}
	defer os.RemoveAll(bundle)
	if interp, err := runscELFInterp(bin); err != nil {
		return fmt.Errorf("runsc probe: %s: %w", bin, err)
	} else if interp != "" {
		return fmt.Errorf("runsc probe: %s is dynamically linked", bin)
	}
	data, err := os.ReadFile(bin)
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(rootfs, "bin", "busybox"), data, 0o755); err != nil {
		return err
	}
	spec := &specs.Spec{
		Version:  specs.Version,
		Root:     &specs.Root{Path: rootfs},
		Hostname: "probe",
		Process: &specs.Process{
			Args: append([]string{"/bin/busybox"}, args...),
			Env:  []string{"PATH=/bin"},
			Cwd:  "/",
		},
		Linux: &specs.Linux{Namespaces: []specs.LinuxNamespace{
			{Type: specs.PIDNamespace}, {Type: specs.MountNamespace}, {Type: specs.IPCNamespace},
			{Type: specs.UTSNamespace}, {Type: specs.NetworkNamespace},
		}},
	}
	js, err := json.Marshal(spec)
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(bundle, "config.json"), js, 0o600); err != nil {
		return err
	}
	id := fmt.Sprintf("runsc-probe-%d", os.Getpid())
	defer func() { _ = r.Delete(context.WithoutCancel(ctx), id) }()
	out, err := r.run(ctx, "run", "--bundle", bundle, id)
	if err != nil {
		var re *runscError
		if errors.As(err, &re) && re.stderr == "" {
			re.stderr = strings.TrimSpace(string(out))
		}
		return err
	}
	if !strings.Contains(string(out), want) {
		return fmt.Errorf("runsc probe: container ran but printed %q", out)
	}
	return nil
}

// runscELFInterp returns the PT_INTERP of an ELF executable, "" for a
// statically linked one.
func runscELFInterp(path string) (string, error) {
	f, err := elf.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			b := make([]byte, p.Filesz)
			if _, err := p.ReadAt(b, 0); err != nil {
				return "", err
			}
			return strings.TrimRight(string(b), "\x00"), nil
		}
	}
	return "", nil
}
