package manager

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/internal/cgroups"
	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/internal/failpoint"
	"github.com/berth-sh/berth/internal/overlay"
	"github.com/berth-sh/berth/internal/runtime"
	"github.com/berth-sh/berth/internal/sandbox"
	"github.com/berth-sh/berth/internal/store"
)

// CreateOptions are the server-side facts about a create that are not part
// of the user's request.
type CreateOptions struct {
	Actor  string // e.g. "key:ab12", "unix"
	Tenant string
	// OneShot marks a `berth run` sandbox, destroyed with its client.
	OneShot bool
	// Internal sandboxes (template builds) are labelled as such.
	Labels map[string]string
	// ID, if set, is the id the new sandbox gets (an Idempotency-Key
	// recorded it before the create acts); see ValidID.
	ID string
	// Reserve, if set, is called with the id of the sandbox the create
	// will hand out, before it is recorded or, for a warm-pool member,
	// claimed; an error stops the create (or that claim).
	Reserve func(id string) error
}

// SpecFromRequest validates a create request against a template's defaults
// and returns the sandbox spec.
func SpecFromRequest(req *api.CreateSandboxRequest, tpl *store.Template) (sandbox.Spec, error) {
	sp := sandbox.Spec{
		Template:   tpl.Name,
		Persistent: req.Persistent,
		Resources:  sandbox.DefaultResources,
		Env:        req.Env,
		Labels:     req.Labels,
		Network:    req.Network,
		Runtime:    req.Runtime,
		Workdir:    req.Workdir,
	}
	if tpl.Config.Resources != nil {
		sp.Resources = *tpl.Config.Resources
	}
	if tpl.Config.Timeout > 0 {
		sp.Timeout = tpl.Config.Timeout
	}
	if req.Resources.CPUs != 0 {
		sp.Resources.CPUs = req.Resources.CPUs
	}
	if req.Resources.MemoryBytes != 0 {
		sp.Resources.MemoryBytes = req.Resources.MemoryBytes
	}
	if req.Resources.Pids != 0 {
		sp.Resources.Pids = req.Resources.Pids
	}
	if req.Resources.DiskBytes != 0 {
		sp.Resources.DiskBytes = req.Resources.DiskBytes
	}
	if req.TimeoutSeconds < 0 {
		return sp, errdefs.Invalid("timeout must not be negative")
	}
	if req.TimeoutSeconds > 0 {
		sp.Timeout = time.Duration(req.TimeoutSeconds * float64(time.Second))
		if sp.Timeout < time.Millisecond {
			return sp, errdefs.Invalid("timeout must be at least 1ms")
		}
	}
	if sp.Network == "" {
		sp.Network = "none"
	}
	if sp.Workdir == "" {
		sp.Workdir = tpl.Config.Workdir
	}
	sp.PersistRoot = req.PersistRoot
	sp.KeepVolume = req.KeepVolume
	pol, err := policyFromAPI(req.Policy)
	if err != nil {
		return sp, err
	}
	if tpl.Config.Policy != nil {
		pol = mergePolicy(pol, *tpl.Config.Policy)
	}
	sp.Policy = pol
	if req.Network == "" && tpl.Config.Network != "" {
		sp.Network = tpl.Config.Network
	}
	return sp, sp.Validate()
}

// Create makes and starts a sandbox. The record is written first (state
// creating), then the host side effects; a failure undoes them and leaves
// a failed tombstone.
func (m *Manager) Create(ctx context.Context, req *api.CreateSandboxRequest, opt CreateOptions) (*sandbox.Sandbox, error) {
	if req.Name != "" && !sandbox.ValidName(req.Name) {
		return nil, errdefs.Invalid("bad name %q: use 1-63 letters, digits, '.', '_' or '-'", req.Name)
	}
	if req.Runtime != "" && m.runtimes[req.Runtime] == nil {
		return nil, errdefs.Invalid("unknown runtime %q: this daemon runs %s", req.Runtime, strings.Join(m.RuntimeNames(), ", "))
	}
	if opt.ID != "" && !ValidID(opt.ID) {
		return nil, errdefs.Invalid("bad sandbox id %q", opt.ID)
	}
	if req.Snapshot != "" {
		return m.createFromSnapshot(ctx, req, opt)
	}
	tname := req.Template
	if tname == "" {
		tname = m.cfg.DefaultTemplate
	}
	tpl, err := m.store.GetTemplate(ctx, tname)
	if errors.Is(err, errdefs.ErrNotFound) {
		return nil, errdefs.NotFound("no template %q (see `berth template ls`)", tname)
	} else if err != nil {
		return nil, err
	}
	spec, err := SpecFromRequest(req, tpl)
	if err != nil {
		return nil, err
	}
	if err := m.resolveVolumes(ctx, req, &spec); err != nil {
		return nil, err
	}
	spec.OneShot = opt.OneShot
	spec.Layers = tpl.Layers
	spec.HostUsr = tpl.Config.HostUsr
	spec.TemplateEnv = tpl.Config.Env
	if len(opt.Labels) > 0 {
		spec.Labels = mergeMaps(spec.Labels, opt.Labels)
	}
	spec.Allow, spec.PublicPorts = req.Allow, req.PublicPorts
	if len(spec.Allow) == 0 && req.Network == "" {
		spec.Allow = tpl.Config.Allow // the template's rules come with its network mode
	}
	spec.Policy = mergePolicy(spec.Policy, m.cfg.DefaultPolicy)
	if spec.Timeout == 0 {
		spec.Timeout = m.cfg.DefaultTimeout
	}
	if spec.Network == "egress" && spec.Runtime == "runsc" {
		return nil, errdefs.Invalid("network mode egress is not available with runtime runsc yet")
	}
	m.withDiskDefault(&spec)
	if err := m.checkDisk(&spec); err != nil { // names the pool's bound
		return nil, err
	}
	if err := spec.Validate(); err != nil {
		return nil, err
	}
	if err := m.admit(ctx, m.sandboxNeed(&spec), "a new sandbox"); err != nil {
		return nil, err
	}
	if poolable(req, tpl, &spec, m.diskDefault()) {
		if sb, err := m.claim(ctx, tpl, spec, req, opt); err != nil || sb != nil {
			return sb, err
		}
	}
	id, err := opt.reserve()
	if err != nil {
		return nil, err
	}
	if err := m.prepareNetwork(ctx, &spec, id); err != nil {
		return nil, err
	}
	now := m.now()
	sb := &sandbox.Sandbox{
		ID: id, Name: req.Name, Tenant: opt.Tenant, State: sandbox.StateCreating, Node: m.cfg.Node,
		Spec: spec, CreatedAt: now, UpdatedAt: now, Cause: sandbox.CauseUser, Reason: "create",
	}
	if err := m.launch(ctx, sb, opt.Actor, nil); err != nil {
		return nil, err
	}
	return sb, nil
}

// reserve returns the new sandbox's id (the chosen one, else a new one)
// once Reserve has accepted it.
func (opt CreateOptions) reserve() (string, error) {
	id := opt.ID
	if id == "" {
		id = newID()
	}
	if opt.Reserve != nil {
		if err := opt.Reserve(id); err != nil {
			return "", err
		}
	}
	return id, nil
}

// launch records a new sandbox (state creating) and then makes it: prep,
// if given, runs first (to lay down forked or snapshotted data), then
// provision. A failure tears down and leaves a failed tombstone.
func (m *Manager) launch(ctx context.Context, sb *sandbox.Sandbox, actor string, prep func() error) error {
	// Side effects must not be cut short by a client that goes away: the
	// create either finishes or is undone.
	ctx = context.WithoutCancel(ctx)
	if err := m.assignIDs(ctx, sb); err != nil {
		return err
	}
	created := &sandbox.Event{SandboxID: sb.ID, Time: m.now(), Type: "state", To: sandbox.StateCreating,
		Actor: actor, Cause: sandbox.CauseUser, Reason: sb.Reason, Outcome: "ok"}
	if err := m.store.CreateSandbox(ctx, sb, created); err != nil {
		_ = m.releaseIDs(ctx, sb)
		return err
	}
	m.eventStored(created)
	unlock := m.locks.Lock(sb.ID)
	defer unlock()
	err := error(nil)
	if prep != nil {
		err = prep()
	}
	if err == nil {
		err = m.provision(ctx, sb)
	}
	if err != nil {
		m.log.Warn("create failed", "sandbox", sb.ID, "err", err)
		m.fail(ctx, sb, actor, err)
		return fmt.Errorf("creating sandbox: %w", err)
	}
	if err := m.transition(ctx, sb, sandbox.StateRunning, sandbox.CauseUser, actor, sb.Reason); err != nil {
		m.fail(ctx, sb, actor, err)
		return err
	}
	m.wakeReconciler()
	return nil
}

// fail records err on sb, tears it down and leaves a deleted tombstone
// carrying the error.
func (m *Manager) fail(ctx context.Context, sb *sandbox.Sandbox, actor string, cause error) {
	sb.Error = errdefs.Message(cause)
	if sb.Error == "internal error" {
		sb.Error = cause.Error()
	}
	if err := m.transition(ctx, sb, sandbox.StateFailed, sandbox.CauseReconciler, actor, "create failed"); err != nil {
		m.log.Error("recording failure", "sandbox", sb.ID, "err", err)
	}
	if err := m.destroyLocked(ctx, sb, sandbox.CauseReconciler, actor, "create failed"); err != nil {
		m.log.Error("tearing down failed sandbox", "sandbox", sb.ID, "err", err)
	}
}

// provision creates the host side of a sandbox: dirs, volumes, overlay
// root, the container with the agent as init, and waits until the agent
// answers. Every step tolerates having been done before (a restarted
// create or start).
func (m *Manager) provision(ctx context.Context, sb *sandbox.Sandbox) error {
	p := m.paths(sb.ID)
	layers, hostUsr := sb.Spec.Layers, sb.Spec.HostUsr
	if len(layers) == 0 { // records from before layers were kept
		tpl, err := m.store.GetTemplate(ctx, sb.Spec.Template)
		if err != nil {
			return fmt.Errorf("template %s: %w", sb.Spec.Template, err)
		}
		layers, hostUsr = tpl.Layers, tpl.Config.HostUsr
	}
	if err := m.ensureIDs(ctx, sb); err != nil {
		return err
	}
	uid, gid := m.cfg.IDMap.HostRoot() // stored range: the upper dir as kept on disk
	if err := m.attachVolumes(ctx, sb); err != nil {
		return err
	}
	if err := m.mountVolumes(sb); err != nil {
		return err
	}
	if err := m.prepareScratch(sb); err != nil { // the disk cap (disk.go)
		return err
	}
	upper, work := m.layerDirs(sb)
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
	lowers := make([]string, 0, len(layers))
	for i := len(layers) - 1; i >= 0; i-- {
		id := layers[i]
		if !m.images.HasLayer(id) {
			return fmt.Errorf("template %s: layer %s is missing from the image store", sb.Spec.Template, id)
		}
		lowers = append(lowers, m.images.LayerPath(id))
	}
	failpoint.Hit("create.before-mount")
	if mounted, err := overlay.Mounted(p.rootfs); err != nil {
		return err
	} else if !mounted {
		lowers, upper, work, err := m.idmapRoot(sb, lowers, upper, work)
		if err != nil {
			return err
		}
		if err := overlay.Mount(lowers, upper, work, p.rootfs); err != nil {
			return err
		}
	}
	failpoint.Hit("create.after-mount")
	// A restarted create may find a half-made container: start over.
	rt := m.rtFor(sb)
	if err := rt.Delete(ctx, sb.ID); err != nil {
		return err
	}
	mounts := []runtime.Mount{
		{Source: m.cfg.AgentPath, Destination: agentBinary, ReadOnly: true},
	}
	if hostUsr {
		mounts = append(mounts, runtime.Mount{Source: "/usr", Destination: "/usr", ReadOnly: true})
	}
	for i, vm := range sb.Spec.Volumes {
		src, err := m.volumeSource(sb, i)
		if err != nil {
			return err
		}
		mounts = append(mounts, runtime.Mount{Source: src, Destination: vm.Path, ReadOnly: vm.ReadOnly})
	}
	userns, err := m.sandboxUserns(sb, rt)
	if err != nil {
		return err
	}
	if sb.Spec.Network == "egress" {
		rc, err := m.resolvConf(ctx, sb)
		if err != nil {
			return err
		}
		mounts = append(mounts, runtime.Mount{Source: rc, Destination: "/etc/resolv.conf", ReadOnly: true})
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
	if err := m.resetAgentPin(sb.ID); err != nil {
		return err
	}
	args := []string{agentBinary, "agent", "--listen-fd", "3", "--seccomp-fd", "4"}
	var extra []*os.File
	seccompFD := 4
	if _, noFDs := rt.(interface{ NoInheritedListeners() }); noFDs {
		if err := os.Remove(p.socket); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
		ruid, rgid := m.idMapOf(sb).HostRoot()
		if err := mountRunTmpfs(p.run, ruid, rgid); err != nil {
			return err
		}
		mounts = append(mounts, runtime.Mount{Source: p.run, Destination: "/.berth/run"})
		args = []string{agentBinary, "agent", "--socket", "/.berth/run/" + agentSockName}
		seccompFD = 0
	} else {
		lnFile, err := bindAgentSocket(p.socket)
		if err != nil {
			return err
		}
		defer lnFile.Close()
		extra = []*os.File{lnFile}
	}
	logw, err := m.openInitLog(sb.ID)
	if err != nil {
		return err
	}
	defer logw.Close()
	tStart := time.Now()
	pid, err := rt.Start(ctx, &runtime.Spec{
		ID:            sb.ID,
		Bundle:        p.bundle,
		Rootfs:        p.rootfs,
		Hostname:      sb.Hostname(),
		Args:          args,
		ExtraFiles:    extra,
		Env:           []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "BERTH_SANDBOX_ID=" + sb.ID, "GOMAXPROCS=1"},
		Mounts:        mounts,
		Resources:     sb.Spec.Resources,
		IDMap:         m.idMapOf(sb),
		UsernsPath:    userns,
		CgroupsPath:   p.cgroup,
		Log:           logw,
		InitSeccompFD: seccompFD,
		Helper:        agentBinary,
	})
	logw.Close()
	if err != nil {
		if tail := strings.TrimSpace(m.initLogTail(sb.ID, 2048, 100*time.Millisecond)); tail != "" {
			err = fmt.Errorf("%w: %s", err, tail)
		}
		return err
	}
	go reap(pid)
	if err := m.attachNetwork(ctx, sb, pid); err != nil {
		return fmt.Errorf("network: %w", err)
	}
	failpoint.Hit("create.after-start")
	tReady := time.Now()
	err = m.waitReady(ctx, sb.ID)
	m.log.Debug("provisioned", "sandbox", sb.ID, "runtime_start", tReady.Sub(tStart), "agent_ready", time.Since(tReady))
	return err
}

// agentBinary is where the berth binary appears inside every sandbox.
const agentBinary = "/.berth/berth"

// waitReady polls the agent's socket until it answers a ping.
func (m *Manager) waitReady(ctx context.Context, id string) error {
	c := m.agentFor(id)
	deadline := time.Now().Add(m.cfg.ReadyTimeout)
	delay := 200 * time.Microsecond
	for {
		pctx, cancel := context.WithTimeout(ctx, time.Second)
		_, err := c.Ping(pctx)
		cancel()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			log := strings.TrimSpace(m.initLogTail(id, 1024, 0))
			return fmt.Errorf("agent did not become ready within %s: %w (init log: %q)", m.cfg.ReadyTimeout, err, log)
		}
		time.Sleep(delay)
		if delay < time.Millisecond {
			delay *= 2
		}
	}
}

// Delete destroys a sandbox and leaves a tombstone. Deleting a deleted
// sandbox returns its tombstone.
func (m *Manager) Delete(ctx context.Context, ref, actor string, cause sandbox.Cause, reason string) (*sandbox.Sandbox, error) {
	m.releaseReserveIfFull()
	sb, err := m.local(ctx, ref)
	if err != nil {
		return nil, err
	}
	ctx = context.WithoutCancel(ctx)
	unlock := m.locks.Lock(sb.ID)
	defer unlock()
	// Re-read under the lock: another operation may have moved it.
	if sb, err = m.store.GetSandbox(ctx, owner(ctx), sb.ID); err != nil {
		return nil, err
	}
	if sb.State == sandbox.StateDeleted {
		return sb, nil
	}
	if err := m.destroyLocked(ctx, sb, cause, actor, reason); err != nil {
		return sb, err
	}
	return sb, nil
}

// destroyLocked moves sb to deleting, tears it down (retrying with
// backoff), verifies nothing is left, and records deleted. If teardown
// keeps failing the record stays in deleting with the error, and the
// reconciler retries. The caller holds the sandbox's lock.
func (m *Manager) destroyLocked(ctx context.Context, sb *sandbox.Sandbox, cause sandbox.Cause, actor, reason string) error {
	if sb.State != sandbox.StateDeleting {
		if err := m.transition(ctx, sb, sandbox.StateDeleting, cause, actor, reason); err != nil {
			return err
		}
	}
	var err error
	backoff := 50 * time.Millisecond
	for attempt := 0; attempt < 4; attempt++ {
		if err = m.teardown(ctx, sb); err == nil {
			if err = m.verifyGone(sb); err == nil {
				break
			}
		}
		m.log.Warn("teardown incomplete, retrying", "sandbox", sb.ID, "attempt", attempt+1, "err", err)
		time.Sleep(backoff)
		backoff *= 2
	}
	if err != nil {
		sb.Error = "teardown: " + err.Error()
		if uerr := m.store.UpdateSandbox(ctx, sb); uerr != nil {
			m.log.Error("recording teardown error", "sandbox", sb.ID, "err", uerr)
		}
		m.event(ctx, &sandbox.Event{SandboxID: sb.ID, Type: "teardown", Actor: actor,
			Cause: cause, Reason: reason, Outcome: "error", Message: err.Error()})
		return fmt.Errorf("sandbox %s: teardown will be retried: %w", sb.ID, err)
	}
	if err == nil {
		err = m.releaseVolumes(ctx, sb)
	}
	if err == nil {
		err = m.releaseIDs(ctx, sb)
	}
	if err != nil {
		sb.Error = "teardown: " + err.Error()
		if uerr := m.store.UpdateSandbox(ctx, sb); uerr != nil {
			m.log.Error("recording teardown error", "sandbox", sb.ID, "err", uerr)
		}
		return fmt.Errorf("sandbox %s: releasing volumes will be retried: %w", sb.ID, err)
	}
	m.mu.Lock()
	delete(m.activity, sb.ID)
	delete(m.cpu, sb.ID)
	m.mu.Unlock()
	m.forgetChannel(sb.ID)
	if sb.Reason != reason {
		reason = sb.Reason
	}
	if sb.Error != "" && strings.HasPrefix(sb.Error, "teardown: ") {
		sb.Error = ""
	}
	return m.transition(ctx, sb, sandbox.StateDeleted, cause, actor, reason)
}

// teardown removes every host resource of sandbox sb but its volumes'
// data. Each step is idempotent; all are attempted and their errors joined.
func (m *Manager) teardown(ctx context.Context, sb *sandbox.Sandbox) error {
	id := sb.ID
	if err := m.stopHost(ctx, sb); err != nil {
		return err
	}
	p := m.paths(id)
	failpoint.Hit("delete.after-unmount")
	if err := m.removeScratch(id); err != nil {
		return err
	}
	if err := os.RemoveAll(p.dir); err != nil {
		return err
	}
	if err := os.Remove(m.resolvConfPath(id)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}

// stopHost ends sb's processes and unmounts its root and volumes,
// leaving files in place. Idempotent.
func (m *Manager) stopHost(ctx context.Context, sb *sandbox.Sandbox) error {
	id := sb.ID
	p := m.paths(id)
	m.cancelExecs(id)
	var errs []error
	// Kill every process in the sandbox's cgroup first: it is immediate,
	// where the runtime's own forced delete polls for the container to die.
	if err := cgroups.KillAll(p.cgroup); err != nil {
		errs = append(errs, err)
	}
	if err := m.rtFor(sb).Delete(ctx, id); err != nil {
		errs = append(errs, err)
	}
	failpoint.Hit("delete.after-runtime")
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
	if err := m.unmountVolumes(sb); err != nil {
		errs = append(errs, err)
	}
	if err := m.unmountScratch(sb); err != nil {
		errs = append(errs, err)
	}
	if err := m.detachNetwork(ctx, sb); err != nil {
		errs = append(errs, err)
	}
	m.forgetAgent(id)
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	// Never remove through a mount: the checks above must have left none.
	if left, _ := overlay.MountsUnder(p.dir); len(left) > 0 {
		return fmt.Errorf("mounts remain under %s: %v", p.dir, left)
	}
	return nil
}

// verifyGone checks that nothing of sandbox sb is left on the host.
func (m *Manager) verifyGone(sb *sandbox.Sandbox) error {
	id := sb.ID
	p := m.paths(id)
	var left []string
	if _, err := m.rtFor(sb).State(context.Background(), id); err == nil {
		left = append(left, "runtime container")
	} else if !errors.Is(err, errdefs.ErrNotFound) {
		return err
	}
	if cgroups.Exists(p.cgroup) {
		left = append(left, "cgroup "+p.cgroup)
	}
	if ms, _ := overlay.MountsUnder(p.dir); len(ms) > 0 {
		left = append(left, fmt.Sprintf("mounts %v", ms))
	}
	for _, d := range []string{p.dir, p.scratch} {
		if _, err := os.Lstat(d); err == nil {
			left = append(left, "dir "+d)
		}
	}
	if len(left) > 0 {
		return fmt.Errorf("still present: %s", strings.Join(left, ", "))
	}
	return nil
}

func mergeMaps(a, b map[string]string) map[string]string {
	out := make(map[string]string, len(a)+len(b))
	for k, v := range a {
		out[k] = v
	}
	for k, v := range b {
		out[k] = v
	}
	return out
}

// sandboxDirs lists the ids that have a directory under the data dir.
func (m *Manager) sandboxDirs() ([]string, error) {
	ents, err := os.ReadDir(filepath.Join(m.cfg.DataDir, "sandboxes"))
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

// seconds converts an API duration in seconds, rejecting nonsense.
func seconds(name string, v float64) (time.Duration, error) {
	if v < 0 || v > sandbox.MaxTimeout.Seconds() {
		return 0, errdefs.Invalid("%s must be between 0 and %s", name, sandbox.MaxTimeout)
	}
	d := time.Duration(v * float64(time.Second))
	if v > 0 && d < time.Millisecond {
		return 0, errdefs.Invalid("%s must be at least 1ms", name)
	}
	return d, nil
}

// mergePolicy fills the fields p leaves unset from def.
func mergePolicy(p, def sandbox.Policy) sandbox.Policy {
	if p.IdleTimeout == 0 {
		p.IdleTimeout = def.IdleTimeout
	}
	if p.OnIdle == sandbox.ActionNone {
		p.OnIdle = def.OnIdle
	}
	if p.MaxAge == 0 {
		p.MaxAge = def.MaxAge
	}
	if p.OnMaxAge == sandbox.ActionNone {
		p.OnMaxAge = def.OnMaxAge
	}
	if p.Retention == 0 {
		p.Retention = def.Retention
	}
	if !p.AutoResume {
		p.AutoResume = def.AutoResume
	}
	if p.IdleCPUThreshold == 0 {
		p.IdleCPUThreshold = def.IdleCPUThreshold
	}
	return p
}

func policyFromAPI(p api.Policy) (sandbox.Policy, error) {
	var out sandbox.Policy
	var err error
	if out.IdleTimeout, err = seconds("idle_timeout_seconds", p.IdleTimeoutSeconds); err != nil {
		return out, err
	}
	if out.MaxAge, err = seconds("max_age_seconds", p.MaxAgeSeconds); err != nil {
		return out, err
	}
	if out.Retention, err = seconds("retention_seconds", p.RetentionSeconds); err != nil {
		return out, err
	}
	out.OnIdle = sandbox.Action(p.OnIdle)
	out.OnMaxAge = sandbox.Action(p.OnMaxAge)
	out.AutoResume = p.AutoResume
	out.IdleCPUThreshold = p.IdleCPUThreshold
	return out, nil
}
