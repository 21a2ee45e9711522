package engine

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"slices"
	"strings"
	"time"

	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/internal/node"
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
func SpecFromRequest(req *CreateRequest, tpl *store.Template) (sandbox.Spec, error) {
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
	if req.Timeout < 0 {
		return sp, errdefs.Invalid("timeout must not be negative")
	}
	if req.Timeout > 0 {
		sp.Timeout = req.Timeout
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
	if sp.User = req.User; sp.User == "" {
		sp.User = tpl.Config.User
	}
	sp.PersistRoot = req.PersistRoot
	sp.KeepVolume = req.KeepVolume
	pol, err := CheckPolicy(req.Policy)
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
// a failed tombstone. Its outcome and time to interactive are recorded.
func (m *Engine) Create(ctx context.Context, req *CreateRequest, opt CreateOptions) (*sandbox.Sandbox, error) {
	begin := time.Now()
	info := createInfo{path: "cold"}
	sb, err := m.create(ctx, req, opt, &info)
	if err != nil {
		code, _ := errdefs.Code(err)
		m.cfg.Metrics.CreateFailed(code)
		return sb, err
	}
	tname := sb.Spec.Template
	if info.tenantTemplate || (info.path == "snapshot" && sb.Tenant != "") {
		tname = TenantTemplateLabel
	}
	if IsImageTemplate(sb.Spec.Template) {
		tname = ImageTemplateLabel
	}
	m.cfg.Metrics.Created(tname, sb.Spec.Runtime, info.path, time.Since(begin))
	return sb, nil
}

// createInfo is what a create tells its measure: the path it took and
// whether its template was a tenant's own.
type createInfo struct {
	path           string
	tenantTemplate bool
}

func (m *Engine) create(ctx context.Context, req *CreateRequest, opt CreateOptions, info *createInfo) (*sandbox.Sandbox, error) {
	if req.Name != "" && !sandbox.ValidName(req.Name) {
		return nil, errdefs.Invalid("bad name %q: use 1-63 letters, digits, '.', '_' or '-'", req.Name)
	}
	if _, ok := node.ClassCaps(m.node, req.Runtime); !ok {
		return nil, errdefs.Invalid("unknown runtime %q: this daemon runs %s", req.Runtime, strings.Join(m.RuntimeNames(), ", "))
	}
	if opt.ID != "" && !ValidID(opt.ID) {
		return nil, errdefs.Invalid("bad sandbox id %q", opt.ID)
	}
	if req.Snapshot != "" && req.Image != "" {
		return nil, errdefs.Invalid("give snapshot or image, not both")
	}
	if req.Snapshot != "" {
		if m.hooks.FromSnapshot == nil {
			return nil, errdefs.NotSupported("this daemon makes no sandboxes from snapshots")
		}
		info.path = "snapshot"
		return m.hooks.FromSnapshot(ctx, req, opt)
	}
	tpl, release, err := m.createTemplate(ctx, req, opt)
	if err != nil {
		return nil, err
	}
	defer release()
	info.tenantTemplate = tpl.Tenant != ""
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
	spec.Allow, spec.PublicPorts, spec.AllPortsPublic = req.Allow, req.PublicPorts, req.AllPortsPublic
	spec.MaskRequestHost, spec.KeepCreateLease = req.MaskRequestHost, req.KeepCreateLease
	if spec.Secrets, err = m.checkSecretRefs(ctx, opt.Tenant, req.Secrets); err != nil {
		return nil, err
	}
	if len(spec.Allow) == 0 && req.Network == "" {
		spec.Allow = tpl.Config.Allow // the template's rules come with its network mode
	}
	if err := m.checkEgressSecrets(&spec); err != nil {
		return nil, err
	}
	spec.Policy = mergePolicy(spec.Policy, m.cfg.DefaultPolicy)
	if spec.Timeout == 0 {
		spec.Timeout = m.cfg.DefaultTimeout
	}
	// The class is recorded by name, never as "the default": a daemon
	// restarted with another default keeps each sandbox on its own class,
	// and what the class can do is checked on the class it really is.
	if spec.Runtime == "" {
		spec.Runtime = m.DefaultRuntime()
	}
	caps, _ := node.ClassCaps(m.node, spec.Runtime)
	if req.Sudo && !caps.Sudo {
		return nil, errdefs.Invalid("runtime %s offers no sudo", spec.Runtime)
	}
	spec.Sudo = req.Sudo || req.SudoWhereOffered && caps.Sudo
	if spec.Network == "egress" && !caps.Egress {
		return nil, errdefs.Invalid("network mode egress is not available with runtime %s yet", spec.Runtime)
	}
	if spec.PersistRoot && !caps.RootLayer {
		return nil, errdefs.Invalid("runtime %s keeps no root layer of its own (it goes with the pod or VM): persist_root is not available; only volumes persist", spec.Runtime)
	}
	if p := spec.Policy; !caps.Freeze && !spec.Persistent && p.IdleTimeout > 0 && (p.OnIdle == sandbox.ActionNone || p.OnIdle == sandbox.ActionPause) {
		return nil, errdefs.Invalid("runtime %s cannot freeze processes, so an ephemeral sandbox cannot pause when idle: use on_idle stop, or a persistent sandbox (its pause is a stop)", spec.Runtime)
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
	if m.hooks.Claim != nil {
		if sb, err := m.hooks.Claim(ctx, tpl, spec, req, opt); err != nil || sb != nil {
			if sb != nil {
				info.path = "pool"
			}
			return sb, err
		}
	}
	id, err := opt.ReserveID()
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

// createTemplate is the template a create starts from: req.Image's cached
// record (pulled on first use, kept from eviction until release), else
// the template it names, the caller's own first, then the shared
// catalogue's; never another tenant's. An image record is reached only
// through Image, and only the caller's own: the host's records (pulled
// with the daemon's registry accounts) are no shared catalogue.
func (m *Engine) createTemplate(ctx context.Context, req *CreateRequest, opt CreateOptions) (*store.Template, func(), error) {
	nop := func() {}
	if req.Image != "" {
		if req.Template != "" {
			return nil, nop, errdefs.Invalid("give template or image, not both")
		}
		if m.hooks.ResolveImage == nil {
			return nil, nop, errdefs.NotSupported("this daemon makes no sandboxes from registry images")
		}
		return m.hooks.ResolveImage(ctx, req, opt.Tenant)
	}
	if req.RegistryAuth != nil || req.ImageInsecure {
		return nil, nop, errdefs.Invalid("registry_auth and image_insecure go with image")
	}
	tname := req.Template
	if tname == "" {
		tname = m.cfg.DefaultTemplate
	}
	tpl, err := m.store.ResolveTemplate(ctx, opt.Tenant, tname)
	if err == nil && IsImageTemplate(tname) && tpl.Tenant != opt.Tenant {
		err = errdefs.ErrNotFound
	}
	if errors.Is(err, errdefs.ErrNotFound) {
		return nil, nop, errdefs.NotFound("no template %q (see `berth template ls`)", tname)
	} else if err != nil {
		return nil, nop, err
	}
	return tpl, nop, nil
}

// ReserveID returns the new sandbox's id (the chosen one, else a new one)
// once Reserve has accepted it.
func (opt CreateOptions) ReserveID() (string, error) {
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
func (m *Engine) launch(ctx context.Context, sb *sandbox.Sandbox, actor string, prep func() error) error {
	// Its place in the node's start queue first: a tenant with too many
	// starts waiting is refused before anything is written.
	turn, err := m.starts.enter(sb.Tenant, sb.Spec.Pool != "")
	if err != nil {
		return err
	}
	defer turn.leave()
	// Side effects must not be cut short by a client that goes away: the
	// create either finishes or is undone.
	ctx = context.WithoutCancel(ctx)
	sb.Replica = m.cfg.Replica
	if err := m.assignIDs(ctx, sb); err != nil {
		return err
	}
	created := &sandbox.Event{SandboxID: sb.ID, Time: m.now(), Type: "state", To: sandbox.StateCreating,
		Actor: actor, Cause: sandbox.CauseUser, Reason: sb.Reason, Outcome: "ok"}
	if err := m.admitQuota(ctx, sb, func() error { return m.store.CreateSandbox(ctx, sb, created) }); err != nil {
		_ = m.releaseIDs(ctx, sb)
		return err
	}
	m.eventStored(created)
	release, unlocked := m.live.lock(sb.ID), false
	unlock := func() {
		if !unlocked {
			unlocked = true
			release()
		}
	}
	defer unlock()
	// Recorded (creating, counted in the tenant's quota), it waits its
	// turn; the lock keeps a delete from starting under it meanwhile, but
	// a delete first ends the wait (abandon): the create then fails, and
	// the delete removes what is left. The client going away does not end
	// it: the record is written, so the create finishes or is undone.
	err = turn.waitFor(ctx, sb.ID)
	if err == nil && prep != nil {
		err = prep()
	}
	if err == nil {
		err = m.provisionRecovered(ctx, sb)
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
	turn.leave()
	m.wakeReconciler()
	unlock()
	m.awaitService(ctx, sb)
	return nil
}

// awaitService waits, at most store.ServiceReadyWait in all, until every
// ready port of sb accepts connections: its template's service's and
// those of its supervised processes (the Running hook starts both in the
// background), so a client can use them as soon as create, start or a
// waking port request returns. A port that never listens fails nothing.
func (m *Engine) awaitService(ctx context.Context, sb *sandbox.Sandbox) {
	ports := m.readyPorts(ctx, sb)
	if len(ports) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, store.ServiceReadyWait)
	defer cancel()
	for _, port := range ports {
		if err := m.awaitPort(ctx, sb, port); err != nil {
			m.log.Warn("ready port not listening in time", "sandbox", sb.ID, "port", port, "err", err)
			return
		}
	}
}

// readyPorts are sb's ready ports: its template's service's, then its
// supervised processes' (store.ProcessSpec.ReadyPort), each once.
func (m *Engine) readyPorts(ctx context.Context, sb *sandbox.Sandbox) []int {
	var ports []int
	if sb.Spec.Template != "" {
		if tpl, err := m.ResolveTemplate(ctx, sb.Tenant, sb.Spec.Template); err == nil && tpl.Config.Service != nil &&
			tpl.Config.Service.ReadyPort != 0 {
			ports = append(ports, tpl.Config.Service.ReadyPort)
		}
	}
	if sps, err := m.store.ListProcesses(ctx, sb.ID); err == nil {
		for _, sp := range sps {
			if p := sp.Spec.ReadyPort; p != 0 && !slices.Contains(ports, p) {
				ports = append(ports, p)
			}
		}
	}
	return ports
}

// awaitPort waits until port of running sandbox sb accepts a connection,
// or ctx ends (the caller's deadline, which must be the daemon's).
func (m *Engine) awaitPort(ctx context.Context, sb *sandbox.Sandbox, port int) error {
	for {
		dctx, dcancel := context.WithTimeout(ctx, 2*time.Second)
		c, err := m.node.DialPort(dctx, sb, port)
		dcancel()
		if err == nil {
			c.Close()
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("port %d: %w (last: %v)", port, ctx.Err(), err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// fail records err on sb, tears it down and leaves a deleted tombstone
// carrying the error.
func (m *Engine) fail(ctx context.Context, sb *sandbox.Sandbox, actor string, cause error) {
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

// provision makes sb's records complete (its host id range, its layers,
// its volumes attached) and has the backend lay down and start its host
// side. Every step tolerates having been done before (a restarted create
// or start).
func (m *Engine) provision(ctx context.Context, sb *sandbox.Sandbox) error {
	if err := m.prepareRecord(ctx, sb); err != nil {
		return err
	}
	if err := m.node.Provision(ctx, sb); err != nil {
		return err
	}
	return m.ownWorkspace(ctx, sb)
}

// provisionRecovered is provision with a panic in one of its steps made
// the create's error (logged with its stack), so that the create is
// undone like any that failed: the server's guard answers a panic with
// 500, but would leave the sandbox half made, creating, for ever.
func (m *Engine) provisionRecovered(ctx context.Context, sb *sandbox.Sandbox) (err error) {
	defer func() {
		if v := recover(); v != nil {
			m.log.Error("panic in a create's step; undoing the create", "sandbox", sb.ID, "panic", fmt.Sprint(v),
				"stack", string(debug.Stack()))
			err = fmt.Errorf("panic: %v", v)
		}
	}()
	return m.provision(ctx, sb)
}

// workspaceDir is the directory a sandbox's default user owns.
const workspaceDir = "/workspace"

// ownWorkspace gives /workspace (made if missing) to the sandbox's default
// user, resolved by the agent in the sandbox's own /etc/passwd, so the
// ids are the sandbox's and the user namespace maps them. A user that does
// not resolve fails the create (or start). The agent is not trusted to
// answer: the call is bounded by the daemon's own deadline.
func (m *Engine) ownWorkspace(ctx context.Context, sb *sandbox.Sandbox) error {
	if sb.Spec.User == "" || sb.Spec.User == "0" || sb.Spec.User == "root" {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, ownWorkspaceTimeout)
	defer cancel()
	if err := m.node.Agent(sb).MkdirOwned(ctx, workspaceDir, sb.Spec.User); err != nil {
		return fmt.Errorf("giving %s to user %s: %w", workspaceDir, sb.Spec.User, err)
	}
	return nil
}

const ownWorkspaceTimeout = 10 * time.Second

// prepareRecord fills what the backend needs of a record: the template's
// layers of records from before they were kept, a host id range, and its
// volumes recorded as attached (their images made).
func (m *Engine) prepareRecord(ctx context.Context, sb *sandbox.Sandbox) error {
	if len(sb.Spec.Layers) == 0 { // records from before layers were kept
		tpl, err := m.store.ResolveTemplate(ctx, sb.Tenant, sb.Spec.Template)
		if err != nil {
			return fmt.Errorf("template %s: %w", sb.Spec.Template, err)
		}
		sb.Spec.Layers, sb.Spec.HostUsr = tpl.Layers, tpl.Config.HostUsr
	}
	if err := m.ensureIDs(ctx, sb); err != nil {
		return err
	}
	return m.attachVolumes(ctx, sb)
}

// Delete destroys a sandbox and leaves a tombstone. Deleting a deleted
// sandbox returns its tombstone.
func (m *Engine) Delete(ctx context.Context, ref, actor string, cause sandbox.Cause, reason string) (*sandbox.Sandbox, error) {
	m.node.ReleaseReserve()
	sb, err := m.local(ctx, ref)
	if err != nil {
		return nil, err
	}
	ctx = context.WithoutCancel(ctx)
	// A create still waiting its turn to start gives up at once, rather
	// than start only to be deleted.
	m.starts.abandon(sb.ID, errdefs.Conflict("sandbox %s was deleted while its start waited its turn", sb.ID))
	unlock := m.live.lock(sb.ID)
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

// teardownError begins the Error destroyLocked records for an attempt
// that failed: Error is the one text field a sandbox has, and a later
// attempt that succeeds clears what an earlier one wrote, not the error a
// failed sandbox was deleted with.
const teardownError = "teardown: "

// destroyLocked moves sb to deleting, tears it down (retrying with
// backoff), verifies nothing is left, and records deleted. If teardown
// keeps failing the record stays in deleting with the error, and the
// reconciler retries. The caller holds the sandbox's lock.
func (m *Engine) destroyLocked(ctx context.Context, sb *sandbox.Sandbox, cause sandbox.Cause, actor, reason string) error {
	begin := time.Now()
	if sb.State != sandbox.StateDeleting {
		if sb.State != sandbox.StateFailed {
			// A delete of a sandbox that did not fail: an error it once
			// had (a failed start) is not what its tombstone says.
			sb.Error = ""
		}
		if err := m.transition(ctx, sb, sandbox.StateDeleting, cause, actor, reason); err != nil {
			return err
		}
	}
	var err error
	backoff := 50 * time.Millisecond
	for attempt := 0; attempt < 4; attempt++ {
		if err = m.stopProcesses(ctx, sb, m.node.Remove); err == nil {
			break
		}
		if attempt < 3 {
			m.cfg.Metrics.TeardownFailed(false) // retried now
		}
		m.log.Warn("teardown incomplete, retrying", "sandbox", sb.ID, "attempt", attempt+1, "err", err)
		time.Sleep(backoff)
		backoff *= 2
	}
	// A failure stays recorded on the sandbox, which stays deleting: the
	// reconciler retries it.
	failed := func(what string, err error) error {
		m.cfg.Metrics.TeardownFailed(true)
		sb.Error = teardownError + err.Error()
		if uerr := m.store.UpdateSandbox(ctx, sb); uerr != nil {
			m.log.Error("recording teardown error", "sandbox", sb.ID, "err", uerr)
		}
		return fmt.Errorf("sandbox %s: %s will be retried: %w", sb.ID, what, err)
	}
	if err != nil {
		m.event(ctx, &sandbox.Event{SandboxID: sb.ID, Type: "teardown", Actor: actor,
			Cause: cause, Reason: reason, Outcome: "error", Message: err.Error()})
		return failed("teardown", err)
	}
	if err := m.releaseVolumes(ctx, sb); err != nil {
		return failed("releasing volumes", err)
	}
	if err := m.releaseIDs(ctx, sb); err != nil {
		return failed("releasing ids", err)
	}
	m.node.Forget(sb)
	// The tombstone keeps why the sandbox went (its reason, a failure's
	// error) but not a failed attempt's error, which is over now.
	reason = sb.Reason
	if strings.HasPrefix(sb.Error, teardownError) {
		sb.Error = ""
	}
	if err := m.transition(ctx, sb, sandbox.StateDeleted, cause, actor, reason); err != nil {
		return err
	}
	// Only now, with deleted recorded: dropping the entry drops the
	// operation lock the caller holds, and a reconciler pass that takes
	// a fresh one must read deleted, not deleting (else it tears the
	// sandbox down a second time).
	m.live.drop(sb.ID)
	m.cfg.Metrics.CleanedUp(string(cause), cleanupSince(ctx, begin))
	return nil
}

// stopProcesses ends sb's execs and has the backend act (stop, remove):
// an exec's client learns that its sandbox went away, not that its
// command failed.
func (m *Engine) stopProcesses(ctx context.Context, sb *sandbox.Sandbox, act func(context.Context, *sandbox.Sandbox) error) error {
	if l := m.live.peek(sb.ID); l != nil {
		l.cancelExecs()
	}
	return act(ctx, sb)
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

// CheckDuration refuses a duration that is negative, past
// sandbox.MaxTimeout or positive but under a millisecond (name, the API's
// field, for errors).
func CheckDuration(name string, d time.Duration) error {
	if d < 0 || d > sandbox.MaxTimeout {
		return errdefs.Invalid("%s must be between 0 and %s", name, sandbox.MaxTimeout)
	}
	if d > 0 && d < time.Millisecond {
		return errdefs.Invalid("%s must be at least 1ms", name)
	}
	return nil
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

// CheckPolicy refuses a policy's nonsense durations (its actions are the
// spec's to check) and returns it.
func CheckPolicy(p sandbox.Policy) (sandbox.Policy, error) {
	for _, f := range []struct {
		name string
		d    time.Duration
	}{{"idle_timeout_seconds", p.IdleTimeout}, {"max_age_seconds", p.MaxAge}, {"retention_seconds", p.Retention}} {
		if err := CheckDuration(f.name, f.d); err != nil {
			return sandbox.Policy{}, err
		}
	}
	return p, nil
}
