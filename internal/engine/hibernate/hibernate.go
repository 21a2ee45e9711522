// Package hibernate is the hibernation feature over the engine's core:
// a sandbox's processes and memory saved to disk by the node backend
// (node.Caps.Checkpoint) and its record stopped with reason hibernated;
// wake (or a start, or an auto-resume) restores them.
package hibernate

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/berth-sh/berth/internal/engine"
	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/internal/failpoint"
	"github.com/berth-sh/berth/internal/node"
	"github.com/berth-sh/berth/internal/sandbox"
	"github.com/berth-sh/berth/internal/store"
)

// Hibernation hibernates and wakes sandboxes.
type Hibernation struct {
	e     engine.Host
	store store.Store
	node  node.Backend
	log   *slog.Logger
}

// New returns the hibernation feature of e; a start of a hibernated
// sandbox becomes its wake (the Wake hook).
func New(e engine.Host) *Hibernation {
	m := &Hibernation{e: e, store: e.Store(), node: e.Backend(), log: e.Log()}
	e.Hooks().Wake = m.wakeLocked
	return m
}

// Hibernate saves a running or paused sandbox's processes and memory to
// disk and releases its compute and memory: the record goes to stopped
// with reason "hibernated"; its root filesystem and volumes are unmounted
// but kept as they are, with the checkpoint image. Wake restores it. The
// runtime class must have the checkpoint capability; others get a 409.
func (m *Hibernation) Hibernate(ctx context.Context, ref, actor string) (*sandbox.Sandbox, error) {
	return m.e.Op(ctx, ref, func(ctx context.Context, op *engine.Op, sb *sandbox.Sandbox) error {
		return m.hibernateLocked(ctx, op, sb, sandbox.CauseUser, actor)
	})
}

func (m *Hibernation) hibernateLocked(ctx context.Context, op *engine.Op, sb *sandbox.Sandbox, cause sandbox.Cause, actor string) error {
	if !m.e.Caps(sb).Checkpoint {
		return errdefs.Conflict("hibernate is not supported by runtime class %s: it cannot checkpoint processes "+
			"(runc would need CRIU, and Debian's CRIU 3.17 fails on this kernel); create the sandbox with "+
			"runtime runsc, or use stop (files only) or pause (memory kept, in RAM)", m.e.ClassOf(sb))
	}
	if sb.State != sandbox.StateRunning && sb.State != sandbox.StatePaused {
		return sandbox.ErrWrongState("hibernate", sb)
	}
	h, err := node.Need[node.Hibernator](m.node, node.OpHibernate)
	if err != nil {
		return err
	}
	op.CancelExecs()
	cp, alive, err := h.Checkpoint(ctx, sb)
	if err != nil {
		if !alive && node.Hibernated(m.node, sb) {
			// The image is complete and recorded: a step after the
			// save failed. Undone by restoring it.
			return m.undoHibernate(ctx, op, sb, actor, err)
		}
		if !alive {
			m.log.Warn("checkpoint failed and the sandbox is gone; stopping it", "sandbox", sb.ID, "err", err)
			if serr := op.Stop(ctx, sb, sandbox.CauseReconciler, actor, "hibernate failed: processes lost"); serr != nil {
				m.log.Warn("stopping after failed checkpoint", "sandbox", sb.ID, "err", serr)
			}
		}
		return err
	}
	// From here the processes live only in the image. A crash from here
	// on leaves the marker, by which the reconciler finishes the
	// hibernate (reconcile.finishHibernate).
	if err := op.Transition(ctx, sb, sandbox.StateStopping, cause, actor, engine.ReasonHibernated); err != nil {
		return err
	}
	if err := failpoint.Inject("hibernate.after-stopping"); err != nil {
		return m.undoHibernate(ctx, op, sb, actor, err)
	}
	// Unmount the root and volumes like a stop, but keep the writable
	// layer and bundle: the restored processes need them as they were.
	if err := op.StopHost(ctx, sb); err != nil {
		return m.undoHibernate(ctx, op, sb, actor, fmt.Errorf("releasing host resources: %w", err))
	}
	if err := failpoint.Inject("hibernate.after-stophost"); err != nil {
		return m.undoHibernate(ctx, op, sb, actor, err)
	}
	m.e.Event(ctx, &sandbox.Event{SandboxID: sb.ID, Type: "hibernate", Actor: actor, Cause: cause, Outcome: "ok",
		Message: fmt.Sprintf("checkpoint of %s in %s", sandbox.FormatBytes(cp.SizeBytes), cp.Took.Round(time.Millisecond))})
	return op.Transition(ctx, sb, sandbox.StateStopped, cause, actor, engine.ReasonHibernated)
}

// undoHibernate undoes a hibernate that failed after its checkpoint was
// complete and recorded (sb's processes live only in the image): the
// record is taken through stopped (hibernated) and the sandbox woken
// from the image, so it runs with the processes it had (a paused one
// runs). Should the wake fail too, it stays hibernated, its image whole:
// never lost. Either way the hibernate answers cause.
func (m *Hibernation) undoHibernate(ctx context.Context, op *engine.Op, sb *sandbox.Sandbox, actor string, cause error) error {
	ctx = context.WithoutCancel(ctx)
	m.log.Warn("hibernate failed after its checkpoint; waking the sandbox from it", "sandbox", sb.ID, "err", cause)
	if sb.State != sandbox.StateStopping {
		if err := op.Transition(ctx, sb, sandbox.StateStopping, sandbox.CauseReconciler, actor, engine.ReasonHibernated); err != nil {
			return fmt.Errorf("hibernate: %w (undoing it: %v)", cause, err)
		}
	}
	if err := op.StopHost(ctx, sb); err != nil {
		// Left stopping with its marker: the reconciler finishes the
		// hibernate (reconcile.finishHibernate), and wake brings it back.
		sb.Error = "hibernate: " + err.Error()
		_ = m.store.UpdateSandbox(ctx, sb)
		return fmt.Errorf("hibernate: %w (undoing it: releasing host resources: %v)", cause, err)
	}
	if err := op.Transition(ctx, sb, sandbox.StateStopped, sandbox.CauseReconciler, actor, engine.ReasonHibernated); err != nil {
		return fmt.Errorf("hibernate: %w (undoing it: %v)", cause, err)
	}
	if err := m.wakeLocked(ctx, op, sb, sandbox.CauseReconciler, actor, "hibernate failed: woken from its checkpoint"); err != nil {
		return fmt.Errorf("hibernate: %w (undoing it failed, the sandbox stays hibernated: %v)", cause, err)
	}
	return fmt.Errorf("hibernate: %w (undone: the sandbox runs with its processes)", cause)
}

// Wake restores a hibernated sandbox: its root and volumes are mounted
// again and its processes continue from the checkpoint, in the same
// memory state. The checkpoint image is removed once it runs.
func (m *Hibernation) Wake(ctx context.Context, ref, actor string) (*sandbox.Sandbox, error) {
	return m.e.Op(ctx, ref, func(ctx context.Context, op *engine.Op, sb *sandbox.Sandbox) error {
		return m.wakeLocked(ctx, op, sb, sandbox.CauseUser, actor, "woken from hibernation")
	})
}

func (m *Hibernation) wakeLocked(ctx context.Context, op *engine.Op, sb *sandbox.Sandbox, cause sandbox.Cause, actor, reason string) error {
	// Starting: a wake the daemon was killed in, started over (its
	// marker and image are kept until a wake finished).
	if !m.e.Hibernated(sb) && (sb.State != sandbox.StateStarting || !node.Hibernated(m.node, sb)) {
		if sb.State == sandbox.StateStopped {
			return errdefs.Conflict("sandbox %s is stopped, not hibernated: use start", sb.ID)
		}
		return sandbox.ErrWrongState("wake", sb)
	}
	if !m.e.Caps(sb).Checkpoint {
		return errdefs.Conflict("sandbox %s was hibernated, which this daemon's runtime class %s cannot restore", sb.ID, m.e.ClassOf(sb))
	}
	if sb.State != sandbox.StateStarting { // starting: a wake cut short by a crash
		if err := op.Transition(ctx, sb, sandbox.StateStarting, cause, actor, reason); err != nil {
			return err
		}
	}
	err := failpoint.Inject("wake.after-starting")
	if err == nil {
		err = op.PrepareRecord(ctx, sb)
	}
	if err == nil {
		err = failpoint.Inject("wake.before-restore")
	}
	if err == nil {
		var h node.Hibernator
		if h, err = node.Need[node.Hibernator](m.node, node.OpWake); err == nil {
			err = h.Restore(ctx, sb)
		}
	}
	if err != nil {
		m.log.Warn("wake failed", "sandbox", sb.ID, "err", err)
		if herr := op.StopHost(ctx, sb); herr != nil {
			m.log.Warn("cleaning up failed wake", "sandbox", sb.ID, "err", herr)
		}
		// Still hibernated (marker and image kept): wake may be retried.
		if terr := op.Transition(ctx, sb, sandbox.StateStopped, sandbox.CauseReconciler, actor, engine.ReasonHibernated); terr != nil {
			m.log.Error("recording failed wake", "sandbox", sb.ID, "err", terr)
		}
		sb.Error = "wake: " + errdefs.Message(err)
		if sb.Error == "wake: internal error" {
			sb.Error = "wake: " + err.Error()
		}
		_ = m.store.UpdateSandbox(ctx, sb)
		return fmt.Errorf("waking: %w", err)
	}
	// Past the image's removal a wake only goes forward (a kill here is
	// finished by the reconciler): this point kills, it cannot fail.
	failpoint.Hit("wake.before-running")
	m.e.Touched(sb.ID)
	return op.Transition(ctx, sb, sandbox.StateRunning, cause, actor, reason)
}
