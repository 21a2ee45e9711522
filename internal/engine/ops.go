package engine

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/berth-sh/berth/internal/cleanup"
	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/internal/failpoint"
	"github.com/berth-sh/berth/internal/node"
	"github.com/berth-sh/berth/internal/sandbox"
	"github.com/berth-sh/berth/internal/store"
)

// op runs fn on the current record of sandbox ref under its lock.
func (m *Engine) op(ctx context.Context, ref string, fn func(context.Context, *sandbox.Sandbox) error) (*sandbox.Sandbox, error) {
	sb, err := m.local(ctx, ref)
	if err != nil {
		return nil, err
	}
	ctx = context.WithoutCancel(ctx)
	unlock := m.live.lock(sb.ID)
	defer unlock()
	if sb, err = m.store.GetSandbox(ctx, owner(ctx), sb.ID); err != nil {
		return nil, err
	}
	if err := fn(ctx, sb); err != nil {
		return sb, err
	}
	m.wakeReconciler()
	return sb, nil
}

// Pause freezes every process of a running sandbox: memory and processes
// are kept, no CPU is used.
func (m *Engine) Pause(ctx context.Context, ref, actor string) (*sandbox.Sandbox, error) {
	return m.op(ctx, ref, func(ctx context.Context, sb *sandbox.Sandbox) error {
		return m.pauseLocked(ctx, sb, sandbox.CauseUser, actor, "paused by user")
	})
}

func (m *Engine) pauseLocked(ctx context.Context, sb *sandbox.Sandbox, cause sandbox.Cause, actor, reason string) error {
	if sb.State != sandbox.StateRunning {
		return sandbox.ErrWrongState("pause", sb)
	}
	if !m.caps(sb).Freeze {
		// A class that cannot freeze (a Kubernetes pod) pauses a
		// persistent sandbox by stopping it: its files are kept, its
		// processes end, and the record says stopped, not paused.
		if !sb.Spec.Persistent {
			return errdefs.NotSupported("runtime class %s cannot freeze processes: a persistent sandbox's pause is a stop (files kept, processes end); an ephemeral one cannot be paused", sb.Spec.Runtime)
		}
		return m.stopLocked(ctx, sb, cause, actor, reason+" (a stop: runtime class "+sb.Spec.Runtime+" cannot freeze processes)")
	}
	fz, err := node.Need[node.Freezer](m.node, node.OpPause)
	if err == nil {
		err = fz.Freeze(ctx, sb)
	}
	if err != nil {
		return fmt.Errorf("pausing: %w", err)
	}
	// A crash here leaves a frozen sandbox under a running record: the
	// restart thaws it (recoverOne), the record being the intent.
	err = failpoint.Inject("pause.after-freeze")
	if err == nil {
		err = m.transition(ctx, sb, sandbox.StatePaused, cause, actor, reason)
	}
	if err != nil {
		if terr := fz.Thaw(ctx, sb); terr != nil {
			err = errors.Join(err, fmt.Errorf("thawing again: %w", terr))
		}
		return err
	}
	return nil
}

// Resume thaws a paused sandbox.
func (m *Engine) Resume(ctx context.Context, ref, actor string) (*sandbox.Sandbox, error) {
	return m.op(ctx, ref, func(ctx context.Context, sb *sandbox.Sandbox) error {
		return m.resumeLocked(ctx, sb, sandbox.CauseUser, actor, "resumed by user")
	})
}

func (m *Engine) resumeLocked(ctx context.Context, sb *sandbox.Sandbox, cause sandbox.Cause, actor, reason string) error {
	if sb.State != sandbox.StatePaused {
		return sandbox.ErrWrongState("resume", sb)
	}
	begin := time.Now()
	fz, err := node.Need[node.Freezer](m.node, node.OpResume)
	if err == nil {
		err = fz.Thaw(ctx, sb)
	}
	if err != nil {
		return fmt.Errorf("resuming: %w", err)
	}
	m.touch(sb.ID)
	if err := m.transition(ctx, sb, sandbox.StateRunning, cause, actor, reason); err != nil {
		return err
	}
	m.cfg.Metrics.Resumed("unpause", time.Since(begin))
	return nil
}

// Stop scales a sandbox to zero: processes and memory go; its volume (and,
// with persist_root, its writable root layer), config, policies and
// hostname are kept for Start.
// A running sandbox is stopped gracefully first (stop.go): its processes
// get the template's stop signal and DefaultStopGrace to end.
func (m *Engine) Stop(ctx context.Context, ref, actor string) (*sandbox.Sandbox, error) {
	return m.StopGrace(ctx, ref, actor, DefaultStopGrace)
}

// StopGrace is Stop with the given grace (0: no signal, killed at once).
func (m *Engine) StopGrace(ctx context.Context, ref, actor string, grace time.Duration) (*sandbox.Sandbox, error) {
	if grace < 0 || grace > MaxStopGrace {
		return nil, errdefs.Invalid("stop timeout must be between 0 and %s", MaxStopGrace)
	}
	return m.op(ctx, ref, func(ctx context.Context, sb *sandbox.Sandbox) error {
		return m.stopGraceLocked(ctx, sb, sandbox.CauseUser, actor, "stopped by user", grace)
	})
}

func (m *Engine) stopLocked(ctx context.Context, sb *sandbox.Sandbox, cause sandbox.Cause, actor, reason string) error {
	return m.stopGraceLocked(ctx, sb, cause, actor, reason, DefaultStopGrace)
}

func (m *Engine) stopGraceLocked(ctx context.Context, sb *sandbox.Sandbox, cause sandbox.Cause, actor, reason string, grace time.Duration) error {
	if sb.State != sandbox.StateRunning && sb.State != sandbox.StatePaused && sb.State != sandbox.StateStopping {
		return sandbox.ErrWrongState("stop", sb)
	}
	// Only a running sandbox can be asked: a paused one is frozen, and a
	// stop being retried has had its chance.
	graceful := sb.State == sandbox.StateRunning && grace > 0
	if sb.State == sandbox.StateRunning {
		m.hooks.runStopping(ctx, sb)
	}
	if sb.State != sandbox.StateStopping {
		if err := m.transition(ctx, sb, sandbox.StateStopping, cause, actor, reason); err != nil {
			return err
		}
	}
	if graceful {
		m.signalStop(ctx, sb, grace)
	}
	if err := m.stopProcesses(ctx, sb, m.node.Stop); err != nil {
		sb.Error = "stop: " + err.Error()
		_ = m.store.UpdateSandbox(ctx, sb)
		return fmt.Errorf("stopping (will be retried): %w", err)
	}
	// A crash here leaves a stopping record whose processes are gone: a
	// restart, or on a shared node the lease holder once this replica's
	// presence lapses, finishes the stop.
	if err := failpoint.Inject("stop.after-node"); err != nil {
		return fmt.Errorf("stopping (will be retried): %w", err)
	}
	if err := m.node.Discard(ctx, sb); err != nil {
		return err
	}
	return m.transition(ctx, sb, sandbox.StateStopped, cause, actor, reason)
}

// Start brings a stopped sandbox back from its template plus its volume.
// As a create does, it answers once the sandbox's ready ports accept (its
// template's service's and its supervised processes', started in the
// background: awaitService, bounded, after the lock is released).
func (m *Engine) Start(ctx context.Context, ref, actor string) (*sandbox.Sandbox, error) {
	sb, err := m.op(ctx, ref, func(ctx context.Context, sb *sandbox.Sandbox) error {
		return m.startLocked(ctx, sb, sandbox.CauseUser, actor, "started by user")
	})
	if err != nil {
		return sb, err
	}
	m.awaitService(ctx, sb)
	return sb, nil
}

func (m *Engine) startLocked(ctx context.Context, sb *sandbox.Sandbox, cause sandbox.Cause, actor, reason string) error {
	if sb.State != sandbox.StateStopped && sb.State != sandbox.StateStarting {
		return sandbox.ErrWrongState("start", sb)
	}
	// A start (or a wake) takes its turn among the node's starts, as a
	// create does (startqueue.go): many stopped workspaces started at once,
	// or previews woken together, do not start their runtimes all at once.
	// It waits before anything changes (the sandbox stays stopped); a
	// delete ends the wait (abandon), and the start then fails.
	turn, err := m.starts.enter(sb.Tenant, false)
	if err != nil {
		return err
	}
	defer turn.leave()
	if err := turn.waitFor(ctx, sb.ID); err != nil {
		return err
	}
	if node.Hibernated(m.node, sb) {
		// Its processes and memory were checkpointed: bring them back
		// (a wake the daemon was killed in is started over: the image
		// stays until a wake has finished).
		if m.hooks.Wake == nil {
			return errdefs.NotSupported("sandbox %s is hibernated and this daemon does not wake sandboxes", sb.ID)
		}
		begin := time.Now()
		if err := m.hooks.Wake(ctx, &Op{e: m, id: sb.ID}, sb, cause, actor, reason); err != nil {
			return err
		}
		m.cfg.Metrics.Resumed("wake", time.Since(begin))
		return nil
	}
	begin := time.Now()
	if sb.State != sandbox.StateStarting {
		if err := m.transition(ctx, sb, sandbox.StateStarting, cause, actor, reason); err != nil {
			return err
		}
	}
	if err := m.provision(ctx, sb); err != nil {
		m.log.Warn("start failed", "sandbox", sb.ID, "err", err)
		// The record may have moved on while this start was stalled:
		// another replica, taking this one for gone, finished it
		// (reconcile.orphans). Its sandbox is not this start's to stop;
		// nor is it when the record cannot be read (the stop could not
		// be recorded: whoever finishes the start does it).
		if cur, gerr := m.store.GetSandbox(ctx, store.AnyOwner, sb.ID); gerr != nil {
			return fmt.Errorf("starting: %w (and reading the record: %v; left as it is)", err, gerr)
		} else if cur.Generation != sb.Generation {
			return fmt.Errorf("starting: %w (meanwhile the sandbox became %s through another replica; left as it is)", err, cur.State)
		}
		if herr := m.stopProcesses(ctx, sb, m.node.Stop); herr != nil {
			m.log.Warn("cleaning up failed start", "sandbox", sb.ID, "err", herr)
		}
		if terr := m.transition(ctx, sb, sandbox.StateStopped, sandbox.CauseReconciler, actor, "start failed"); terr != nil {
			m.log.Error("recording failed start", "sandbox", sb.ID, "err", terr)
		}
		// After the transition, which starts a state afresh: the stopped
		// record says why its start failed.
		sb.Error = "start: " + errdefs.Message(err)
		if uerr := m.store.UpdateSandbox(ctx, sb); uerr != nil {
			m.log.Error("recording why a start failed", "sandbox", sb.ID, "err", uerr)
		}
		return fmt.Errorf("starting: %w", err)
	}
	// A crash here leaves a starting record whose processes run: a
	// restart, or the lease holder, finishes the start (adopting them).
	if err := failpoint.Inject("start.after-provision"); err != nil {
		return err
	}
	if err := m.transition(ctx, sb, sandbox.StateRunning, cause, actor, reason); err != nil {
		return err
	}
	m.cfg.Metrics.Resumed("start", time.Since(begin))
	return nil
}

// Reset returns the writable root layer and the workspace volume to the
// template; config and policies are kept. A running sandbox is restarted.
func (m *Engine) Reset(ctx context.Context, ref, actor string) (*sandbox.Sandbox, error) {
	return m.op(ctx, ref, func(ctx context.Context, sb *sandbox.Sandbox) error {
		wasRunning := sb.State == sandbox.StateRunning || sb.State == sandbox.StatePaused
		if !wasRunning && sb.State != sandbox.StateStopped {
			return sandbox.ErrWrongState("reset", sb)
		}
		if wasRunning {
			if err := m.stopLocked(ctx, sb, sandbox.CauseUser, actor, "reset"); err != nil {
				return err
			}
		}
		if err := m.node.Wipe(ctx, sb); err != nil {
			return fmt.Errorf("reset: %w", err)
		}
		m.event(ctx, &sandbox.Event{SandboxID: sb.ID, Type: "reset", Actor: actor, Cause: sandbox.CauseUser,
			Outcome: "ok", Message: "writable layer and workspace returned to the template"})
		if wasRunning {
			return m.startLocked(ctx, sb, sandbox.CauseUser, actor, "reset")
		}
		return nil
	})
}

// Quarantine freezes a sandbox and refuses exec and writes, keeping all of
// its state for inspection; file reads stay possible. Release or delete
// ends it. A failure undoes exactly the steps taken (cleanup stack): the
// sandbox runs again with its egress rules as before.
func (m *Engine) Quarantine(ctx context.Context, ref, actor string) (*sandbox.Sandbox, error) {
	return m.op(ctx, ref, func(ctx context.Context, sb *sandbox.Sandbox) (err error) {
		prev := sb.State
		cu := cleanup.Make()
		defer func() {
			cu.Clean()
			if uerr := cu.Err(); uerr != nil {
				err = errors.Join(err, fmt.Errorf("undoing the quarantine: %w", uerr))
			}
		}()
		switch prev {
		case sandbox.StateRunning:
			// A quarantine freezes as a pause does (and is refused as one).
			fz, err := node.Need[node.Freezer](m.node, node.OpPause)
			if err == nil {
				err = fz.Freeze(ctx, sb)
			}
			if err != nil {
				return fmt.Errorf("freezing: %w", err)
			}
			cu.Add(func() error { return fz.Thaw(ctx, sb) })
			if l := m.live.peek(sb.ID); l != nil {
				l.cancelExecs()
			}
		case sandbox.StatePaused, sandbox.StateStopped:
		default:
			return sandbox.ErrWrongState("quarantine", sb)
		}
		// A backend without egress refuses the cut as its SetRules would.
		eg, egErr := node.Need[node.Egress](m.node, node.OpQuarantine)
		setRules := func(cut bool) error {
			if egErr != nil {
				return egErr
			}
			return eg.SetRules(ctx, sb, cut)
		}
		if err := setRules(true); err != nil {
			// The sandbox is frozen: it sends nothing meanwhile; a stopped
			// one has no attachment. Recorded, not fatal.
			m.log.Warn("cutting quarantined sandbox's network", "sandbox", sb.ID, "err", err)
		}
		cu.Add(func() error { return setRules(false) })
		sb.PrevState = prev
		if err := m.transition(ctx, sb, sandbox.StateQuarantined, sandbox.CauseAdmin, actor, "quarantined"); err != nil {
			sb.PrevState = ""
			return err
		}
		cu.Release()
		return nil
	})
}

// Release ends a quarantine: the sandbox returns to the state it had. Its
// egress rules come back before its processes run again, and a failing
// step undoes the ones before it, so the record never says quarantined
// while the sandbox runs with its rules (nor running while it is frozen).
func (m *Engine) Release(ctx context.Context, ref, actor string) (*sandbox.Sandbox, error) {
	return m.op(ctx, ref, func(ctx context.Context, sb *sandbox.Sandbox) (err error) {
		if sb.State != sandbox.StateQuarantined {
			return sandbox.ErrWrongState("release", sb)
		}
		to := sb.PrevState
		if to == "" {
			to = sandbox.StatePaused
		}
		cu := cleanup.Make()
		defer func() {
			cu.Clean()
			if uerr := cu.Err(); uerr != nil {
				err = errors.Join(err, fmt.Errorf("undoing the release: %w", uerr))
			}
		}()
		eg, err := node.Need[node.Egress](m.node, node.OpQuarantine)
		if err == nil {
			err = eg.SetRules(ctx, sb, false)
		}
		if err != nil {
			return fmt.Errorf("restoring network rules: %w", err)
		}
		cu.Add(func() error { return eg.SetRules(ctx, sb, true) })
		if to == sandbox.StateRunning {
			fz, err := node.Need[node.Freezer](m.node, node.OpResume)
			if err == nil {
				err = fz.Thaw(ctx, sb)
			}
			if err != nil {
				return fmt.Errorf("thawing: %w", err)
			}
			cu.Add(func() error { return fz.Freeze(ctx, sb) })
		}
		prev := sb.PrevState
		sb.PrevState = ""
		if err := m.transition(ctx, sb, to, sandbox.CauseAdmin, actor, "released from quarantine"); err != nil {
			sb.PrevState = prev
			return err
		}
		cu.Release()
		return nil
	})
}

// storeOwn writes sb's record as apply changes it, with the events apply
// returns: the engine's own optimistic write, under sb's lock. A request
// carries no precondition on the record, so a concurrent update of it
// (errdefs.ErrModified: another replica, a writer without the lock) is not
// the caller's conflict: the record is read again, apply runs on it again
// and the write is tried again, a few times. apply's own errors (a wrong
// state) end it.
func (m *Engine) storeOwn(ctx context.Context, sb *sandbox.Sandbox, apply func(*sandbox.Sandbox) ([]*sandbox.Event, error)) error {
	for attempt := 1; ; attempt++ {
		evs, err := apply(sb)
		if err != nil {
			return err
		}
		err = m.store.UpdateSandbox(ctx, sb, evs...)
		if err == nil || !errors.Is(err, errdefs.ErrModified) || attempt == 5 {
			return err
		}
		cur, gerr := m.store.GetSandbox(ctx, store.AnyOwner, sb.ID)
		if gerr != nil {
			return err
		}
		m.log.Debug("record modified concurrently; applying the change again", "sandbox", sb.ID, "attempt", attempt)
		*sb = *cur
	}
}

// Touch records activity: a keep-alive that pushes idle timeouts back.
func (m *Engine) Touch(ctx context.Context, ref, actor string) (*sandbox.Sandbox, error) {
	return m.op(ctx, ref, func(ctx context.Context, sb *sandbox.Sandbox) error {
		if err := m.storeOwn(ctx, sb, func(sb *sandbox.Sandbox) ([]*sandbox.Event, error) {
			if !sb.State.Live() {
				return nil, sandbox.ErrWrongState("touch", sb)
			}
			sb.LastActivityAt = m.now()
			return nil, nil
		}); err != nil {
			return err
		}
		m.live.get(sb.ID).stored(sb.LastActivityAt)
		return nil
	})
}

// touch notes activity in memory; the reconciler stores it.
func (m *Engine) touch(id string) { m.live.get(id).touch(m.now()) }

// lastActivity is the latest known activity of sb: stored or in memory.
func (m *Engine) lastActivity(sb *sandbox.Sandbox) time.Time {
	t := time.Time{}
	if l := m.live.peek(sb.ID); l != nil {
		t = l.lastActivity()
	}
	if sb.LastActivityAt.After(t) {
		return sb.LastActivityAt
	}
	return t
}

// openExecs counts the execs running in sandbox id.
func (m *Engine) openExecs(id string) int {
	if l := m.live.peek(id); l != nil {
		return l.openExecs()
	}
	return 0
}

// busy reports whether sb's processes used more CPU than its idle
// threshold since the last sample.
func (m *Engine) busy(sb *sandbox.Sandbox) bool {
	th := sb.Spec.Policy.IdleCPUThreshold
	if th < 0 {
		return false
	}
	if th == 0 {
		th = sandbox.DefaultIdleCPUThreshold
	}
	usage, err := m.node.CPUUsage(sb)
	if err != nil {
		return false
	}
	now := time.Now()
	prev, ok := m.live.get(sb.ID).sample(cpuSample{at: now, usage: usage})
	if !ok {
		return false
	}
	el := now.Sub(prev.at)
	return el > 0 && float64(usage-prev.usage)/float64(el) > th
}

// readyForUse brings a paused or stopped sandbox with auto_resume back to
// running before a request that needs it; it refuses quarantined ones.
func (m *Engine) readyForUse(ctx context.Context, sb *sandbox.Sandbox, what, actor string) (*sandbox.Sandbox, error) {
	switch sb.State {
	case sandbox.StateRunning:
		return sb, nil
	case sandbox.StateQuarantined:
		return nil, errdefs.Conflict("sandbox %s is quarantined: %s is refused until it is released", sb.ID, what)
	case sandbox.StatePaused, sandbox.StateStopped:
		if !sb.Spec.Policy.AutoResume {
			return nil, sandbox.ErrWrongState(what, sb)
		}
		return m.op(ctx, sb.ID, func(ctx context.Context, cur *sandbox.Sandbox) error {
			switch cur.State {
			case sandbox.StatePaused:
				return m.resumeLocked(ctx, cur, sandbox.CausePolicy, "policy:auto_resume", "auto-resumed for "+what)
			case sandbox.StateStopped:
				return m.startLocked(ctx, cur, sandbox.CausePolicy, "policy:auto_resume", "auto-started for "+what)
			case sandbox.StateRunning:
				return nil
			}
			return sandbox.ErrWrongState(what, cur)
		})
	default:
		return nil, sandbox.ErrWrongState(what, sb)
	}
}

// Diff lists the files of sb that differ from its template: the writable
// root layer against the template's layers, plus everything in its
// workspace volume.
func (m *Engine) Diff(ctx context.Context, ref string) ([]DiffEntry, error) {
	sb, err := m.local(ctx, ref)
	if err != nil {
		return nil, err
	}
	// Held while the volumes of a stopped sandbox are mounted to be read.
	unlock := m.live.lock(sb.ID)
	defer unlock()
	if sb, err = m.store.GetSandbox(ctx, owner(ctx), sb.ID); err != nil {
		return nil, err
	}
	if !sb.State.Live() {
		return nil, sandbox.ErrWrongState("diff", sb)
	}
	if len(sb.Spec.Layers) == 0 {
		tpl, err := m.store.ResolveTemplate(ctx, sb.Tenant, sb.Spec.Template)
		if err != nil {
			return nil, err
		}
		sb.Spec.Layers = tpl.Layers
	}
	return m.nodeDiff(ctx, sb)
}
