package manager

import (
	"context"
	"fmt"
	"time"

	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/internal/sandbox"
)

// ReasonHibernated is the reason a hibernated sandbox's record carries.
const ReasonHibernated = "hibernated"

// Hibernated reports whether sb is stopped with its processes and memory
// saved, to be restored by Wake.
func (m *Manager) Hibernated(sb *sandbox.Sandbox) bool {
	return sb.State == sandbox.StateStopped && m.node.Hibernated(sb)
}

// Hibernate saves a running or paused sandbox's processes and memory to
// disk and releases its compute and memory: the record goes to stopped
// with reason "hibernated"; its root filesystem and volumes are unmounted
// but kept as they are, with the checkpoint image. Wake restores it. The
// runtime class must have the checkpoint capability; others get a 409.
func (m *Manager) Hibernate(ctx context.Context, ref, actor string) (*sandbox.Sandbox, error) {
	return m.op(ctx, ref, func(ctx context.Context, sb *sandbox.Sandbox) error {
		return m.hibernateLocked(ctx, sb, sandbox.CauseUser, actor)
	})
}

func (m *Manager) hibernateLocked(ctx context.Context, sb *sandbox.Sandbox, cause sandbox.Cause, actor string) error {
	if !m.caps(sb).Checkpoint {
		return errdefs.Conflict("hibernate is not supported by runtime class %s: it cannot checkpoint processes "+
			"(runc would need CRIU, and Debian's CRIU 3.17 fails on this kernel); create the sandbox with "+
			"runtime runsc, or use stop (files only) or pause (memory kept, in RAM)", m.classOf(sb))
	}
	if sb.State != sandbox.StateRunning && sb.State != sandbox.StatePaused {
		return sandbox.ErrWrongState("hibernate", sb)
	}
	if l := m.live.peek(sb.ID); l != nil {
		l.cancelExecs()
	}
	cp, alive, err := m.node.Checkpoint(ctx, sb)
	if err != nil {
		if !alive {
			m.log.Warn("checkpoint failed and the sandbox is gone; stopping it", "sandbox", sb.ID, "err", err)
			if serr := m.stopLocked(ctx, sb, sandbox.CauseReconciler, actor, "hibernate failed: processes lost"); serr != nil {
				m.log.Warn("stopping after failed checkpoint", "sandbox", sb.ID, "err", serr)
			}
		}
		return err
	}
	// From here the processes live only in the image.
	if err := m.transition(ctx, sb, sandbox.StateStopping, cause, actor, ReasonHibernated); err != nil {
		return err
	}
	// Unmount the root and volumes like a stop, but keep the writable
	// layer and bundle: the restored processes need them as they were.
	if err := m.stopProcesses(ctx, sb, m.node.Stop); err != nil {
		sb.Error = "hibernate: " + err.Error()
		_ = m.store.UpdateSandbox(ctx, sb)
		return fmt.Errorf("hibernate: releasing host resources: %w", err)
	}
	m.event(ctx, &sandbox.Event{SandboxID: sb.ID, Type: "hibernate", Actor: actor, Cause: cause, Outcome: "ok",
		Message: fmt.Sprintf("checkpoint of %s in %s", humanBytes(cp.SizeBytes), cp.Took.Round(time.Millisecond))})
	return m.transition(ctx, sb, sandbox.StateStopped, cause, actor, ReasonHibernated)
}

// classOf names sb's runtime class.
func (m *Manager) classOf(sb *sandbox.Sandbox) string {
	if sb.Spec.Runtime != "" {
		return sb.Spec.Runtime
	}
	return m.DefaultRuntime()
}

// Wake restores a hibernated sandbox: its root and volumes are mounted
// again and its processes continue from the checkpoint, in the same
// memory state. The checkpoint image is removed once it runs.
func (m *Manager) Wake(ctx context.Context, ref, actor string) (*sandbox.Sandbox, error) {
	return m.op(ctx, ref, func(ctx context.Context, sb *sandbox.Sandbox) error {
		return m.wakeLocked(ctx, sb, sandbox.CauseUser, actor, "woken from hibernation")
	})
}

func (m *Manager) wakeLocked(ctx context.Context, sb *sandbox.Sandbox, cause sandbox.Cause, actor, reason string) error {
	if !m.Hibernated(sb) {
		if sb.State == sandbox.StateStopped {
			return errdefs.Conflict("sandbox %s is stopped, not hibernated: use start", sb.ID)
		}
		return sandbox.ErrWrongState("wake", sb)
	}
	if !m.caps(sb).Checkpoint {
		return errdefs.Conflict("sandbox %s was hibernated, which this daemon's runtime class %s cannot restore", sb.ID, m.classOf(sb))
	}
	if err := m.transition(ctx, sb, sandbox.StateStarting, cause, actor, reason); err != nil {
		return err
	}
	err := m.prepareRecord(ctx, sb)
	if err == nil {
		err = m.node.Restore(ctx, sb)
	}
	if err != nil {
		m.log.Warn("wake failed", "sandbox", sb.ID, "err", err)
		if herr := m.stopProcesses(ctx, sb, m.node.Stop); herr != nil {
			m.log.Warn("cleaning up failed wake", "sandbox", sb.ID, "err", herr)
		}
		// Still hibernated (marker and image kept): wake may be retried.
		if terr := m.transition(ctx, sb, sandbox.StateStopped, sandbox.CauseReconciler, actor, ReasonHibernated); terr != nil {
			m.log.Error("recording failed wake", "sandbox", sb.ID, "err", terr)
		}
		sb.Error = "wake: " + errdefs.Message(err)
		if sb.Error == "wake: internal error" {
			sb.Error = "wake: " + err.Error()
		}
		_ = m.store.UpdateSandbox(ctx, sb)
		return fmt.Errorf("waking: %w", err)
	}
	m.touch(sb.ID)
	return m.transition(ctx, sb, sandbox.StateRunning, cause, actor, reason)
}
