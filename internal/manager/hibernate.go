package manager

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/berth-sh/berth/internal/agent"
	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/internal/overlay"
	"github.com/berth-sh/berth/internal/runtime"
	"github.com/berth-sh/berth/internal/sandbox"
)

// Checkpointer is a runtime class that can save a container's processes
// and memory to a directory, ending the container, and start it again from
// there (gVisor: runsc checkpoint / restore). runc does not implement it:
// CRIU 3.17 (Debian 12) fails on this kernel.
type Checkpointer interface {
	Checkpoint(ctx context.Context, id, dir string) error
	Restore(ctx context.Context, id, bundle, dir string, log *os.File) error
}

// initSignaller signals only a container's init process (the agent).
type initSignaller interface {
	SignalInit(ctx context.Context, id string, sig syscall.Signal) error
}

// ReasonHibernated is the reason a hibernated sandbox's record carries.
const ReasonHibernated = "hibernated"

// hibernation is the marker kept in a hibernated sandbox's bundle
// (runtime.HibernatedMarker). The bundle is removed by a stop, reset or
// delete, which ends the hibernation with it; the runsc class refuses a
// fresh start while it exists.
type hibernation struct {
	Dir     string    `json:"dir"` // the checkpoint image
	Runtime string    `json:"runtime"`
	At      time.Time `json:"at"`
	Took    float64   `json:"checkpoint_seconds"`
}

// checkpointDir is where sandbox id's checkpoint image goes: in its scratch
// dir in the storage pool, so that a delete (which removes the scratch
// dir) removes the image too and doctor sees an orphaned one.
func (m *Manager) checkpointDir(id string) string {
	return filepath.Join(m.paths(id).scratch, "checkpoint")
}

func (m *Manager) hibernationMarker(id string) string {
	return filepath.Join(m.paths(id).bundle, runtime.HibernatedMarker)
}

// hibernationOf returns sb's hibernation, if it is hibernated: stopped,
// with a marker.
func (m *Manager) hibernationOf(sb *sandbox.Sandbox) (*hibernation, bool) {
	if sb.State != sandbox.StateStopped {
		return nil, false
	}
	data, err := os.ReadFile(m.hibernationMarker(sb.ID))
	if err != nil {
		return nil, false
	}
	var h hibernation
	if json.Unmarshal(data, &h) != nil || h.Dir == "" {
		return nil, false
	}
	return &h, true
}

// Hibernated reports whether sb is stopped with its processes and memory
// saved, to be restored by Wake.
func (m *Manager) Hibernated(sb *sandbox.Sandbox) bool {
	_, ok := m.hibernationOf(sb)
	return ok
}

// Hibernate saves a running or paused sandbox's processes and memory to
// disk and releases its compute and memory: the record goes to stopped
// with reason "hibernated"; its root filesystem and volumes are unmounted
// but kept as they are, with the checkpoint image. Wake restores it. The
// runtime class must implement Checkpointer (runsc); others get a 409.
func (m *Manager) Hibernate(ctx context.Context, ref, actor string) (*sandbox.Sandbox, error) {
	return m.op(ctx, ref, func(ctx context.Context, sb *sandbox.Sandbox) error {
		return m.hibernateLocked(ctx, sb, sandbox.CauseUser, actor)
	})
}

func (m *Manager) hibernateLocked(ctx context.Context, sb *sandbox.Sandbox, cause sandbox.Cause, actor string) error {
	rt := m.rtFor(sb)
	cp, ok := rt.(Checkpointer)
	sig, ok2 := rt.(initSignaller)
	if !ok || !ok2 {
		return errdefs.Conflict("hibernate is not supported by runtime class %s: it cannot checkpoint processes "+
			"(runc would need CRIU, and Debian's CRIU 3.17 fails on this kernel); create the sandbox with "+
			"runtime runsc, or use stop (files only) or pause (memory kept, in RAM)", rt.Name())
	}
	if sb.State != sandbox.StateRunning && sb.State != sandbox.StatePaused {
		return sandbox.ErrWrongState("hibernate", sb)
	}
	id := sb.ID
	dir := m.checkpointDir(id)
	wasPaused := sb.State == sandbox.StatePaused
	// The agent must run to close its socket.
	if wasPaused {
		if err := rt.Resume(ctx, id); err != nil {
			return fmt.Errorf("hibernate: resuming to checkpoint: %w", err)
		}
	}
	undo := func() {
		if wasPaused {
			_ = rt.Pause(context.WithoutCancel(ctx), id)
		}
	}
	m.cancelExecs(id)
	if err := os.RemoveAll(dir); err != nil {
		undo()
		return err
	}
	// gVisor cannot save the agent's listening socket (it is bound on the
	// host): have the agent close it, which removes the socket file.
	if err := m.quiesceAgent(ctx, id); err != nil {
		_ = sig.SignalInit(ctx, id, agent.SigRelisten)
		undo()
		return fmt.Errorf("hibernate: %w", err)
	}
	m.forgetAgent(id)
	t0 := time.Now()
	if err := cp.Checkpoint(ctx, id, dir); err != nil {
		_ = os.RemoveAll(dir)
		if st, serr := rt.State(ctx, id); serr == nil && (st.Status == runtime.StatusRunning || st.Status == runtime.StatusPaused) {
			// Still alive: serve again as before.
			if st.Status == runtime.StatusPaused {
				_ = rt.Resume(ctx, id)
			}
			_ = sig.SignalInit(ctx, id, agent.SigRelisten)
			if werr := m.waitReady(ctx, id); werr != nil {
				m.log.Warn("agent after failed checkpoint", "sandbox", id, "err", werr)
			}
			undo()
			return fmt.Errorf("hibernate: checkpoint failed, sandbox left %s: %w", sb.State, err)
		}
		// gVisor ends the sandbox when a save fails part way.
		m.log.Warn("checkpoint failed and the sandbox is gone; stopping it", "sandbox", id, "err", err)
		if serr := m.stopLocked(ctx, sb, sandbox.CauseReconciler, actor, "hibernate failed: processes lost"); serr != nil {
			m.log.Warn("stopping after failed checkpoint", "sandbox", id, "err", serr)
		}
		return fmt.Errorf("hibernate: checkpoint failed and the sandbox's processes are gone (it is stopped now): %w", err)
	}
	took := time.Since(t0)
	// From here the processes live only in the image.
	if err := m.transition(ctx, sb, sandbox.StateStopping, cause, actor, ReasonHibernated); err != nil {
		return err
	}
	mk, err := json.Marshal(hibernation{Dir: dir, Runtime: rt.Name(), At: m.now(), Took: took.Seconds()})
	if err == nil {
		err = os.WriteFile(m.hibernationMarker(id), mk, 0o600)
	}
	if err != nil {
		return fmt.Errorf("hibernate: writing marker: %w", err)
	}
	// Unmount the root and volumes like a stop, but keep the writable
	// layer and bundle: the restored processes need them as they were.
	// (stopHost kills what is left in the cgroup first: nothing, the
	// checkpoint ended the sandbox.)
	if err := m.stopHost(ctx, sb); err != nil {
		sb.Error = "hibernate: " + err.Error()
		_ = m.store.UpdateSandbox(ctx, sb)
		return fmt.Errorf("hibernate: releasing host resources: %w", err)
	}
	m.event(ctx, &sandbox.Event{SandboxID: id, Type: "hibernate", Actor: actor, Cause: cause, Outcome: "ok",
		Message: fmt.Sprintf("checkpoint of %s in %s", humanBytes(dirSize(dir)), took.Round(time.Millisecond))})
	return m.transition(ctx, sb, sandbox.StateStopped, cause, actor, ReasonHibernated)
}

// quiesceAgent asks the agent to close its listening socket and waits
// until the socket file is gone.
func (m *Manager) quiesceAgent(ctx context.Context, id string) error {
	qctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := m.agentFor(id).Quiesce(qctx); err != nil {
		return fmt.Errorf("asking the agent to close its socket: %w", err)
	}
	socket := filepath.Join(m.paths(id).run, agentSockName)
	deadline := time.Now().Add(5 * time.Second)
	for {
		if _, err := os.Lstat(socket); errors.Is(err, os.ErrNotExist) {
			return nil
		}
		if time.Now().After(deadline) {
			return errors.New("the agent did not close its socket within 5s")
		}
		time.Sleep(2 * time.Millisecond)
	}
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
	h, ok := m.hibernationOf(sb)
	if !ok {
		if sb.State == sandbox.StateStopped {
			return errdefs.Conflict("sandbox %s is stopped, not hibernated: use start", sb.ID)
		}
		return sandbox.ErrWrongState("wake", sb)
	}
	rt := m.rtFor(sb)
	cp, ok := rt.(Checkpointer)
	sig, ok2 := rt.(initSignaller)
	if !ok || !ok2 {
		return errdefs.Conflict("sandbox %s was hibernated by runtime class %s, which this daemon's %s cannot restore",
			sb.ID, h.Runtime, rt.Name())
	}
	if err := m.transition(ctx, sb, sandbox.StateStarting, cause, actor, reason); err != nil {
		return err
	}
	if err := m.restoreHost(ctx, sb, cp, sig, h); err != nil {
		m.log.Warn("wake failed", "sandbox", sb.ID, "err", err)
		if herr := m.stopHost(ctx, sb); herr != nil {
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
	_ = os.Remove(m.hibernationMarker(sb.ID))
	_ = os.RemoveAll(h.Dir)
	m.touch(sb.ID)
	return m.transition(ctx, sb, sandbox.StateRunning, cause, actor, reason)
}

// restoreHost mounts a hibernated sandbox's volumes and root as they were
// at the checkpoint, restores its container and waits for its agent.
func (m *Manager) restoreHost(ctx context.Context, sb *sandbox.Sandbox, cp Checkpointer, sig initSignaller, h *hibernation) error {
	id := sb.ID
	p := m.paths(id)
	layers := sb.Spec.Layers
	if len(layers) == 0 {
		tpl, err := m.store.GetTemplate(ctx, sb.Spec.Template)
		if err != nil {
			return fmt.Errorf("template %s: %w", sb.Spec.Template, err)
		}
		layers = tpl.Layers
	}
	if err := m.attachVolumes(ctx, sb); err != nil {
		return err
	}
	if err := m.mountVolumes(sb); err != nil {
		return err
	}
	if err := m.prepareScratch(sb); err != nil {
		return err
	}
	upper, work := m.layerDirs(sb)
	lowers := make([]string, 0, len(layers))
	for i := len(layers) - 1; i >= 0; i-- {
		if !m.images.HasLayer(layers[i]) {
			return fmt.Errorf("template %s: layer %s is missing from the image store", sb.Spec.Template, layers[i])
		}
		lowers = append(lowers, m.images.LayerPath(layers[i]))
	}
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
	for i := range sb.Spec.Volumes { // the checkpoint's bundle mounts them from there
		if _, err := m.volumeSource(sb, i); err != nil {
			return err
		}
	}
	// A wake interrupted after the restore left a container: start over.
	rt := m.rtFor(sb)
	if err := rt.Delete(ctx, id); err != nil {
		return err
	}
	// The guest's socket dir as at the checkpoint (stopHost unmounted
	// it), and a socket the daemon pins anew once the agent listens.
	uid, gid := m.idMapOf(sb).HostRoot()
	if err := mountRunTmpfs(p.run, uid, gid); err != nil {
		return err
	}
	if err := m.resetAgentPin(id); err != nil {
		return err
	}
	logw, err := m.openInitLog(id)
	if err != nil {
		return err
	}
	err = cp.Restore(ctx, id, p.bundle, h.Dir, logw)
	logw.Close()
	if err != nil {
		if tail := strings.TrimSpace(m.initLogTail(id, 2048, 100*time.Millisecond)); tail != "" {
			err = fmt.Errorf("%w: %s", err, tail)
		}
		return err
	}
	if data, err := os.ReadFile(filepath.Join(p.bundle, "init.pid")); err == nil {
		var pid int
		if _, err := fmt.Sscan(string(data), &pid); err == nil {
			go reap(pid)
		}
	}
	if err := sig.SignalInit(ctx, id, agent.SigRelisten); err != nil {
		return fmt.Errorf("signalling the restored agent: %w", err)
	}
	return m.waitReady(ctx, id)
}

func dirSize(dir string) int64 {
	var n int64
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if fi, err := e.Info(); err == nil && fi.Mode().IsRegular() {
			n += fi.Size()
		}
	}
	return n
}

func humanBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for v := n / unit; v >= unit; v /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}
