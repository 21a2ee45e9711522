package local

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/berth-sh/berth/internal/agent/sudo"
	"github.com/berth-sh/berth/internal/cgroups"
	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/internal/failpoint"
	"github.com/berth-sh/berth/internal/node/local/agentchan"
	"github.com/berth-sh/berth/internal/node/local/egress"
	"github.com/berth-sh/berth/internal/overlay"
	"github.com/berth-sh/berth/internal/runtime"
	"github.com/berth-sh/berth/internal/sandbox"
)

// agentBinary is where the berth binary appears inside every sandbox.
const agentBinary = "/.berth/berth"

func isNotFound(err error) bool { return errors.Is(err, errdefs.ErrNotFound) }

func readRandom(b []byte) (int, error) { return rand.Read(b) }

// lowerDirs returns the overlay lower dirs of layers, top first.
func (b *Backend) lowerDirs(sb *sandbox.Sandbox) ([]string, error) {
	layers := sb.Spec.Layers
	if len(layers) == 0 {
		return nil, fmt.Errorf("sandbox %s: no template layers recorded", sb.ID)
	}
	lowers := make([]string, 0, len(layers))
	for i := len(layers) - 1; i >= 0; i-- {
		id := layers[i]
		if !b.images.HasLayer(id) {
			return nil, fmt.Errorf("template %s: layer %s is missing from the image store", sb.Spec.Template, id)
		}
		lowers = append(lowers, b.images.LayerPath(id))
	}
	return lowers, nil
}

// mountRoot mounts sb's overlay root (through its idmapped views) unless
// it is mounted already.
func (b *Backend) mountRoot(sb *sandbox.Sandbox, lowers []string, upper, work string) error {
	p := b.paths(sb.ID)
	if mounted, err := overlay.Mounted(p.rootfs); err != nil || mounted {
		return err
	}
	lowers, upper, work, err := b.idmapRoot(sb, lowers, upper, work)
	if err != nil {
		return err
	}
	return overlay.Mount(lowers, upper, work, p.rootfs)
}

// Provision creates the host side of a sandbox: dirs, volumes, overlay
// root, the container with the agent as init, and waits until the agent
// answers. Every step tolerates having been done before (a restarted
// create or start).
func (b *Backend) Provision(ctx context.Context, sb *sandbox.Sandbox) error {
	p := b.paths(sb.ID)
	uid, gid := b.cfg.IDMap.HostRoot() // stored range: the upper dir as kept on disk
	steps := b.stepTimer()
	if err := b.mountVolumes(sb); err != nil {
		return err
	}
	if len(sb.Spec.Volumes) > 0 {
		if err := failpoint.Inject("volume.attach.after-mount"); err != nil {
			return err
		}
	}
	if err := b.prepareScratch(sb); err != nil { // the disk cap (disk.go)
		return err
	}
	upper, work := b.layerDirs(sb)
	for _, d := range []string{p.dir, upper, work, p.rootfs} {
		if err := os.MkdirAll(d, 0o711); err != nil {
			return err
		}
	}
	if err := os.MkdirAll(p.ctl, 0o700); err != nil {
		return err
	}
	// Root of the sandbox belongs to sandbox root.
	if err := os.Chown(upper, uid, gid); err != nil {
		return err
	}
	if err := os.Chmod(upper, 0o755); err != nil {
		return err
	}
	lowers, err := b.lowerDirs(sb)
	if err != nil {
		return err
	}
	if err := failpoint.Inject("create.before-mount"); err != nil {
		return err
	}
	if err := b.mountRoot(sb, lowers, upper, work); err != nil {
		return err
	}
	if err := failpoint.Inject("create.after-mount"); err != nil {
		return err
	}
	// A restarted create may find a half-made container: start over.
	rt := b.rtFor(sb)
	if err := rt.Delete(ctx, sb.ID); err != nil {
		return err
	}
	mounts := []runtime.Mount{
		{Source: b.cfg.AgentPath, Destination: agentBinary, ReadOnly: true},
	}
	if sb.Spec.HostUsr {
		mounts = append(mounts, runtime.Mount{Source: "/usr", Destination: "/usr", ReadOnly: true})
	}
	if sb.Spec.Sudo {
		// The agent's binary is the sudo program too (internal/agent/sudo).
		mounts = append(mounts, runtime.Mount{Source: b.cfg.AgentPath, Destination: sudo.Dir + "/sudo", ReadOnly: true})
	}
	for i, vm := range sb.Spec.Volumes {
		src, err := b.volumeSource(sb, i)
		if err != nil {
			return err
		}
		mounts = append(mounts, runtime.Mount{Source: src, Destination: vm.Path, ReadOnly: vm.ReadOnly})
	}
	steps.mark(StepMounts)
	userns, err := b.sandboxUserns(sb, rt)
	if err != nil {
		return err
	}
	steps.mark(StepUserns)
	var netnsPath string
	if sb.Spec.Network == "egress" {
		rc, err := b.resolvConf(ctx, sb)
		if err != nil {
			return err
		}
		mounts = append(mounts, runtime.Mount{Source: rc, Destination: "/etc/resolv.conf", ReadOnly: true})
		if netnsBeforeStart(rt) {
			if netnsPath, err = b.wireNetns(ctx, sb); err != nil {
				return err
			}
		}
	}
	// The agent's channel (agentchan.go). Where the runtime can hand init
	// a descriptor, the daemon binds the agent's socket in its own ctl
	// dir, never mounted into the sandbox, and passes it as fd 3; the
	// agent listens on it. Runtimes that cannot (gVisor) get a tiny
	// tmpfs at /.berth/run for the agent to bind its socket in, which
	// the daemon pins at the first ping.
	//
	// The same runtimes hand the agent the sandbox's seccomp filter,
	// compiled once per daemon, as fd 4: the agent installs it on all its
	// threads before it reads a byte from anyone, so every process in the
	// sandbox runs under it, and runc is spared compiling the profile with
	// libseccomp on every start (about 20 ms of a ~50 ms `runc run` here).
	steps.mark(StepNetns)
	if err := b.resetAgentPin(sb.ID); err != nil {
		return err
	}
	args := []string{agentBinary, "--listen-fd", "3", "--seccomp-fd", "4"}
	var extra []*os.File
	seccompFD := 4
	if !capsOf(rt).InheritFDs {
		if err := os.Remove(p.socket); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
		ruid, rgid := b.idMapOf(sb).HostRoot()
		if err := agentchan.MountRunTmpfs(p.run, ruid, rgid); err != nil {
			return err
		}
		mounts = append(mounts, runtime.Mount{Source: p.run, Destination: "/.berth/run"})
		args = []string{agentBinary, "--socket", "/.berth/run/" + agentchan.SockName}
		seccompFD = 0
	} else {
		lnFile, err := agentchan.BindSocket(p.socket)
		if err != nil {
			return err
		}
		defer lnFile.Close()
		extra = []*os.File{lnFile}
	}
	if sb.Spec.Sudo {
		args = append(args, "--sudo-user", sudoUser(sb))
	}
	logw, err := b.openInitLog(sb.ID)
	if err != nil {
		return err
	}
	defer logw.Close()
	steps.mark(StepAgentChannel)
	pid, err := rt.Start(ctx, &runtime.Spec{
		ID:            sb.ID,
		Bundle:        p.bundle,
		Rootfs:        p.rootfs,
		Hostname:      sb.Hostname(),
		Args:          args,
		ExtraFiles:    extra,
		Env:           []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "BERTH_SANDBOX_ID=" + sb.ID, "GOMAXPROCS=1"},
		Mounts:        mounts,
		SecretsTmpfs:  sb.Spec.HasSecretFiles(),
		Resources:     sb.Spec.Resources,
		IDMap:         b.idMapOf(sb),
		UsernsPath:    userns,
		NetnsPath:     netnsPath,
		CgroupsPath:   p.cgroup,
		Log:           logw,
		InitSeccompFD: seccompFD,
		Helper:        agentBinary,
	})
	logw.Close()
	if err != nil {
		if tail := strings.TrimSpace(b.initLogTail(sb.ID, 2048, 100*time.Millisecond)); tail != "" {
			err = fmt.Errorf("%w: %s", err, tail)
		}
		return err
	}
	steps.mark(StepRuntimeStart)
	// The init is the daemon's child once the runtime exits; the
	// daemon's reaper (internal/reaper) reaps it when it ends.
	if netnsPath == "" {
		if err := b.egress.Attach(ctx, sb, pid); err != nil {
			return fmt.Errorf("network: %w", err)
		}
	}
	if err := failpoint.Inject("create.after-start"); err != nil {
		return err
	}
	steps.mark(StepNetwork)
	if err := b.WaitReady(ctx, sb); err != nil {
		return err
	}
	steps.mark(StepAgentReady)
	return nil
}

// sudoUser is who besides root may use sb's sudo: its default user.
func sudoUser(sb *sandbox.Sandbox) string {
	if sb.Spec.User == "" {
		return "root"
	}
	return sb.Spec.User
}

// WaitReady polls the agent's socket until it answers a ping.
func (b *Backend) WaitReady(ctx context.Context, sb *sandbox.Sandbox) error {
	return b.waitReady(ctx, sb.ID)
}

func (b *Backend) waitReady(ctx context.Context, id string) error {
	c := b.agentFor(id)
	deadline := time.Now().Add(b.cfg.ReadyTimeout)
	delay := 200 * time.Microsecond
	for {
		pctx, cancel := context.WithTimeout(ctx, time.Second)
		_, err := c.Ping(pctx)
		cancel()
		if err == nil {
			return nil
		}
		if cerr := ctx.Err(); cerr != nil {
			return fmt.Errorf("waiting for the agent: %w (last ping: %v)", cerr, err)
		}
		if time.Now().After(deadline) {
			log := strings.TrimSpace(b.initLogTail(id, 1024, 0))
			return fmt.Errorf("agent did not become ready within %s: %w (init log: %q)", b.cfg.ReadyTimeout, err, log)
		}
		time.Sleep(delay)
		if delay < time.Millisecond {
			delay *= 2
		}
	}
}

// InitLog returns up to n bytes of the end of sb's init log.
func (b *Backend) InitLog(sb *sandbox.Sandbox, n int, wait time.Duration) string {
	return b.initLogTail(sb.ID, n, wait)
}

// Remove removes every host resource of sandbox sb but its volumes' data,
// then verifies nothing is left. Each step is idempotent.
func (b *Backend) Remove(ctx context.Context, sb *sandbox.Sandbox) error {
	if err := b.teardown(ctx, sb); err != nil {
		return err
	}
	return b.verifyGone(sb)
}

func (b *Backend) teardown(ctx context.Context, sb *sandbox.Sandbox) error {
	id := sb.ID
	if err := b.Stop(ctx, sb); err != nil {
		return err
	}
	p := b.paths(id)
	if err := failpoint.Inject("delete.after-unmount"); err != nil {
		return err
	}
	if err := b.scratch.Delete(id); err != nil {
		return err
	}
	if err := os.RemoveAll(p.dir); err != nil {
		return err
	}
	if err := os.Remove(b.resolvConfPath(id)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}

// Stop ends sb's processes and unmounts its root and volumes, leaving
// files in place. Idempotent.
func (b *Backend) Stop(ctx context.Context, sb *sandbox.Sandbox) error {
	id := sb.ID
	p := b.paths(id)
	var errs []error
	// Kill every process in the sandbox's cgroup first: it is immediate,
	// where the runtime's own forced delete polls for the container to die.
	if err := cgroups.KillAll(p.cgroup); err != nil {
		errs = append(errs, err)
	}
	if err := b.rtFor(sb).Delete(ctx, id); err != nil {
		errs = append(errs, err)
	}
	if err := failpoint.Inject("delete.after-runtime"); err != nil {
		errs = append(errs, err)
	}
	if err := cgroups.Destroy(p.cgroup); err != nil {
		errs = append(errs, err)
	}
	mounts, err := overlay.MountsUnder(p.dir)
	if err != nil {
		errs = append(errs, err)
	}
	slices.Reverse(mounts)
	for _, mp := range mounts {
		if err := overlay.Unmount(mp); err != nil {
			errs = append(errs, err)
		}
	}
	if err := b.unmountVolumes(sb); err != nil {
		errs = append(errs, err)
	}
	if err := b.scratch.Unmount(sb.ID); err != nil {
		errs = append(errs, err)
	}
	if err := b.egress.Detach(ctx, sb); err != nil {
		errs = append(errs, err)
	}
	if err := egress.RemoveNetns(p.netns); err != nil {
		errs = append(errs, err)
	}
	b.forgetAgent(id)
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	// Never remove through a mount: the checks above must have left none.
	// Each mount point found is asked again by itself (statx, whatever the
	// size of the host's mount table): under the sandbox's lock nothing
	// else mounts there, so a second read of the whole table (two per
	// delete were most of a delete's CPU with a few hundred sandboxes)
	// would only say the same.
	for _, mp := range mounts {
		if still, err := overlay.Mounted(mp); err != nil || still {
			return fmt.Errorf("mounts remain under %s: %s (%v)", p.dir, mp, err)
		}
	}
	return nil
}

// Discard removes the writable layer that does not persist: all of an
// ephemeral sandbox's, and a persistent one's unless persist_root.
func (b *Backend) Discard(ctx context.Context, sb *sandbox.Sandbox) error {
	if !persistsRoot(sb) {
		if err := b.dropScratch(sb.ID); err != nil {
			return err
		}
	}
	return os.RemoveAll(b.paths(sb.ID).bundle)
}

// Wipe empties a stopped sandbox's writable layer and owned workspace.
func (b *Backend) Wipe(ctx context.Context, sb *sandbox.Sandbox) error {
	if err := b.Discard(ctx, sb); err != nil {
		return err
	}
	for _, vm := range sb.Spec.Volumes {
		if !vm.Owned {
			continue // named volumes are the user's, not the template's
		}
		if err := b.volumes.Mount(vm.VolumeID); err != nil {
			return err
		}
		root := b.volumes.Path(vm.VolumeID)
		for _, d := range []string{volumeDataDir, rootLayerDir} {
			if err := os.RemoveAll(filepath.Join(root, d)); err != nil {
				return err
			}
		}
		if err := b.volumes.Unmount(vm.VolumeID); err != nil {
			return err
		}
	}
	return nil
}

// verifyGone checks that nothing of sandbox sb is left on the host.
func (b *Backend) verifyGone(sb *sandbox.Sandbox) error {
	id := sb.ID
	p := b.paths(id)
	var left []string
	if _, err := b.rtFor(sb).State(context.Background(), id); err == nil {
		left = append(left, "runtime container")
	} else if !errors.Is(err, errdefs.ErrNotFound) {
		return err
	}
	if cgroups.Exists(p.cgroup) {
		left = append(left, "cgroup "+p.cgroup)
	}
	for _, d := range []string{p.dir, p.scratch} {
		if _, err := os.Lstat(d); err == nil {
			left = append(left, "dir "+d)
			if d != p.dir {
				continue
			}
			// Only an existing directory can have mounts under it.
			if ms, _ := overlay.MountsUnder(p.dir); len(ms) > 0 {
				left = append(left, fmt.Sprintf("mounts %v", ms))
			}
		}
	}
	if len(left) > 0 {
		return fmt.Errorf("still present: %s", strings.Join(left, ", "))
	}
	return nil
}

// initPid reads the host pid of sb's init from its bundle.
func (b *Backend) initPid(id string) (int, error) {
	data, err := os.ReadFile(filepath.Join(b.paths(id).bundle, "init.pid"))
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(strings.TrimSpace(string(data)))
}

// SetHostname changes a running sandbox's host name inside its UTS
// namespace (the sandbox itself lacks the privilege to): with nsenter
// where the sandbox's namespaces are the host's (runc), else through the
// runtime (gVisor keeps the sandbox's UTS namespace inside its Sentry,
// where nsenter into the host-side process would change nothing the
// sandbox sees; the runtime runs berth's helper in the sandbox). Classes
// that can do neither (a microVM's guest) refuse it.
func (b *Backend) SetHostname(ctx context.Context, sb *sandbox.Sandbox, name string) error {
	rt := b.rtFor(sb)
	if !b.caps(sb).Rename {
		return errdefs.Conflict("runtime class %s cannot change a running sandbox's hostname "+
			"(its guest's namespaces are not the host's)", rt.Name())
	}
	if hs, ok := rt.(hostnameSetter); ok {
		return hs.SetHostname(ctx, sb.ID, agentBinary, name)
	}
	pid, err := b.initPid(sb.ID)
	if err != nil {
		return err
	}
	out, err := exec.CommandContext(ctx, "nsenter", "--target", strconv.Itoa(pid), "--uts", "--", "hostname", name).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%w: %s", err, strings.TrimSpace(string(out)))
	}
	return nil
}

// sandboxDirs lists the ids that have a directory under the data dir.
func (b *Backend) sandboxDirs() ([]string, error) {
	ents, err := os.ReadDir(filepath.Join(b.cfg.DataDir, "sandboxes"))
	if err != nil {
		return nil, err
	}
	var ids []string
	for _, e := range ents {
		if e.IsDir() {
			ids = append(ids, e.Name())
		}
	}
	return ids, nil
}
