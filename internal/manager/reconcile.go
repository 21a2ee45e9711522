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
	"github.com/berth-sh/berth/internal/network"
	"github.com/berth-sh/berth/internal/overlay"
	"github.com/berth-sh/berth/internal/runtime"
	"github.com/berth-sh/berth/internal/sandbox"
	"github.com/berth-sh/berth/internal/store"
)

const actorReconciler = "reconciler"

// Recover reconciles the records with the host once (adopting live
// sandboxes, finishing interrupted creates and deletes, removing orphans)
// and then runs the reconciler in the background until Close.
func (m *Manager) Recover(ctx context.Context) error {
	if err := m.recover(ctx); err != nil {
		return err
	}
	if !failpoint.Enabled("startup.skip-sweep") {
		if _, err := m.doctor(ctx, true, true); err != nil {
			m.log.Warn("removing orphans", "err", err)
		}
	}
	m.wg.Add(4)
	go m.idLoop()
	go m.loop()
	go m.recordFlows()
	go m.recordEvents()
	return nil
}

// Close stops background work. Sandboxes keep running; if none is left,
// the daemon's cgroup parent is removed too.
func (m *Manager) Close() {
	select {
	case <-m.stopCh:
	default:
		close(m.stopCh)
	}
	m.wg.Wait()
	m.closeNetwork(context.Background())
	if err := closeShare(m.cfg.DataDir); err != nil {
		m.log.Warn("unmounting the share", "err", err)
	}
	sbMounts, _ := overlay.MountsUnder(filepath.Join(m.cfg.DataDir, "sandboxes"))
	if err := m.pool.Close(len(sbMounts) > 0); err != nil {
		m.log.Warn("unmounting the storage pool", "err", err)
	}
	if len(cgroups.Children(m.CgroupParent())) == 0 {
		for _, p := range cgroups.Paths(m.CgroupParent()) {
			_ = os.Remove(p) // rmdir: fails harmlessly if a sandbox appeared
		}
	}
}

func (m *Manager) wakeReconciler() {
	select {
	case m.kick <- struct{}{}:
	default:
	}
}

// recover brings every live record to a resting state after a start.
func (m *Manager) recover(ctx context.Context) error {
	live, _, err := m.store.ListSandboxes(ctx, store.SandboxFilter{Owner: store.AnyOwner, Node: m.cfg.Node}, store.Page{})
	if err != nil {
		return err
	}
	for _, sb := range live {
		m.recoverOne(ctx, sb)
	}
	if live, _, err = m.store.ListSandboxes(ctx, store.SandboxFilter{Owner: store.AnyOwner, Node: m.cfg.Node}, store.Page{}); err != nil {
		return err
	}
	return m.recoverNetwork(ctx, live)
}

func (m *Manager) recoverOne(ctx context.Context, sb *sandbox.Sandbox) {
	unlock := m.locks.Lock(sb.ID)
	defer unlock()
	log := m.log.With("sandbox", sb.ID, "state", sb.State)
	destroy := func(reason string) {
		log.Info("reconciler destroying sandbox", "reason", reason)
		if err := m.destroyLocked(ctx, sb, sandbox.CauseReconciler, actorReconciler, reason); err != nil {
			log.Warn("reconciler teardown", "err", err)
		}
	}
	switch {
	case sb.State == sandbox.StateDeleting || sb.State == sandbox.StateFailed:
		destroy(sb.Reason)
	case sb.Spec.OneShot:
		destroy("client went away (daemon restart)")
	case sb.State == sandbox.StateCreating:
		var err error
		if !m.alive(ctx, sb) {
			err = m.provision(ctx, sb)
		}
		if err != nil {
			log.Warn("interrupted create cannot be finished", "err", err)
			m.fail(ctx, sb, actorReconciler, err)
			return
		}
		if err := m.transition(ctx, sb, sandbox.StateRunning, sandbox.CauseReconciler, actorReconciler, "create finished after restart"); err != nil {
			log.Warn("recording finished create", "err", err)
		}
	case sb.State == sandbox.StateRunning || sb.State == sandbox.StatePaused ||
		(sb.State == sandbox.StateQuarantined && sb.PrevState != sandbox.StateStopped):
		if sb.State != sandbox.StateRunning {
			if st, err := m.rtFor(sb).State(ctx, sb.ID); err == nil && (st.Status == runtime.StatusPaused || st.Status == runtime.StatusRunning) {
				log.Info("adopted paused sandbox")
				return
			}
		} else {
			// Frozen under a running record: a pause, fork or snapshot
			// the daemon died in the middle of (the record is written
			// after the freeze, and is the intent). A frozen sandbox is
			// alive: thaw it, as its record says it runs.
			if st, err := m.rtFor(sb).State(ctx, sb.ID); err == nil && st.Status == runtime.StatusPaused {
				if err := m.rtFor(sb).Resume(ctx, sb.ID); err != nil {
					log.Warn("thawing a sandbox left frozen", "err", err)
				} else {
					log.Info("thawed a sandbox left frozen by an interrupted operation")
					m.event(ctx, &sandbox.Event{SandboxID: sb.ID, Type: "thaw", Actor: actorReconciler,
						Cause: sandbox.CauseReconciler, Outcome: "ok", Message: "left frozen by an operation the daemon did not finish; thawed after restart"})
				}
			}
			if m.alive(ctx, sb) {
				log.Info("adopted running sandbox")
				return
			}
		}
		if !sb.Spec.Persistent {
			destroy("sandbox died while the daemon was down")
			return
		}
		// A persistent sandbox's files outlive its processes (a host
		// reboot, say): bring it back as it was asked to be.
		log.Info("restarting persistent sandbox whose processes are gone")
		wasPaused := sb.State == sandbox.StatePaused
		if sb.State == sandbox.StateQuarantined {
			log.Warn("quarantined sandbox lost its processes; it stays quarantined, stopped")
			_ = m.stopHost(ctx, sb)
			sb.PrevState = sandbox.StateStopped
			_ = m.store.UpdateSandbox(ctx, sb)
			return
		}
		if err := m.stopLocked(ctx, sb, sandbox.CauseReconciler, actorReconciler, "processes gone after restart"); err != nil {
			log.Warn("stopping dead sandbox", "err", err)
			return
		}
		if err := m.startLocked(ctx, sb, sandbox.CauseReconciler, actorReconciler, "restarted after its processes were lost"); err != nil {
			log.Warn("restarting persistent sandbox", "err", err)
			return
		}
		if wasPaused {
			_ = m.pauseLocked(ctx, sb, sandbox.CauseReconciler, actorReconciler, "paused again after restart")
		}
	case sb.State == sandbox.StateStopping:
		if err := m.stopLocked(ctx, sb, sandbox.CauseReconciler, actorReconciler, "stop finished after restart"); err != nil {
			log.Warn("finishing stop", "err", err)
		}
	case sb.State == sandbox.StateStarting:
		if err := m.startLocked(ctx, sb, sandbox.CauseReconciler, actorReconciler, "start finished after restart"); err != nil {
			log.Warn("finishing start", "err", err)
		}
	case sb.State == sandbox.StateStopped:
		// Nothing may run or stay mounted for a stopped sandbox.
		if err := m.stopHost(ctx, sb); err != nil {
			log.Warn("cleaning stopped sandbox", "err", err)
		}
	}
}

// alive reports whether sb's container runs and its agent answers.
func (m *Manager) alive(ctx context.Context, sb *sandbox.Sandbox) bool {
	id := sb.ID
	st, err := m.rtFor(sb).State(ctx, id)
	if err != nil || st.Status != "running" {
		return false
	}
	pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	_, err = m.agentFor(id).Ping(pctx)
	return err == nil
}

func (m *Manager) loop() {
	defer m.wg.Done()
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-m.stopCh:
			return
		case <-timer.C:
		case <-m.kick:
		}
		next := m.tick(context.Background())
		wait := m.cfg.ReconcileInterval
		if !next.IsZero() {
			if d := time.Until(next); d < wait {
				wait = max(d, time.Millisecond)
			}
		}
		if !timer.Stop() {
			select {
			case <-timer.C:
			default:
			}
		}
		timer.Reset(wait)
	}
}

// purgeRetained runs the retention sweep: a few bounded batches per call,
// so one tick never holds the store for long; what is left waits for the
// next.
func (m *Manager) purgeRetained(ctx context.Context, now time.Time) {
	if m.cfg.Retention <= 0 {
		return
	}
	req := store.PurgeRequest{Before: now.Add(-m.cfg.Retention), Webhooks: m.cfg.Webhooks}
	for range 10 {
		r, err := m.store.Purge(ctx, req)
		if err != nil {
			m.log.Warn("reconciler: retention sweep", "err", err)
			return
		}
		if r != (store.PurgeResult{}) {
			m.log.Debug("reconciler: purged old records", "sandboxes", r.Sandboxes, "events", r.Events,
				"flows", r.Flows, "volumes", r.Volumes, "deliveries", r.Deliveries)
		}
		if !r.Full(req.Limit) {
			return
		}
	}
}

// tick enforces policies, stores activity, retries unfinished teardowns
// and notices dead sandboxes. It returns the next deadline it knows of.
func (m *Manager) tick(ctx context.Context) time.Time {
	m.ensureReserve()
	live, _, err := m.store.ListSandboxes(ctx, store.SandboxFilter{Owner: store.AnyOwner, Node: m.cfg.Node}, store.Page{})
	if err != nil {
		m.log.Error("reconciler: listing sandboxes", "err", err)
		return time.Time{}
	}
	now := m.now()
	var next time.Time
	if m.snapTick++; m.snapTick%5 == 0 {
		m.expireSnapshots(ctx)
		if n, err := m.store.PurgeIdempotencyKeys(ctx, now); err != nil {
			m.log.Warn("reconciler: purging expired idempotency keys", "err", err)
		} else if n > 0 {
			m.log.Debug("reconciler: purged expired idempotency keys", "n", n)
		}
		m.purgeRetained(ctx, now)
	}
	m.refillPools(ctx, live)
	m.watchReadOnly(ctx, live)
	for _, sb := range live {
		if sb.State == sandbox.StateRunning && sb.Spec.Policy.IdleTimeout > 0 {
			// Open exec sessions and busy processes are activity.
			if m.openExecs(sb.ID) > 0 || m.busy(sb) {
				m.touch(sb.ID)
			}
		}
		m.flushActivity(ctx, sb)
		if due, ok := sandbox.Next(sb, m.lastActivity(sb)); ok {
			if !now.Before(due.At) {
				if !m.async(sb.ID, func(ctx context.Context, cur *sandbox.Sandbox) { m.enforce(ctx, cur) }) {
					// Busy with another operation: look again shortly.
					due.At = now.Add(50 * time.Millisecond)
				}
			}
			if now.Before(due.At) && (next.IsZero() || due.At.Before(next)) {
				next = due.At
			}
		}
		switch sb.State {
		case sandbox.StateDeleting, sandbox.StateFailed:
			m.async(sb.ID, func(ctx context.Context, sb *sandbox.Sandbox) {
				if sb.State == sandbox.StateDeleting || sb.State == sandbox.StateFailed {
					_ = m.destroyLocked(ctx, sb, sandbox.CauseReconciler, actorReconciler, sb.Reason)
				}
			})
		case sandbox.StateStopping:
			m.async(sb.ID, func(ctx context.Context, sb *sandbox.Sandbox) {
				if sb.State == sandbox.StateStopping {
					_ = m.stopLocked(ctx, sb, sandbox.CauseReconciler, actorReconciler, sb.Reason)
				}
			})
		case sandbox.StateRunning:
			if len(cgroups.Procs(m.paths(sb.ID).cgroup)) == 0 {
				m.async(sb.ID, func(ctx context.Context, sb *sandbox.Sandbox) {
					if sb.State != sandbox.StateRunning || m.alive(ctx, sb) {
						return
					}
					reason := "sandbox exited unexpectedly: " + strings.TrimSpace(m.initLogTail(sb.ID, 256, 50*time.Millisecond))
					if sb.Spec.Persistent {
						_ = m.stopLocked(ctx, sb, sandbox.CauseReconciler, actorReconciler, reason)
						return
					}
					_ = m.destroyLocked(ctx, sb, sandbox.CauseReconciler, actorReconciler, reason)
				})
			}
		}
	}
	return next
}

// enforce takes the policy action due for sb, if it is still due.
func (m *Manager) enforce(ctx context.Context, sb *sandbox.Sandbox) {
	due, ok := sandbox.Next(sb, m.lastActivity(sb))
	if !ok || m.now().Before(due.At) {
		return
	}
	// Last look before idling: a command may have just started.
	if due.Policy == "idle" && (m.openExecs(sb.ID) > 0 || m.busy(sb)) {
		m.touch(sb.ID)
		return
	}
	actor := "policy:" + due.Policy
	reason := fmt.Sprintf("%s policy: %s", due.Policy, due.Action)
	switch due.Policy {
	case "timeout":
		reason = fmt.Sprintf("timeout %s reached", sb.Spec.Timeout)
	case "idle":
		reason = fmt.Sprintf("idle for %s", sb.Spec.Policy.IdleTimeout)
	case "max_age":
		reason = fmt.Sprintf("max age %s reached", sb.Spec.Policy.MaxAge)
	case "retention":
		reason = fmt.Sprintf("stopped for longer than its retention %s", sb.Spec.Policy.Retention)
	}
	var err error
	switch due.Action {
	case sandbox.ActionPause:
		err = m.pauseLocked(ctx, sb, sandbox.CausePolicy, actor, reason)
	case sandbox.ActionStop:
		if sb.State == sandbox.StatePaused || sb.State == sandbox.StateRunning {
			err = m.stopLocked(ctx, sb, sandbox.CausePolicy, actor, reason)
		}
	case sandbox.ActionDelete:
		err = m.destroyLocked(ctx, sb, sandbox.CausePolicy, actor, reason)
	}
	if err != nil {
		m.log.Warn("policy action failed", "sandbox", sb.ID, "policy", due.Policy, "action", due.Action, "err", err)
	}
}

// flushActivity stores activity seen since the record was last written,
// so idle timers survive a restart. Writes are coalesced to one a second.
func (m *Manager) flushActivity(ctx context.Context, sb *sandbox.Sandbox) {
	m.mu.Lock()
	t, ok := m.activity[sb.ID]
	m.mu.Unlock()
	if !ok || !t.After(sb.LastActivityAt.Add(time.Second)) {
		return
	}
	m.async(sb.ID, func(ctx context.Context, cur *sandbox.Sandbox) {
		if !cur.State.Live() || !t.After(cur.LastActivityAt) {
			return
		}
		cur.LastActivityAt = t
		if err := m.store.UpdateSandbox(ctx, cur); err == nil {
			m.mu.Lock()
			if m.activity[cur.ID].Equal(t) {
				delete(m.activity, cur.ID)
			}
			m.mu.Unlock()
		}
	})
}

// async runs fn on a fresh copy of sandbox id under its lock, unless an
// operation already holds the lock; it reports whether fn was started.
func (m *Manager) async(id string, fn func(context.Context, *sandbox.Sandbox)) bool {
	unlock, ok := m.locks.TryLock(id)
	if !ok {
		return false
	}
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		defer unlock()
		ctx := context.Background()
		sb, err := m.store.GetSandbox(ctx, store.AnyOwner, id)
		if err != nil {
			return
		}
		fn(ctx, sb)
	}()
	return true
}

// Doctor lists orphans and leaks: host resources with no live record, and
// live records whose host resources are gone. With fix it removes orphans.
func (m *Manager) Doctor(ctx context.Context, fix bool) (*api.DoctorReport, error) {
	return m.doctor(ctx, fix, false)
}

// doctor is Doctor; atStart says it runs in the start-up sweep, right after
// thawPool thawed every filesystem of the pool, so that they are not probed
// for a freeze (a flush each) a second time.
func (m *Manager) doctor(ctx context.Context, fix, atStart bool) (*api.DoctorReport, error) {
	all, _, err := m.store.ListSandboxes(ctx, store.SandboxFilter{Owner: store.AnyOwner, Node: m.cfg.Node}, store.Page{})
	if err != nil {
		return nil, err
	}
	live := map[string]*sandbox.Sandbox{}
	for _, sb := range all {
		live[sb.ID] = sb
	}
	rep := &api.DoctorReport{Runtime: strings.Join(m.RuntimeNames(), ","), Findings: []api.DoctorFinding{}}
	add := func(kind, id, detail string, fixFn func() error) {
		f := api.DoctorFinding{Kind: kind, ID: id, Detail: detail}
		if fix && fixFn != nil {
			if err := fixFn(); err != nil {
				f.Error = err.Error()
			} else {
				f.Fixed = true
			}
		}
		rep.Findings = append(rep.Findings, f)
	}
	// The locks keep doctor from racing a create or delete in progress;
	// the record is read again under the lock, since the list above may be
	// older than an operation that has just finished.
	busy := func(id string) bool {
		unlock, ok := m.locks.TryLock(id)
		if !ok {
			return true
		}
		defer unlock()
		sb, err := m.store.GetSandbox(ctx, store.AnyOwner, id)
		switch {
		case err == nil && sb.State.Live() && m.mine(sb):
			live[id] = sb
		case err == nil || errors.Is(err, errdefs.ErrNotFound):
			delete(live, id)
		default:
			return true // cannot tell: leave it alone
		}
		return false
	}

	for _, name := range m.RuntimeNames() {
		rt := m.runtimes[name]
		containers, err := rt.List(ctx)
		if err != nil {
			add("runtime", "", name+": listing containers: "+err.Error(), nil)
		}
		for _, c := range containers {
			if !busy(c.ID) && (live[c.ID] == nil || m.rtFor(live[c.ID]) != rt) {
				add("runtime", c.ID, fmt.Sprintf("%s container %s (%s) has no live sandbox", name, c.ID, c.Status), func() error {
					return rt.Delete(ctx, c.ID)
				})
			}
		}
	}
	for _, id := range cgroups.Children(m.CgroupParent()) {
		if !busy(id) && live[id] == nil {
			rel := m.CgroupParent() + "/" + id
			add("cgroup", id, rel, func() error { return cgroups.Destroy(rel) })
		}
	}
	sbRoot := filepath.Join(m.cfg.DataDir, "sandboxes")
	// Volumes mounted for no running sandbox of ours.
	if vmounts, err := overlay.MountsUnder(m.volumes.Root()); err == nil {
		running := map[string]bool{}
		for _, sb := range live {
			if sb.State == sandbox.StateRunning || sb.State == sandbox.StatePaused || sb.State == sandbox.StateQuarantined ||
				sb.State == sandbox.StateCreating || sb.State == sandbox.StateStarting {
				for _, vm := range sb.Spec.Volumes {
					running[vm.VolumeID] = true
				}
			}
		}
		for _, mp := range vmounts {
			vid, _, _ := strings.Cut(strings.TrimPrefix(mp, m.volumes.Root()+"/"), "/")
			if running[vid] {
				continue
			}
			// Look again at the sandbox that holds the volume: it may have
			// started since the list was read, or be stopping right now.
			if v, err := m.store.GetVolume(ctx, store.AnyOwner, vid); err == nil && v.SandboxID != "" {
				if busy(v.SandboxID) {
					continue
				}
				if sb := live[v.SandboxID]; sb != nil && sb.State != sandbox.StateStopped {
					continue
				}
			}
			add("mount", vid, mp, func() error { return overlay.Unmount(mp) })
		}
	}
	mounts, _ := overlay.MountsUnder(sbRoot)
	slices.Reverse(mounts) // a sandbox's root before the idmapped layers under it
	for _, mp := range mounts {
		id, _, _ := strings.Cut(strings.TrimPrefix(mp, sbRoot+"/"), "/")
		if !busy(id) && live[id] == nil {
			add("mount", id, mp, func() error { return overlay.Unmount(mp) })
		}
	}
	if ents, err := os.ReadDir(m.scratch.Root()); err == nil {
		for _, e := range ents {
			id := e.Name()
			if !busy(id) && live[id] == nil {
				add("dir", id, filepath.Join(m.scratch.Root(), id), func() error { return m.removeScratch(id) })
			}
		}
	}
	// Writable-layer filesystems mounted for a sandbox that is not running.
	if smounts, err := overlay.MountsUnder(m.scratch.Root()); err == nil {
		for _, mp := range smounts {
			id, _, _ := strings.Cut(strings.TrimPrefix(mp, m.scratch.Root()+"/"), "/")
			if busy(id) {
				continue
			}
			if sb := live[id]; sb == nil || sb.State != sandbox.StateStopped {
				continue // none: the dir finding above removes it; else in use
			}
			add("mount", id, mp, func() error { return overlay.Unmount(mp) })
		}
	}
	if vids, err := m.volumes.IDs(); err == nil {
		vols, _, _ := m.store.ListVolumes(ctx, store.VolumeFilter{Owner: store.AnyOwner}, store.Page{})
		known := map[string]bool{}
		for _, v := range vols {
			known[v.ID] = true
		}
		// A workspace volume being made for a sandbox in creation has
		// its image before its record.
		for _, sb := range live {
			for _, vm := range sb.Spec.Volumes {
				known[vm.VolumeID] = true
			}
		}
		for _, vid := range vids {
			if !known[vid] {
				add("volume", vid, m.volumes.Image(vid), func() error { return m.volumes.Delete(vid) })
			}
		}
	}
	m.doctorIDs(ctx, busy, live, add)
	dirs, _ := m.sandboxDirs()
	for _, id := range dirs {
		if !busy(id) && live[id] == nil {
			add("dir", id, filepath.Join(sbRoot, id), func() error { return m.teardown(ctx, &sandbox.Sandbox{ID: id}) })
		}
	}
	for id := range live {
		if busy(id) || live[id] == nil {
			continue
		}
		sb := live[id]
		switch sb.State {
		case sandbox.StateRunning:
			if _, err := m.rtFor(sb).State(ctx, id); errors.Is(err, errdefs.ErrNotFound) {
				add("record", id, "sandbox is running but has no container", nil)
			}
		case sandbox.StateDeleting, sandbox.StateFailed:
			add("record", id, fmt.Sprintf("sandbox is %s: teardown pending (%s)", sb.State, sb.Error), nil)
		}
	}
	m.doctorClones(ctx, add)
	m.doctorFrozen(ctx, live, busy, !atStart, add)
	m.doctorNetwork(ctx, live, fix, add)
	rep.Healthy = true
	for _, f := range rep.Findings {
		if !f.Fixed {
			rep.Healthy = false
		}
	}
	return rep, nil
}

// doctorNetwork counts this daemon's network objects (veths, per-sandbox
// chains) against its attached egress sandboxes; with fix, removes the
// extra ones.
func (m *Manager) doctorNetwork(ctx context.Context, live map[string]*sandbox.Sandbox, fix bool, add func(kind, id, detail string, fixFn func() error)) {
	if m.netIfUp() == nil && !network.Exists(m.cfg.Instance) {
		return
	}
	n, err := m.net(ctx)
	if err != nil {
		add("network", "", err.Error(), nil)
		return
	}
	attached := map[string]bool{}
	for id, sb := range live {
		if sb.Spec.Network == "egress" && (sb.State == sandbox.StateRunning || sb.State == sandbox.StatePaused ||
			sb.State == sandbox.StateQuarantined || sb.State == sandbox.StateCreating || sb.State == sandbox.StateStarting) {
			attached[id] = true
		}
	}
	ifaces, objs, err := n.Resources()
	if err != nil {
		add("network", "", "listing network objects: "+err.Error(), nil)
		return
	}
	veths, chains := 0, 0
	for _, i := range ifaces {
		if i != n.Bridge() {
			veths++
		}
	}
	for _, o := range objs {
		if strings.HasPrefix(o, "chain:") && strings.Contains(o, "/sb-") {
			chains++
		}
	}
	if veths > len(attached) || chains > len(attached) {
		add("network", "", fmt.Sprintf("%d veths and %d sandbox chains for %d attached egress sandboxes", veths, chains, len(attached)), func() error {
			_, err := n.Prune(ctx, func(id string) bool { return attached[id] })
			return err
		})
	}
}
