package snapshots

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"path"
	"strings"
	"sync"
	"time"

	"github.com/berth-sh/berth/internal/engine"
	"github.com/berth-sh/berth/internal/engine/files"
	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/internal/failpoint"
	"github.com/berth-sh/berth/internal/node"
	"github.com/berth-sh/berth/internal/sandbox"
	"github.com/berth-sh/berth/internal/store"
)

// Snapshots is the fork, snapshot, export and copy feature over the
// engine's core: crash-consistent captures by the node backend, children
// and snapshot-made sandboxes launched by the core.
type Snapshots struct {
	e     engine.Host
	files *files.Access
	store store.Store
	node  node.Backend
	log   *slog.Logger
}

// New returns the snapshot feature of e; export and copy read and write
// files through fa.
func New(e engine.Host, fa *files.Access) *Snapshots {
	m := &Snapshots{e: e, files: fa, store: e.Store(), node: e.Backend(), log: e.Log()}
	e.Hooks().FromSnapshot = m.FromSnapshot // a create from a snapshot
	return m
}

// capturer is the backend's Capturer, or its refusal of captures.
func (m *Snapshots) capturer() (node.Capturer, error) {
	return node.Need[node.Capturer](m.node, node.OpCapture)
}

// Limits of fork and snapshots.
const (
	MaxForkCount           = 64
	MaxSnapshotsPerSandbox = 32
)

// childSpec derives the spec of a sandbox made from captured state: same
// template layers and root layout; fresh owned volumes; named volumes are
// not carried over (only one sandbox may use each).
func childSpec(src sandbox.Spec) sandbox.Spec {
	sp := src
	sp.Volumes = nil
	for _, vm := range src.Volumes {
		if vm.Owned {
			sp.Volumes = append(sp.Volumes, sandbox.VolumeMount{VolumeID: engine.NewID(), Path: vm.Path, Owned: true})
		}
	}
	sp.Env = maps.Clone(src.Env)
	sp.Labels = maps.Clone(src.Labels)
	sp.OneShot = false
	sp.Pool = ""
	sp.KeepVolume = false
	sp.IDs = nil // a child gets its own host id range
	// A child has addresses of its own (allocated at its create): the
	// parent's would collide, and the egress proxy tells sandboxes apart
	// by address.
	sp.IPv4, sp.IPv6 = "", ""
	return sp
}

// Fork makes req.Count children of the sandbox ref, each starting from a
// copy-on-write view of its filesystem now. The parent is frozen only for
// the instant of the capture. Children are ephemeral unless asked.
// ids, if given, are the children's ids (one per child, see ValidID).
func (m *Snapshots) Fork(ctx context.Context, ref string, req *ForkRequest, actor string, ids ...string) ([]*sandbox.Sandbox, time.Duration, error) {
	n := req.Count
	if n == 0 {
		n = 1
	}
	if n < 0 || n > MaxForkCount {
		return nil, 0, errdefs.Invalid("count must be between 1 and %d", MaxForkCount)
	}
	if err := checkIDs(ids, n); err != nil {
		return nil, 0, err
	}
	if req.NamePrefix != "" && !sandbox.ValidName(req.NamePrefix+"-64") {
		return nil, 0, errdefs.Invalid("bad name prefix %q", req.NamePrefix)
	}
	timeout := req.Timeout
	if err := engine.CheckDuration("timeout_seconds", timeout); err != nil {
		return nil, 0, err
	}
	cp, err := m.capturer()
	if err != nil {
		return nil, 0, err
	}
	var parent *sandbox.Sandbox
	var stage node.Capture
	var release func()
	_, err = m.e.Op(ctx, ref, func(ctx context.Context, op *engine.Op, sb *sandbox.Sandbox) error {
		if sb.State != sandbox.StateRunning && sb.State != sandbox.StatePaused && sb.State != sandbox.StateStopped {
			return sandbox.ErrWrongState("fork", sb)
		}
		if err := m.e.Admit(ctx, int64(n)*m.e.SandboxNeed(&sb.Spec), fmt.Sprintf("forking %s into %d", sb.ID, n)); err != nil {
			return err
		}
		parent = sb
		var err error
		stage, release, err = capture(ctx, cp, sb, cp.CaptureName(sb.ID))
		return err
	})
	if err != nil {
		return nil, 0, err
	}
	frozen := stage.Frozen
	defer func() {
		release()
		if err := cp.DropCapture(stage.Name); err != nil {
			m.log.Warn("removing a fork's capture", "capture", stage.Name, "err", err)
		}
	}()
	if err := failpoint.Inject("fork.after-capture"); err != nil {
		return nil, frozen, err
	}
	// Ids and (egress) addresses first, one child after another, so no two
	// children get one address before either is recorded.
	childIDs := make([]string, n)
	addrs := make([]sandbox.Spec, n)
	taken := map[string]bool{}
	for i := range n {
		childIDs[i] = engine.NewID()
		if len(ids) > 0 {
			childIDs[i] = ids[i]
		}
		sp := childSpec(parent.Spec)
		if err := m.e.PrepareNetwork(ctx, &sp, childIDs[i], func(a string) bool { return taken[a] }); err != nil {
			return nil, frozen, err
		}
		taken[sp.IPv4], taken[sp.IPv6] = sp.IPv4 != "", sp.IPv6 != ""
		addrs[i] = sp
	}
	// The parent's supervised processes come with its children: each
	// child's first boot starts them, as any boot of the parent would.
	supervised, err := m.store.ListProcesses(ctx, parent.ID)
	if err != nil {
		return nil, frozen, fmt.Errorf("listing %s's supervised processes: %w", parent.ID, err)
	}
	children := make([]*sandbox.Sandbox, n)
	errs := make([]error, n)
	done := make(chan int, n)
	for i := range n {
		go func() {
			defer func() { done <- i }()
			sp := childSpec(parent.Spec)
			sp.IPv4, sp.IPv6 = addrs[i].IPv4, addrs[i].IPv6
			sp.Persistent = req.Persistent
			sp.Parent = parent.ID
			sp.Timeout = timeout
			if !req.Persistent && timeout == 0 {
				sp.Timeout = parent.Spec.Timeout
			}
			if !req.Persistent {
				sp.Policy = sandbox.Policy{}
			}
			if len(req.Labels) > 0 {
				if sp.Labels == nil {
					sp.Labels = map[string]string{}
				}
				maps.Copy(sp.Labels, req.Labels)
			}
			if len(req.Env) > 0 {
				if sp.Env == nil {
					sp.Env = map[string]string{}
				}
				maps.Copy(sp.Env, req.Env)
			}
			if err := sp.Validate(); err != nil {
				errs[i] = err
				return
			}
			name := ""
			if req.NamePrefix != "" {
				name = fmt.Sprintf("%s-%d", req.NamePrefix, i+1)
			}
			now := m.e.Now()
			id := childIDs[i]
			child := &sandbox.Sandbox{ID: id, Name: name, Tenant: parent.Tenant, State: sandbox.StateCreating,
				Node: m.e.Node(), Spec: sp, CreatedAt: now, UpdatedAt: now, Cause: sandbox.CauseUser,
				Reason: "forked from " + parent.ID}
			errs[i] = m.e.Launch(ctx, child, actor, func() error {
				if err := cp.Materialize(ctx, child, stage.Name); err != nil {
					return err
				}
				return m.inherit(ctx, supervised, child.ID)
			})
			children[i] = child
		}()
	}
	for range n {
		<-done
	}
	var out []*sandbox.Sandbox
	for i, c := range children {
		if errs[i] == nil {
			out = append(out, c)
		}
	}
	m.e.Event(ctx, &sandbox.Event{SandboxID: parent.ID, Type: "fork", Actor: actor, Cause: sandbox.CauseUser,
		Outcome: "ok", Message: fmt.Sprintf("%d children, parent frozen %s", len(out), frozen.Round(time.Microsecond))})
	if err := errors.Join(errs...); err != nil {
		return out, frozen, err
	}
	return out, frozen, nil
}

// inherit records sps, a parent's supervised processes, as sandbox id's,
// not yet started: its first boot starts them (procs.Running).
func (m *Snapshots) inherit(ctx context.Context, sps []*store.SupervisedProcess, id string) error {
	for _, sp := range sps {
		cp := &store.SupervisedProcess{SandboxID: id, Key: sp.Key, Spec: sp.Spec, CreatedAt: m.e.Now()}
		if err := m.store.PutProcess(ctx, cp); err != nil {
			return fmt.Errorf("recording supervised process %s: %w", sp.Key, err)
		}
	}
	return nil
}

// capture is the backend's Capture with its contract kept whatever the
// backend does: release is never nil (a nil one deferred by the caller
// was a handler panic), a second call does nothing, and on an error
// there is nothing to release.
func capture(ctx context.Context, b node.Capturer, sb *sandbox.Sandbox, name string) (node.Capture, func(), error) {
	c, release, err := b.Capture(ctx, sb, name)
	if err != nil {
		if release != nil {
			release()
		}
		return c, func() {}, err
	}
	if release == nil {
		return c, func() {}, nil
	}
	return c, sync.OnceFunc(release), nil
}

// checkIDs accepts no pre-chosen ids or exactly n valid, distinct ones.
func checkIDs(ids []string, n int) error {
	if len(ids) == 0 {
		return nil
	}
	if len(ids) != n {
		return errdefs.Invalid("%d ids given for %d new objects", len(ids), n)
	}
	seen := map[string]bool{}
	for _, id := range ids {
		if !engine.ValidID(id) || seen[id] {
			return errdefs.Invalid("bad or repeated id %q", id)
		}
		seen[id] = true
	}
	return nil
}

// Children lists the live sandboxes forked from id.
func (m *Snapshots) Children(ctx context.Context, id string) []string {
	live, _, err := m.store.ListSandboxes(ctx, store.SandboxFilter{Owner: engine.Owner(ctx)}, store.Page{})
	if err != nil {
		return nil
	}
	var out []string
	for _, sb := range live {
		if sb.Spec.Parent == id {
			out = append(out, sb.ID)
		}
	}
	return out
}

// CreateSnapshot takes a named, crash-consistent snapshot of sandbox ref.
// ids, if given, is the snapshot's id (one, see ValidID).
func (m *Snapshots) CreateSnapshot(ctx context.Context, ref string, req *SnapshotRequest, actor string, ids ...string) (*store.Snapshot, error) {
	if req.Name != "" && !sandbox.ValidName(req.Name) {
		return nil, errdefs.Invalid("bad snapshot name %q", req.Name)
	}
	if err := checkIDs(ids, 1); err != nil {
		return nil, err
	}
	retention := req.Retention
	if err := engine.CheckDuration("retention_seconds", retention); err != nil {
		return nil, err
	}
	cp, err := m.capturer()
	if err != nil {
		return nil, err
	}
	var sn *store.Snapshot
	_, err = m.e.Op(ctx, ref, func(ctx context.Context, op *engine.Op, sb *sandbox.Sandbox) error {
		if sb.State != sandbox.StateRunning && sb.State != sandbox.StatePaused && sb.State != sandbox.StateStopped &&
			sb.State != sandbox.StateQuarantined {
			return sandbox.ErrWrongState("snapshot", sb)
		}
		existing, _, err := m.store.ListSnapshots(ctx, store.SnapshotFilter{Owner: store.AnyOwner, SandboxID: sb.ID}, store.Page{})
		if err != nil {
			return err
		}
		if len(existing) >= MaxSnapshotsPerSandbox {
			return errdefs.Exhausted("sandbox %s has %d snapshots, the limit; delete some first", sb.ID, len(existing))
		}
		id := engine.NewID()
		if len(ids) > 0 {
			id = ids[0]
		}
		name := req.Name
		if name == "" {
			name = sb.Hostname() + "-" + id[:6]
		}
		if _, err := m.store.GetSnapshotByName(ctx, store.OwnedBy(sb.Tenant), name); err == nil {
			return errdefs.Conflict("a snapshot named %q already exists", name)
		}
		// The snapshot's clones share the sandbox's data now, and may come
		// to hold all of it as the sandbox changes.
		if err := m.e.Admit(ctx, m.e.SandboxNeed(&sb.Spec), "a snapshot of "+sb.ID); err != nil {
			return err
		}
		c, release, err := capture(ctx, cp, sb, id)
		if err != nil {
			return err
		}
		defer release()
		// A capture no record keeps is dropped: now on an error, by the
		// sweep (doctor) after a crash, once it is older than the
		// backend's grace.
		err = failpoint.Inject("snapshot.after-capture")
		now := m.e.Now()
		sn = &store.Snapshot{ID: id, Name: name, Tenant: sb.Tenant, SandboxID: sb.ID, Template: sb.Spec.Template,
			Layers: sb.Spec.Layers, Spec: sb.Spec, Parent: sb.Spec.FromSnapshot, SizeBytes: c.SizeBytes, CreatedAt: now}
		if retention > 0 {
			sn.ExpiresAt = now.Add(retention)
		}
		if err == nil {
			err = m.store.CreateSnapshot(ctx, sn)
		}
		if err != nil {
			release()
			if derr := cp.DropCapture(id); derr != nil {
				m.log.Warn("removing an unrecorded snapshot's capture", "snapshot", id, "err", derr)
			}
			sn = nil
			return err
		}
		m.e.Event(ctx, &sandbox.Event{SandboxID: sb.ID, Type: "snapshot", Actor: actor, Cause: sandbox.CauseUser,
			Outcome: "ok", Message: "snapshot " + sn.ID + " (" + name + ")"})
		return nil
	})
	return sn, err
}

// GetSnapshot finds a snapshot by id or name.
func (m *Snapshots) GetSnapshot(ctx context.Context, ref string) (*store.Snapshot, error) {
	sn, err := m.store.GetSnapshot(ctx, engine.Owner(ctx), ref)
	if errors.Is(err, errdefs.ErrNotFound) {
		sn, err = m.store.GetSnapshotByName(ctx, engine.Owner(ctx), ref)
		if errors.Is(err, errdefs.ErrNotFound) {
			return nil, errdefs.NotFound("no snapshot %q", ref)
		}
	}
	return sn, err
}

// ListSnapshots lists a page of the snapshots of sandbox ref, or of all ("").
func (m *Snapshots) ListSnapshots(ctx context.Context, ref string, p store.Page) ([]*store.Snapshot, string, error) {
	id := ""
	if ref != "" {
		sb, err := m.e.Get(ctx, ref)
		if err != nil {
			return nil, "", err
		}
		id = sb.ID
	}
	return m.store.ListSnapshots(ctx, store.SnapshotFilter{Owner: engine.Owner(ctx), SandboxID: id}, p)
}

// DeleteSnapshot removes a snapshot and its data.
func (m *Snapshots) DeleteSnapshot(ctx context.Context, ref string) error {
	sn, err := m.GetSnapshot(ctx, ref)
	if err != nil {
		return err
	}
	cp, err := m.capturer()
	if err != nil {
		return err
	}
	if err := cp.DropCapture(sn.ID); err != nil {
		return err
	}
	return m.store.DeleteSnapshot(ctx, sn.ID)
}

// RestoreSnapshot returns the sandbox a snapshot was taken of to the
// snapshot's state, byte for byte, in place. A running sandbox restarts.
func (m *Snapshots) RestoreSnapshot(ctx context.Context, ref, actor string) (*sandbox.Sandbox, error) {
	sn, err := m.GetSnapshot(ctx, ref)
	if err != nil {
		return nil, err
	}
	return m.e.Op(ctx, sn.SandboxID, func(ctx context.Context, op *engine.Op, sb *sandbox.Sandbox) error {
		wasRunning := sb.State == sandbox.StateRunning || sb.State == sandbox.StatePaused
		if !wasRunning && sb.State != sandbox.StateStopped {
			return sandbox.ErrWrongState("restore", sb)
		}
		if wasRunning {
			if err := op.Stop(ctx, sb, sandbox.CauseUser, actor, "restore snapshot "+sn.Name); err != nil {
				return err
			}
		}
		cp, err := m.capturer()
		if err == nil {
			err = failpoint.Inject("restore.before-revert")
		}
		if err == nil {
			err = cp.Revert(ctx, sb, sn.ID)
		}
		if err != nil {
			// Undone as far as it can be: a sandbox that ran runs again
			// (on the files as the failed revert left them).
			if wasRunning {
				if serr := op.Start(ctx, sb, sandbox.CauseReconciler, actor, "restore of "+sn.Name+" failed"); serr != nil {
					err = errors.Join(err, fmt.Errorf("starting again: %w", serr))
				}
			}
			return fmt.Errorf("restoring snapshot %s: %w", sn.Name, err)
		}
		m.e.Event(ctx, &sandbox.Event{SandboxID: sb.ID, Type: "restore", Actor: actor, Cause: sandbox.CauseUser,
			Outcome: "ok", Message: "restored snapshot " + sn.ID + " (" + sn.Name + ")"})
		if wasRunning {
			return op.Start(ctx, sb, sandbox.CauseUser, actor, "restored snapshot "+sn.Name)
		}
		return nil
	})
}

// FromSnapshot makes a new sandbox from req.Snapshot's state.
func (m *Snapshots) FromSnapshot(ctx context.Context, req *engine.CreateRequest, opt engine.CreateOptions) (*sandbox.Sandbox, error) {
	sn, err := m.GetSnapshot(ctx, req.Snapshot)
	if err != nil {
		return nil, err
	}
	if req.Template != "" && req.Template != sn.Template {
		return nil, errdefs.Invalid("a sandbox from a snapshot has the snapshot's template (%s)", sn.Template)
	}
	cp, err := m.capturer()
	if err != nil {
		return nil, err
	}
	sp := childSpec(sn.Spec)
	sp.FromSnapshot, sp.Parent = sn.ID, ""
	sp.Persistent = req.Persistent || sn.Spec.Persistent
	if req.Env != nil {
		sp.Env = req.Env
	}
	if req.Labels != nil {
		sp.Labels = req.Labels
	}
	if req.Timeout > 0 {
		if err := engine.CheckDuration("timeout_seconds", req.Timeout); err != nil {
			return nil, err
		}
		sp.Timeout = req.Timeout
	}
	if sp.Policy, err = engine.CheckPolicy(req.Policy); err != nil {
		return nil, err
	}
	if err := sp.Validate(); err != nil {
		return nil, err
	}
	now := m.e.Now()
	id, err := opt.ReserveID()
	if err != nil {
		return nil, err
	}
	if err := m.e.PrepareNetwork(ctx, &sp, id, nil); err != nil {
		return nil, err
	}
	sb := &sandbox.Sandbox{ID: id, Name: req.Name, Tenant: opt.Tenant, State: sandbox.StateCreating,
		Node: m.e.Node(), Spec: sp, CreatedAt: now, UpdatedAt: now, Cause: sandbox.CauseUser,
		Reason: "from snapshot " + sn.Name}
	if err := m.e.Launch(ctx, sb, opt.Actor, func() error { return cp.Materialize(ctx, sb, sn.ID) }); err != nil {
		return nil, err
	}
	return sb, nil
}

// Expire deletes snapshots past their retention.
func (m *Snapshots) Expire(ctx context.Context) {
	snaps, _, err := m.store.ListSnapshots(ctx, store.SnapshotFilter{Owner: store.AnyOwner}, store.Page{})
	if err != nil {
		return
	}
	now := m.e.Now()
	for _, sn := range snaps {
		if !sn.ExpiresAt.IsZero() && !now.Before(sn.ExpiresAt) {
			if err := m.DeleteSnapshot(ctx, sn.ID); err != nil {
				m.log.Warn("expiring snapshot", "snapshot", sn.ID, "err", err)
			}
		}
	}
}

// Export writes a tar of exactly the named paths of sandbox ref, each
// under its full path.
func (m *Snapshots) Export(ctx context.Context, ref string, paths []string, w io.Writer, actor string) error {
	if len(paths) == 0 || len(paths) > 1000 {
		return errdefs.Invalid("give between 1 and 1000 paths")
	}
	for _, p := range paths {
		if !strings.HasPrefix(p, "/") || strings.IndexByte(p, 0) >= 0 {
			return errdefs.Invalid("export paths must be absolute: %q", p)
		}
	}
	f, err := m.files.Files(ctx, ref, false, actor)
	if err != nil {
		return err
	}
	defer f.Close()
	for _, p := range paths { // fail before writing anything
		if _, err := f.Stat(ctx, p); err != nil {
			return err
		}
	}
	tw := tar.NewWriter(w)
	for _, p := range paths {
		clean := path.Clean(p)
		prefix := strings.TrimPrefix(path.Dir(clean), "/")
		pr, pw := io.Pipe()
		go func() { pw.CloseWithError(f.ReadTar(ctx, clean, pw)) }()
		tr := tar.NewReader(pr)
		for {
			hdr, err := tr.Next()
			if err == io.EOF {
				break
			}
			if err != nil {
				pr.CloseWithError(err)
				return err
			}
			if prefix != "" {
				hdr.Name = prefix + "/" + hdr.Name
			}
			if err := tw.WriteHeader(hdr); err != nil {
				pr.CloseWithError(err)
				return err
			}
			if _, err := io.Copy(tw, tr); err != nil {
				pr.CloseWithError(err)
				return err
			}
		}
	}
	return tw.Close()
}
