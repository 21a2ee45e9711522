package reconcile

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/berth-sh/berth/internal/engine"
	"github.com/berth-sh/berth/internal/engine/pools"
	"github.com/berth-sh/berth/internal/engine/snapshots"
	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/internal/failpoint"
	"github.com/berth-sh/berth/internal/interp"
	"github.com/berth-sh/berth/internal/leader"
	"github.com/berth-sh/berth/internal/node"
	"github.com/berth-sh/berth/internal/sandbox"
	"github.com/berth-sh/berth/internal/store"
)

const actorReconciler = "reconciler"

// BuildLabel marks a template build's sandbox (engine/templates).
const BuildLabel = "berth.build"

// Reconciler drives the records and the host to agree: at start it
// adopts, finishes and cleans up after restarts and crashes; then it
// enforces policies from stored timestamps, retries unfinished
// teardowns, notices dead sandboxes, refills warm pools, expires
// snapshots and runs doctor on demand.
type Reconciler struct {
	e         engine.Host
	store     store.Store
	node      node.Backend
	log       *slog.Logger
	pools     *pools.Warm
	snapshots *snapshots.Snapshots
	interval  time.Duration
	snapTick  int // counts ticks; snapshots expire every few

	// The orphan sweep of a shared node (sweepShared): when it last ran,
	// under which lease epoch, and whether one runs now.
	swept      time.Time
	sweptEpoch int64
	sweeping   atomic.Bool

	// classWait are the sandboxes recovery left alone because their
	// runtime class was not available (classAbsent); each tick recovers
	// those whose class has come since.
	classMu   sync.Mutex
	classWait map[string]string // sandbox id: its class
}

// New returns the reconciler of e, with the features it tends.
func New(e engine.Host, w *pools.Warm, sn *snapshots.Snapshots) *Reconciler {
	return &Reconciler{e: e, store: e.Store(), node: e.Backend(), log: e.Log(), pools: w, snapshots: sn,
		interval: e.Config().ReconcileInterval}
}

// Recover reconciles the records (the engine running: Engine.Run)
// with the host once (adopting live sandboxes, finishing interrupted
// creates and deletes, removing orphans) and then runs the reconciler in
// the background until Close.
func (m *Reconciler) Recover(ctx context.Context) error {
	// Recovery assumes the node is this daemon's: true of the local
	// backend (leader.Always). Replicas sharing a node do not recover at
	// start: the others are alive, and their creates in flight are not
	// interrupted ones. The lease holder's passes retry teardowns and
	// stops, notice dead sandboxes and finish what a replica that is gone
	// left in flight (orphans) for all of them.
	if _, ok := m.e.Config().NodeLease.Held(); !ok || !m.e.Config().NodeLease.Status().Trivial {
		m.log.Info("node shared with other replicas: start-up recovery and sweep left to the lease holder's passes",
			"lease", m.e.Config().NodeLease.Status().Name)
		m.e.Go(func(context.Context) { m.loop() })
		return nil
	}
	if err := m.recover(ctx); err != nil {
		return err
	}
	if !failpoint.Enabled("startup.skip-sweep") {
		if _, err := m.doctor(ctx, true, true); err != nil {
			m.log.Warn("removing orphans", "err", err)
		}
	}
	m.e.Go(func(context.Context) { m.loop() })
	return nil
}

// recover brings every live record to a resting state after a start.
func (m *Reconciler) recover(ctx context.Context) error {
	live, _, err := m.store.ListSandboxes(ctx, store.SandboxFilter{Owner: store.AnyOwner, Node: m.e.Node()}, store.Page{})
	if err != nil {
		return err
	}
	for _, sb := range live {
		m.recoverOne(ctx, sb)
	}
	if live, _, err = m.store.ListSandboxes(ctx, store.SandboxFilter{Owner: store.AnyOwner, Node: m.e.Node()}, store.Page{}); err != nil {
		return err
	}
	return m.node.Recover(ctx, live)
}

func (m *Reconciler) recoverOne(ctx context.Context, sb *sandbox.Sandbox) {
	op, unlock := m.e.Lock(sb.ID)
	defer unlock()
	m.recoverLocked(ctx, op, sb, "after restart", "client went away (daemon restart)", "daemon was down")
}

// recoverLocked brings sb to a resting state: its create, start, stop or
// delete finished, a one-shot sandbox (whose client is gone) destroyed, a
// dead one restarted or destroyed. after ends the reasons recorded ("after
// restart"); oneShot is a one-shot sandbox's; down says when a dead
// sandbox died. The caller holds sb's lock.
func (m *Reconciler) recoverLocked(ctx context.Context, op *engine.Op, sb *sandbox.Sandbox, after, oneShot, down string) {
	log := m.log.With("sandbox", sb.ID, "state", sb.State)
	if m.classAbsent(sb) {
		// Judged by a runtime that does not know it, a running gVisor
		// sandbox would look gone: destroyed, or started again under
		// another class. It is left as it is until its class comes.
		log.Warn("its runtime class is not available now; left as it is until it is", "runtime", sb.Spec.Runtime)
		m.classMu.Lock()
		if m.classWait == nil {
			m.classWait = map[string]string{}
		}
		m.classWait[sb.ID] = sb.Spec.Runtime
		m.classMu.Unlock()
		return
	}
	destroy := func(reason string) {
		log.Info("reconciler destroying sandbox", "reason", reason)
		done := m.e.AuditSystem(ctx, sb, actorReconciler, "cleanup")
		err := op.Destroy(ctx, sb, sandbox.CauseReconciler, actorReconciler, reason)
		done(err)
		if err != nil {
			log.Warn("reconciler teardown", "err", err)
		}
	}
	switch {
	case sb.State == sandbox.StateDeleting || sb.State == sandbox.StateFailed:
		destroy(sb.Reason)
	case sb.Spec.OneShot:
		destroy(oneShot)
	case sb.Spec.Labels[BuildLabel] == "1":
		// A template build runs in the daemon that started it: its
		// sandbox outlived the build, which failed with that daemon.
		destroy("its template build ended when the daemon that ran it stopped (" + down + "); the build failed")
	case node.Hibernated(m.node, sb) && (sb.State == sandbox.StateRunning || sb.State == sandbox.StatePaused ||
		sb.State == sandbox.StateStopping):
		// The checkpoint completed (its marker is written only then),
		// but the daemon died before the record said so.
		m.finishHibernate(ctx, op, sb, log)
	case sb.State == sandbox.StateCreating:
		var err error
		if !m.e.Alive(ctx, sb) {
			err = op.Provision(ctx, sb)
		}
		if err != nil {
			log.Warn("interrupted create cannot be finished", "err", err)
			op.Fail(ctx, sb, actorReconciler, err)
			return
		}
		if err := op.Transition(ctx, sb, sandbox.StateRunning, sandbox.CauseReconciler, actorReconciler, "create finished "+after); err != nil {
			log.Warn("recording finished create", "err", err)
		}
	case sb.State == sandbox.StateRunning || sb.State == sandbox.StatePaused ||
		(sb.State == sandbox.StateQuarantined && sb.PrevState != sandbox.StateStopped):
		if sb.State != sandbox.StateRunning {
			if st, err := m.node.Status(ctx, sb); err == nil && (st == node.StatusPaused || st == node.StatusRunning) {
				log.Info("adopted paused sandbox")
				return
			}
		} else {
			// Frozen under a running record: a pause, fork or snapshot
			// the daemon died in the middle of (the record is written
			// after the freeze, and is the intent). A frozen sandbox is
			// alive: thaw it, as its record says it runs.
			if st, err := m.node.Status(ctx, sb); err == nil && st == node.StatusPaused {
				fz, err := node.Need[node.Freezer](m.node, node.OpResume)
				if err == nil {
					err = fz.Thaw(ctx, sb)
				}
				if err != nil {
					log.Warn("thawing a sandbox left frozen", "err", err)
				} else {
					log.Info("thawed a sandbox left frozen by an interrupted operation")
					m.e.Event(ctx, &sandbox.Event{SandboxID: sb.ID, Type: "thaw", Actor: actorReconciler,
						Cause: sandbox.CauseReconciler, Outcome: "ok", Message: "left frozen by an operation the daemon did not finish; thawed after restart"})
				}
			}
			if m.e.Alive(ctx, sb) {
				log.Info("adopted running sandbox")
				return
			}
		}
		if !sb.Spec.Persistent {
			destroy("sandbox died while the " + down)
			return
		}
		// A persistent sandbox's files outlive its processes (a host
		// reboot, say): bring it back as it was asked to be.
		log.Info("restarting persistent sandbox whose processes are gone")
		wasPaused := sb.State == sandbox.StatePaused
		if sb.State == sandbox.StateQuarantined {
			log.Warn("quarantined sandbox lost its processes; it stays quarantined, stopped")
			_ = op.StopHost(ctx, sb)
			sb.PrevState = sandbox.StateStopped
			_ = m.store.UpdateSandbox(ctx, sb)
			return
		}
		if err := op.Stop(ctx, sb, sandbox.CauseReconciler, actorReconciler, "processes gone "+after); err != nil {
			log.Warn("stopping dead sandbox", "err", err)
			return
		}
		if err := op.Start(ctx, sb, sandbox.CauseReconciler, actorReconciler, "restarted after its processes were lost"); err != nil {
			log.Warn("restarting persistent sandbox", "err", err)
			return
		}
		if wasPaused {
			_ = op.Pause(ctx, sb, sandbox.CauseReconciler, actorReconciler, "paused again "+after)
		}
	case sb.State == sandbox.StateStopping:
		if err := op.Stop(ctx, sb, sandbox.CauseReconciler, actorReconciler, "stop finished "+after); err != nil {
			log.Warn("finishing stop", "err", err)
		}
	case sb.State == sandbox.StateStarting && !node.Hibernated(m.node, sb) && m.e.Alive(ctx, sb):
		// The start (or the wake) finished on the host; only its record
		// was not written.
		if err := op.Transition(ctx, sb, sandbox.StateRunning, sandbox.CauseReconciler, actorReconciler, "start finished "+after); err != nil {
			log.Warn("recording finished start", "err", err)
		}
	case sb.State == sandbox.StateStarting:
		if err := op.Start(ctx, sb, sandbox.CauseReconciler, actorReconciler, "start finished "+after); err != nil {
			log.Warn("finishing start", "err", err)
		}
	case sb.State == sandbox.StateStopped:
		// Nothing may run or stay mounted for a stopped sandbox.
		if err := op.StopHost(ctx, sb); err != nil {
			log.Warn("cleaning stopped sandbox", "err", err)
		}
	}
}

// classAbsent reports whether sb names a runtime class the node does not
// have now.
func (m *Reconciler) classAbsent(sb *sandbox.Sandbox) bool {
	_, ok := node.ClassCaps(m.node, sb.Spec.Runtime)
	return sb.Spec.Runtime != "" && !ok
}

// recoverWaiting recovers the sandboxes left for their runtime class
// (classWait) whose class the node has now.
func (m *Reconciler) recoverWaiting() {
	m.classMu.Lock()
	defer m.classMu.Unlock()
	for id, class := range m.classWait {
		if _, ok := node.ClassCaps(m.node, class); !ok {
			continue
		}
		// Busy: the next tick tries again. Still absent when it runs
		// (it cannot be: classes only join): recoverLocked lists it again.
		if m.e.Async(id, m.fenced(func(ctx context.Context, op *engine.Op, cur *sandbox.Sandbox) {
			m.recoverLocked(ctx, op, cur, "once its runtime class "+class+" was available",
				"client went away (daemon restart)", "runtime class was unavailable")
		})) {
			delete(m.classWait, id)
		}
	}
}

// finishHibernate records as hibernated a sandbox whose checkpoint
// completed before the daemon died: its root and volumes are released as
// a hibernate does, its image and bundle kept for the wake.
func (m *Reconciler) finishHibernate(ctx context.Context, op *engine.Op, sb *sandbox.Sandbox, log *slog.Logger) {
	if sb.State != sandbox.StateStopping {
		if err := op.Transition(ctx, sb, sandbox.StateStopping, sandbox.CauseReconciler, actorReconciler, engine.ReasonHibernated); err != nil {
			log.Warn("recording an interrupted hibernate", "err", err)
			return
		}
	}
	if err := op.StopHost(ctx, sb); err != nil {
		log.Warn("finishing an interrupted hibernate", "err", err)
		return
	}
	m.e.Event(ctx, &sandbox.Event{SandboxID: sb.ID, Type: "hibernate", Actor: actorReconciler, Cause: sandbox.CauseReconciler,
		Outcome: "ok", Message: "checkpoint completed before the daemon stopped; hibernate finished after restart"})
	if err := op.Transition(ctx, sb, sandbox.StateStopped, sandbox.CauseReconciler, actorReconciler, engine.ReasonHibernated); err != nil {
		log.Warn("recording an interrupted hibernate", "err", err)
		return
	}
	log.Info("finished a hibernate the daemon was killed in")
}

func (m *Reconciler) loop() {
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-m.e.Stopping():
			return
		case <-timer.C:
		case <-m.e.Kicks():
		}
		next := m.tick(context.Background())
		wait := m.interval
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

// tick enforces policies, stores activity, retries unfinished teardowns
// and notices dead sandboxes. It returns the next deadline it knows of.
//
// Each part runs only while this daemon holds its lease (package leader),
// checked before the pass: the node's work under the node lease, the
// store-wide purges under the store lease. The node's actions run fenced
// by the lease's epoch (fenced), so a replica that stalls after the check
// and wakes deposed cannot record them.
func (m *Reconciler) tick(ctx context.Context) time.Time {
	now := m.e.Now()
	m.snapTick++
	if _, ok := m.e.Config().StoreLease.Held(); ok && m.snapTick%5 == 0 {
		if n, err := m.store.PurgeIdempotencyKeys(ctx, now); err != nil {
			m.log.Warn("reconciler: purging expired idempotency keys", "err", err)
		} else if n > 0 {
			m.log.Debug("reconciler: purged expired idempotency keys", "n", n)
		}
		m.purgeRetained(ctx, now)
		// Presence leases of replicas long gone: one row per start of a
		// replica would otherwise pile up.
		if n, err := m.store.PurgeReconcileLeases(ctx, leader.ReplicaLeasePrefix, presenceRetention); err != nil {
			m.log.Warn("reconciler: purging presence leases", "err", err)
		} else if n > 0 {
			m.log.Debug("reconciler: purged presence leases of replicas gone", "n", n)
		}
	}
	fence, ok := m.e.Config().NodeLease.Held()
	if !ok {
		return time.Time{}
	}
	live, _, err := m.store.ListSandboxes(ctx, store.SandboxFilter{Owner: store.AnyOwner, Node: m.e.Node()}, store.Page{})
	if err != nil {
		m.log.Error("reconciler: listing sandboxes", "err", err)
		return time.Time{}
	}
	var next time.Time
	if m.snapTick%5 == 0 && m.snapshots != nil {
		m.snapshots.Expire(ctx)
	}
	if m.pools != nil {
		m.pools.Refill(ctx, live)
	}
	m.node.Tick(ctx, live)
	m.recoverWaiting()
	shared := !m.e.Config().NodeLease.Status().Trivial
	gone := m.goneReplicas(ctx)
	if shared {
		m.orphans(live, gone)
		m.sweepShared(fence.Epoch, now)
	}
	for _, sb := range live {
		if sb.State == sandbox.StateRunning && sb.Spec.Policy.IdleTimeout > 0 {
			// Open exec sessions and busy processes are activity.
			if m.e.OpenExecs(sb.ID) > 0 || m.e.Busy(sb) {
				m.e.Touched(sb.ID)
			}
		}
		m.e.FlushActivity(ctx, sb)
		if due, ok := sandbox.Next(sb, m.e.LastActivity(sb)); ok {
			if !now.Before(due.At) {
				if !m.e.Async(sb.ID, m.fenced(func(ctx context.Context, op *engine.Op, cur *sandbox.Sandbox) { m.enforce(ctx, op, cur) })) {
					// Busy with another operation: look again shortly.
					due.At = now.Add(50 * time.Millisecond)
				}
			}
			if now.Before(due.At) && (next.IsZero() || due.At.Before(next)) {
				next = due.At
			}
		}
		if shared && (sb.State == sandbox.StateDeleting || sb.State == sandbox.StateStopping) &&
			sb.Error == "" && now.Sub(sb.UpdatedAt) < inFlightGrace && !gone(sb.Replica) {
			// Another replica, alive, is in the middle of this delete or
			// stop (no failure recorded yet): a retry here would race it
			// and answer its caller a conflict.
			continue
		}
		switch sb.State {
		case sandbox.StateDeleting, sandbox.StateFailed:
			m.e.Async(sb.ID, m.fenced(func(ctx context.Context, op *engine.Op, sb *sandbox.Sandbox) {
				if sb.State == sandbox.StateDeleting || sb.State == sandbox.StateFailed {
					done := m.e.AuditSystem(ctx, sb, actorReconciler, "cleanup")
					done(op.Destroy(ctx, sb, sandbox.CauseReconciler, actorReconciler, sb.Reason))
				}
			}))
		case sandbox.StateStopping:
			m.e.Async(sb.ID, m.fenced(func(ctx context.Context, op *engine.Op, sb *sandbox.Sandbox) {
				if sb.State == sandbox.StateStopping {
					done := m.e.AuditSystem(ctx, sb, actorReconciler, "stop")
					done(op.Stop(ctx, sb, sandbox.CauseReconciler, actorReconciler, sb.Reason))
				}
			}))
		case sandbox.StateRunning:
			if m.node.Exited(sb) && !m.classAbsent(sb) {
				m.e.Async(sb.ID, m.fenced(func(ctx context.Context, op *engine.Op, sb *sandbox.Sandbox) {
					if sb.State != sandbox.StateRunning || m.e.Alive(ctx, sb) {
						return
					}
					reason := "sandbox exited unexpectedly: " + strings.TrimSpace(m.node.InitLog(sb, 256, 50*time.Millisecond))
					if sb.Spec.Persistent {
						done := m.e.AuditSystem(ctx, sb, actorReconciler, "stop")
						done(op.Stop(ctx, sb, sandbox.CauseReconciler, actorReconciler, reason))
						return
					}
					done := m.e.AuditSystem(ctx, sb, actorReconciler, "cleanup")
					done(op.Destroy(ctx, sb, sandbox.CauseReconciler, actorReconciler, reason))
				}))
			}
		}
	}
	return next
}

// sweepShared garbage-collects, on a node several replicas share, what
// the backend holds that no record accounts for (a pod, claim or secret
// labelled by berth whose sandbox or volume is gone): the sweep a daemon
// that owns its node runs at start, run by the node lease's holder when
// it takes the lease and every orphanSweepEvery after, in the background
// and one at a time. An object of a create in flight on another replica
// is safe: its record is written before the backend makes anything, and
// the sweep reads each record again before it removes anything of it.
func (m *Reconciler) sweepShared(epoch int64, now time.Time) {
	if epoch == m.sweptEpoch && now.Sub(m.swept) < orphanSweepEvery || !m.sweeping.CompareAndSwap(false, true) {
		return
	}
	m.swept, m.sweptEpoch = now, epoch
	m.e.Go(func(ctx context.Context) {
		defer m.sweeping.Store(false)
		rep, err := m.doctor(ctx, true, false)
		if err != nil {
			m.log.Warn("reconciler: sweeping the shared node", "err", err)
			return
		}
		fixed := 0
		for _, f := range rep.Findings {
			if f.Fixed {
				fixed++
			}
		}
		if fixed > 0 {
			m.log.Info("reconciler: removed what no record accounts for", "fixed", fixed, "findings", len(rep.Findings))
		}
	})
}

// orphanSweepEvery is how often the holder of a shared node's lease
// sweeps it for what no record accounts for.
const orphanSweepEvery = 5 * time.Minute

// inFlightGrace is how long after its last write a delete or stop begun
// by another replica that is alive is left to it. Past it (a stop whose
// failure was not recorded, say), the holder retries it as any other.
const inFlightGrace = time.Minute

// goneReplicas returns, for one pass, whether the replica a record names
// is gone: its presence lease lapsed (leader.Present), read once per
// replica. This replica is never gone; a replica whose presence cannot be
// read is not either (cannot tell: leave its work to it).
func (m *Reconciler) goneReplicas(ctx context.Context) func(string) bool {
	self := m.e.Config().Replica
	present := map[string]bool{}
	return func(replica string) bool {
		if replica == self && self != "" {
			return false // in flight here: its own request finishes it
		}
		p, seen := present[replica]
		if !seen {
			var err error
			if p, err = leader.Present(context.WithoutCancel(ctx), m.store, replica); err != nil {
				m.log.Warn("reconciler: reading a replica's presence", "replica", replica, "err", err)
				return false
			}
			present[replica] = p
		}
		return !p
	}
}

// presenceRetention is how long a replica's expired presence lease is
// kept before the purge: long past any record still naming it in flight
// (the holder finishes those within a pass of the lease lapsing; a purged
// row reads as absent all the same).
const presenceRetention = time.Hour

// orphans finishes, on a node several replicas share, what a replica that
// is gone left in flight: a create or start (finished, or failed and torn
// down when it cannot be), and a one-shot sandbox, whose client went away
// with the replica it was talking to (destroyed). "Gone" is read from the
// store: the record names the replica of its last transition
// (Sandbox.Replica), and that replica's presence lease is expired by the
// database's clock (leader.Present) — it crashed, or stalled or lost its
// database for longer than the TTL. Stops, deletes and failures need no
// owner: every holder pass retries them whoever began them.
//
// Each action is fenced by the node lease like every reconciler action.
// A replica wrongly thought gone (stalled past its TTL, then woken) finds
// its own next write refused by the record's generation, which this
// pass's transitions moved on: its create answers an error and tears
// nothing down (its teardown begins with a transition that is refused
// too), and the record keeps this pass's outcome.
func (m *Reconciler) orphans(live []*sandbox.Sandbox, gone func(string) bool) {
	for _, sb := range live {
		switch {
		case sb.State == sandbox.StateCreating || sb.State == sandbox.StateStarting:
		case sb.Spec.OneShot && sb.State != sandbox.StateDeleting && sb.State != sandbox.StateFailed:
		default:
			continue
		}
		if !gone(sb.Replica) {
			continue
		}
		seen := *sb
		m.e.Async(sb.ID, m.fenced(func(ctx context.Context, op *engine.Op, cur *sandbox.Sandbox) {
			// Moved on since the list (its replica was slow, not gone; or
			// another pass did it): nothing of this is due any more.
			if cur.State != seen.State || cur.Replica != seen.Replica || cur.Generation != seen.Generation {
				return
			}
			who := seen.Replica
			if who == "" {
				who = "unrecorded"
			}
			m.log.Info("reconciler: finishing what a replica that is gone left in flight",
				"sandbox", cur.ID, "state", cur.State, "replica", who)
			m.recoverLocked(ctx, op, cur, "by the node lease holder: replica "+who+" is gone",
				"client went away (its replica "+who+" is gone)", "replica "+who+" was gone")
		}))
	}
}

// fenced wraps a reconciler action: it runs only if the node lease is
// still held when it starts (it may have waited for the sandbox's lock),
// and its transitions carry the lease's fence, so the store refuses them
// once another replica holds the lease.
func (m *Reconciler) fenced(fn func(context.Context, *engine.Op, *sandbox.Sandbox)) func(context.Context, *engine.Op, *sandbox.Sandbox) {
	return func(ctx context.Context, op *engine.Op, sb *sandbox.Sandbox) {
		f, ok := m.e.Config().NodeLease.Held()
		if !ok {
			return
		}
		fn(leader.Fenced(ctx, f), op, sb)
	}
}

// purgeRetained runs the retention sweep: a few bounded batches per call,
// so one tick never holds the store for long; what is left waits for the
// next.
func (m *Reconciler) purgeRetained(ctx context.Context, now time.Time) {
	if m.e.Config().Retention <= 0 {
		return
	}
	req := store.PurgeRequest{Before: now.Add(-m.e.Config().Retention), Webhooks: m.e.Config().Webhooks}
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

// enforce takes the policy action due for sb, if it is still due.
func (m *Reconciler) enforce(ctx context.Context, op *engine.Op, sb *sandbox.Sandbox) {
	due, ok := sandbox.Next(sb, m.e.LastActivity(sb))
	if !ok || m.e.Now().Before(due.At) {
		return
	}
	// Last look before idling: a command may have just started.
	if due.Policy == "idle" && (m.e.OpenExecs(sb.ID) > 0 || m.e.Busy(sb)) {
		m.e.Touched(sb.ID)
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
	done := m.e.AuditSystem(ctx, sb, "policy", string(due.Action))
	defer func() { done(err) }()
	switch due.Action {
	case sandbox.ActionPause:
		err = op.Pause(ctx, sb, sandbox.CausePolicy, actor, reason)
	case sandbox.ActionStop:
		if sb.State == sandbox.StatePaused || sb.State == sandbox.StateRunning {
			err = op.Stop(ctx, sb, sandbox.CausePolicy, actor, reason)
		}
	case sandbox.ActionDelete:
		// Its cleanup lag counts from the deadline, not from this tick.
		err = op.Destroy(engine.WithCleanupFrom(ctx, due.At), sb, sandbox.CausePolicy, actor, reason)
	}
	if err != nil {
		m.log.Warn("policy action failed", "sandbox", sb.ID, "policy", due.Policy, "action", due.Action, "err", err)
	} else {
		m.e.Recorder().PolicyAction(due.Policy, string(due.Action))
	}
}

// orphanKinds are the findings that are host resources no record accounts
// for (the orphans metrics count); the others (a frozen or read-only
// filesystem, a freezer state, a record without its resources) are health
// findings about live sandboxes.
var orphanKinds = map[string]bool{"runtime": true, "cgroup": true, "mount": true, "dir": true,
	"volume": true, "network": true, "ids": true, "clone": true}

// Doctor lists orphans and leaks: host resources with no live record, and
// live records whose host resources are gone. With fix it removes orphans.
// stuckMemberGrace is how long a warm-pool member may wait unfinished
// before doctor reports it: the refills that finish such members run every
// reconcile interval, well within it.
const stuckMemberGrace = time.Minute

func (m *Reconciler) Doctor(ctx context.Context, fix bool) (*Report, error) {
	return m.doctor(ctx, fix, false)
}

// doctor is Doctor; atStart says it runs in the start-up sweep, right after
// volume.ThawAll thawed every filesystem of the pool, so that they are not probed
// for a freeze (a flush each) a second time.
func (m *Reconciler) doctor(ctx context.Context, fix, atStart bool) (*Report, error) {
	if st := m.e.Config().NodeLease.Status(); fix && !st.Held {
		// Another replica reconciles this node: a sweep here would race
		// its passes. Its own doctor --fix is the one to run.
		return nil, errdefs.Conflict("this replica (%s) does not hold lease %s (holder %q): doctor --fix runs on the holder",
			st.Self, st.Name, st.Holder)
	}
	all, _, err := m.store.ListSandboxes(ctx, store.SandboxFilter{Owner: store.AnyOwner, Node: m.e.Node()}, store.Page{})
	if err != nil {
		return nil, err
	}
	live := map[string]*sandbox.Sandbox{}
	for _, sb := range all {
		live[sb.ID] = sb
	}
	rep := &Report{Runtime: strings.Join(m.e.RuntimeNames(), ","), Findings: []Finding{},
		Leases: []leader.Status{m.e.Config().NodeLease.Status(), m.e.Config().StoreLease.Status()}}
	add := func(kind, id, detail string, fixFn func() error) {
		f := Finding{Kind: kind, ID: id, Detail: detail}
		if fix && fixFn != nil {
			done := m.e.AuditSystemOn(ctx, "", actorReconciler, "fix "+kind, id)
			err := fixFn()
			done(err)
			if err != nil {
				f.Error = err.Error()
			} else {
				f.Fixed = true
			}
			if orphanKinds[kind] {
				m.e.Recorder().Orphan(kind, f.Fixed)
			}
		}
		rep.Findings = append(rep.Findings, f)
	}
	// The code-interpreter template needs the host's Python packages
	// (templates.ensureInterp leaves it out without them).
	if miss := interp.Missing("/"); len(miss) > 0 {
		add("template", "", fmt.Sprintf("the %s template is unavailable: the host lacks %s; %s",
			interp.Template, strings.Join(miss, ", "), interp.InstallHint), nil)
	} else if miss := interp.MissingKernels("/"); len(miss) > 0 {
		add("template", "", fmt.Sprintf("the %s template lacks languages: the host lacks %s; %s",
			interp.Template, strings.Join(miss, ", "), interp.InstallHint), nil)
	}
	// The locks keep doctor from racing a create or delete in progress;
	// the record is read again under the lock, since the list above may be
	// older than an operation that has just finished.
	busy := func(id string) bool {
		_, unlock, ok := m.e.TryLock(id)
		if !ok {
			return true
		}
		defer unlock()
		// Every tenant's: with the caller's owner, another tenant's live
		// sandbox would read as gone, and doctor --fix would tear it down.
		sb, err := m.store.GetSandbox(ctx, store.AnyOwner, id)
		switch {
		case err == nil && sb.State.Live() && m.e.Mine(sb):
			live[id] = sb
		case err == nil || errors.Is(err, errdefs.ErrNotFound):
			delete(live, id)
		default:
			return true // cannot tell: leave it alone
		}
		return false
	}
	for _, sb := range live {
		if len(sb.Spec.Layers) == 0 { // records from before layers were kept
			if tpl, err := m.store.ResolveTemplate(ctx, sb.Tenant, sb.Spec.Template); err == nil {
				sb.Spec.Layers = tpl.Layers
			}
		}
	}
	vols, _, _ := m.store.ListVolumes(ctx, store.VolumeFilter{Owner: store.AnyOwner}, store.Page{})
	owners := map[string]string{}
	for _, v := range vols {
		owners[v.ID] = v.SandboxID
	}
	m.node.Sweep(ctx, node.SweepInput{
		Live: live,
		Busy: busy,
		TryLock: func(id string) (func(), bool) {
			_, unlock, ok := m.e.TryLock(id)
			return unlock, ok
		},
		VolumeOwner: func(vid string) (string, bool) {
			if owner, ok := owners[vid]; ok {
				return owner, true
			}
			// A volume looked at by its mount may be a tombstone now.
			if v, err := m.store.GetVolume(ctx, engine.Owner(ctx), vid); err == nil {
				return v.SandboxID, v.State != store.VolumeDeleted
			}
			return "", false
		},
		Snapshot: func(id string) bool {
			_, err := m.store.GetSnapshot(ctx, engine.Owner(ctx), id)
			return !errors.Is(err, errdefs.ErrNotFound)
		},
		AtStart: atStart,
	}, add)
	m.e.DoctorIDs(ctx, busy, live, add)
	for id := range live {
		if busy(id) || live[id] == nil {
			continue
		}
		if sb := live[id]; sb.State == sandbox.StateDeleting || sb.State == sandbox.StateFailed {
			add("record", id, fmt.Sprintf("sandbox is %s: teardown pending (%s)", sb.State, sb.Error), nil)
		}
		// A warm-pool member left half made (running, not paused) by an
		// interrupted refill, and not finished by the refills since.
		if sb := live[id]; m.pools != nil && m.pools.Stuck(sb) && !m.pools.InFlight(id) && m.e.Now().Sub(sb.UpdatedAt) > stuckMemberGrace {
			add("pool", id, fmt.Sprintf("warm pool member of %s unfinished (running, not ready) since %s", sb.Spec.Pool, sb.UpdatedAt.Format(time.RFC3339)),
				func() error {
					op, unlock, ok := m.e.TryLock(id)
					if !ok {
						return fmt.Errorf("sandbox %s is busy", id)
					}
					defer unlock()
					cur, err := m.store.GetSandbox(ctx, store.AnyOwner, id)
					if err != nil || !m.pools.Stuck(cur) {
						return err
					}
					return op.Destroy(ctx, cur, sandbox.CauseReconciler, actorReconciler, "doctor --fix: unfinished warm pool member")
				})
		}
	}
	rep.Healthy = true
	for _, f := range rep.Findings {
		if !f.Fixed {
			rep.Healthy = false
		}
	}
	return rep, nil
}
