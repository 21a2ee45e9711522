package manager

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/internal/cgroups"
	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/internal/failpoint"
	"github.com/berth-sh/berth/internal/sandbox"
)

// op runs fn on the current record of sandbox ref under its lock.
func (m *Manager) op(ctx context.Context, ref string, fn func(context.Context, *sandbox.Sandbox) error) (*sandbox.Sandbox, error) {
	sb, err := m.local(ctx, ref)
	if err != nil {
		return nil, err
	}
	ctx = context.WithoutCancel(ctx)
	unlock := m.locks.Lock(sb.ID)
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
func (m *Manager) Pause(ctx context.Context, ref, actor string) (*sandbox.Sandbox, error) {
	return m.op(ctx, ref, func(ctx context.Context, sb *sandbox.Sandbox) error {
		return m.pauseLocked(ctx, sb, sandbox.CauseUser, actor, "paused by user")
	})
}

func (m *Manager) pauseLocked(ctx context.Context, sb *sandbox.Sandbox, cause sandbox.Cause, actor, reason string) error {
	if sb.State != sandbox.StateRunning {
		return sandbox.ErrWrongState("pause", sb)
	}
	if err := m.rtFor(sb).Pause(ctx, sb.ID); err != nil {
		return fmt.Errorf("pausing: %w", err)
	}
	// A crash here leaves a frozen sandbox under a running record: the
	// restart thaws it (recoverOne), the record being the intent.
	failpoint.Hit("pause.after-freeze")
	if err := m.transition(ctx, sb, sandbox.StatePaused, cause, actor, reason); err != nil {
		_ = m.rtFor(sb).Resume(ctx, sb.ID)
		return err
	}
	return nil
}

// Resume thaws a paused sandbox.
func (m *Manager) Resume(ctx context.Context, ref, actor string) (*sandbox.Sandbox, error) {
	return m.op(ctx, ref, func(ctx context.Context, sb *sandbox.Sandbox) error {
		return m.resumeLocked(ctx, sb, sandbox.CauseUser, actor, "resumed by user")
	})
}

func (m *Manager) resumeLocked(ctx context.Context, sb *sandbox.Sandbox, cause sandbox.Cause, actor, reason string) error {
	if sb.State != sandbox.StatePaused {
		return sandbox.ErrWrongState("resume", sb)
	}
	if err := m.rtFor(sb).Resume(ctx, sb.ID); err != nil {
		return fmt.Errorf("resuming: %w", err)
	}
	m.touch(sb.ID)
	return m.transition(ctx, sb, sandbox.StateRunning, cause, actor, reason)
}

// Stop scales a sandbox to zero: processes and memory go; its volume (and,
// with persist_root, its writable root layer), config, policies and
// hostname are kept for Start.
func (m *Manager) Stop(ctx context.Context, ref, actor string) (*sandbox.Sandbox, error) {
	return m.op(ctx, ref, func(ctx context.Context, sb *sandbox.Sandbox) error {
		return m.stopLocked(ctx, sb, sandbox.CauseUser, actor, "stopped by user")
	})
}

func (m *Manager) stopLocked(ctx context.Context, sb *sandbox.Sandbox, cause sandbox.Cause, actor, reason string) error {
	if sb.State != sandbox.StateRunning && sb.State != sandbox.StatePaused && sb.State != sandbox.StateStopping {
		return sandbox.ErrWrongState("stop", sb)
	}
	if sb.State != sandbox.StateStopping {
		if err := m.transition(ctx, sb, sandbox.StateStopping, cause, actor, reason); err != nil {
			return err
		}
	}
	if err := m.stopHost(ctx, sb); err != nil {
		sb.Error = "stop: " + err.Error()
		_ = m.store.UpdateSandbox(ctx, sb)
		return fmt.Errorf("stopping (will be retried): %w", err)
	}
	if err := m.discardScratch(sb); err != nil {
		return err
	}
	return m.transition(ctx, sb, sandbox.StateStopped, cause, actor, reason)
}

// discardScratch removes the writable layer that does not persist: all of
// an ephemeral sandbox's, and a persistent one's unless persist_root.
func (m *Manager) discardScratch(sb *sandbox.Sandbox) error {
	if !persistsRoot(sb) {
		if err := m.dropScratch(sb.ID); err != nil {
			return err
		}
	}
	return os.RemoveAll(m.paths(sb.ID).bundle)
}

// Start brings a stopped sandbox back from its template plus its volume.
func (m *Manager) Start(ctx context.Context, ref, actor string) (*sandbox.Sandbox, error) {
	return m.op(ctx, ref, func(ctx context.Context, sb *sandbox.Sandbox) error {
		return m.startLocked(ctx, sb, sandbox.CauseUser, actor, "started by user")
	})
}

func (m *Manager) startLocked(ctx context.Context, sb *sandbox.Sandbox, cause sandbox.Cause, actor, reason string) error {
	if sb.State != sandbox.StateStopped && sb.State != sandbox.StateStarting {
		return sandbox.ErrWrongState("start", sb)
	}
	if sb.State == sandbox.StateStopped && m.Hibernated(sb) {
		// Its processes and memory were checkpointed: bring them back.
		return m.wakeLocked(ctx, sb, cause, actor, reason)
	}
	if sb.State != sandbox.StateStarting {
		if err := m.transition(ctx, sb, sandbox.StateStarting, cause, actor, reason); err != nil {
			return err
		}
	}
	if err := m.provision(ctx, sb); err != nil {
		m.log.Warn("start failed", "sandbox", sb.ID, "err", err)
		if herr := m.stopHost(ctx, sb); herr != nil {
			m.log.Warn("cleaning up failed start", "sandbox", sb.ID, "err", herr)
		}
		sb.Error = "start: " + errdefs.Message(err)
		if terr := m.transition(ctx, sb, sandbox.StateStopped, sandbox.CauseReconciler, actor, "start failed"); terr != nil {
			m.log.Error("recording failed start", "sandbox", sb.ID, "err", terr)
		}
		return fmt.Errorf("starting: %w", err)
	}
	return m.transition(ctx, sb, sandbox.StateRunning, cause, actor, reason)
}

// Reset returns the writable root layer and the workspace volume to the
// template; config and policies are kept. A running sandbox is restarted.
func (m *Manager) Reset(ctx context.Context, ref, actor string) (*sandbox.Sandbox, error) {
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
		if err := m.wipe(sb); err != nil {
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

// wipe empties a stopped sandbox's writable layer and owned workspace.
func (m *Manager) wipe(sb *sandbox.Sandbox) error {
	if err := m.discardScratch(sb); err != nil {
		return err
	}
	for _, vm := range sb.Spec.Volumes {
		if !vm.Owned {
			continue // named volumes are the user's, not the template's
		}
		if err := m.volumes.Mount(vm.VolumeID); err != nil {
			return err
		}
		root := m.volumes.Path(vm.VolumeID)
		for _, d := range []string{volumeDataDir, rootLayerDir} {
			if err := os.RemoveAll(filepath.Join(root, d)); err != nil {
				return err
			}
		}
		if err := m.volumes.Unmount(vm.VolumeID); err != nil {
			return err
		}
	}
	return nil
}

// Quarantine freezes a sandbox and refuses exec and writes, keeping all of
// its state for inspection; file reads stay possible. Release or delete
// ends it.
func (m *Manager) Quarantine(ctx context.Context, ref, actor string) (*sandbox.Sandbox, error) {
	return m.op(ctx, ref, func(ctx context.Context, sb *sandbox.Sandbox) error {
		prev := sb.State
		switch prev {
		case sandbox.StateRunning:
			if err := m.rtFor(sb).Pause(ctx, sb.ID); err != nil {
				return fmt.Errorf("freezing: %w", err)
			}
			m.cancelExecs(sb.ID)
		case sandbox.StatePaused, sandbox.StateStopped:
		default:
			return sandbox.ErrWrongState("quarantine", sb)
		}
		if err := m.setQuarantineNetwork(sb, true); err != nil {
			m.log.Warn("cutting quarantined sandbox's network", "sandbox", sb.ID, "err", err)
		}
		sb.PrevState = prev
		if err := m.transition(ctx, sb, sandbox.StateQuarantined, sandbox.CauseAdmin, actor, "quarantined"); err != nil {
			if prev == sandbox.StateRunning {
				_ = m.rtFor(sb).Resume(ctx, sb.ID)
			}
			return err
		}
		return nil
	})
}

// Release ends a quarantine: the sandbox returns to the state it had.
func (m *Manager) Release(ctx context.Context, ref, actor string) (*sandbox.Sandbox, error) {
	return m.op(ctx, ref, func(ctx context.Context, sb *sandbox.Sandbox) error {
		if sb.State != sandbox.StateQuarantined {
			return sandbox.ErrWrongState("release", sb)
		}
		to := sb.PrevState
		if to == "" {
			to = sandbox.StatePaused
		}
		if to == sandbox.StateRunning {
			if err := m.rtFor(sb).Resume(ctx, sb.ID); err != nil {
				return fmt.Errorf("thawing: %w", err)
			}
		}
		sb.PrevState = ""
		if err := m.setQuarantineNetwork(sb, false); err != nil {
			return fmt.Errorf("restoring network rules: %w", err)
		}
		return m.transition(ctx, sb, to, sandbox.CauseAdmin, actor, "released from quarantine")
	})
}

// Touch records activity: a keep-alive that pushes idle timeouts back.
func (m *Manager) Touch(ctx context.Context, ref, actor string) (*sandbox.Sandbox, error) {
	return m.op(ctx, ref, func(ctx context.Context, sb *sandbox.Sandbox) error {
		if !sb.State.Live() {
			return sandbox.ErrWrongState("touch", sb)
		}
		sb.LastActivityAt = m.now()
		m.mu.Lock()
		delete(m.activity, sb.ID)
		m.mu.Unlock()
		return m.store.UpdateSandbox(ctx, sb)
	})
}

// touch notes activity in memory; the reconciler stores it.
func (m *Manager) touch(id string) {
	m.mu.Lock()
	m.activity[id] = m.now()
	m.mu.Unlock()
}

// lastActivity is the latest known activity of sb: stored or in memory.
func (m *Manager) lastActivity(sb *sandbox.Sandbox) time.Time {
	m.mu.Lock()
	t := m.activity[sb.ID]
	m.mu.Unlock()
	if sb.LastActivityAt.After(t) {
		return sb.LastActivityAt
	}
	return t
}

// openExecs counts the execs running in sandbox id.
func (m *Manager) openExecs(id string) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := 0
	for k := range m.cancels {
		if strings.HasPrefix(k, id+"/") {
			n++
		}
	}
	return n
}

type cpuSample struct {
	at    time.Time
	usage time.Duration
}

// busy reports whether sb's processes used more CPU than its idle
// threshold since the last sample.
func (m *Manager) busy(sb *sandbox.Sandbox) bool {
	th := sb.Spec.Policy.IdleCPUThreshold
	if th < 0 {
		return false
	}
	if th == 0 {
		th = sandbox.DefaultIdleCPUThreshold
	}
	usage, err := cgroups.CPUUsage(m.paths(sb.ID).cgroup)
	if err != nil {
		return false
	}
	now := time.Now()
	m.mu.Lock()
	prev, ok := m.cpu[sb.ID]
	m.cpu[sb.ID] = cpuSample{at: now, usage: usage}
	m.mu.Unlock()
	if !ok {
		return false
	}
	el := now.Sub(prev.at)
	return el > 0 && float64(usage-prev.usage)/float64(el) > th
}

// readyForUse brings a paused or stopped sandbox with auto_resume back to
// running before a request that needs it; it refuses quarantined ones.
func (m *Manager) readyForUse(ctx context.Context, sb *sandbox.Sandbox, what, actor string) (*sandbox.Sandbox, error) {
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
// root layer (overlay upper dir) against the template's layers, plus
// everything in its workspace volume.
func (m *Manager) Diff(ctx context.Context, ref string) ([]api.DiffEntry, error) {
	sb, err := m.local(ctx, ref)
	if err != nil {
		return nil, err
	}
	// Held while the volumes of a stopped sandbox are mounted to be read.
	unlock := m.locks.Lock(sb.ID)
	defer unlock()
	if !sb.State.Live() {
		return nil, sandbox.ErrWrongState("diff", sb)
	}
	tpl, err := m.store.GetTemplate(ctx, sb.Spec.Template)
	if err != nil {
		return nil, err
	}
	const maxEntries = 100000
	out := []api.DiffEntry{}
	add := func(e api.DiffEntry) error {
		if len(out) >= maxEntries {
			return errdefs.TooLarge("more than %d changed paths", maxEntries)
		}
		out = append(out, e)
		return nil
	}
	inLower := func(rel string) bool {
		for _, l := range tpl.Layers {
			if _, err := os.Lstat(filepath.Join(m.images.LayerPath(l), rel)); err == nil {
				return true
			}
		}
		return false
	}
	upper, _ := m.layerDirs(sb)
	// So must the writable layer of a hibernated one.
	if m.scratch.Exists(sb.ID) && !m.scratch.Mounted(sb.ID) {
		if err := m.scratch.Mount(sb.ID); err == nil {
			defer m.scratch.Unmount(sb.ID)
		}
	}
	// Volumes of a stopped sandbox must be mounted to be read.
	for _, vm := range sb.Spec.Volumes {
		if vm.Owned && !m.volumes.Mounted(vm.VolumeID) {
			if err := m.volumes.Mount(vm.VolumeID); err == nil {
				defer func(id string) {
					if cur, err := m.store.GetSandbox(context.WithoutCancel(ctx), owner(ctx), sb.ID); err == nil && cur.State == sandbox.StateStopped {
						_ = m.volumes.Unmount(id)
					}
				}(vm.VolumeID)
			}
		}
	}
	err = walk(upper, func(rel string, d fs.DirEntry, info fs.FileInfo) error {
		if rel == ".berth" || strings.HasPrefix(rel, ".berth/") {
			return nil
		}
		if info.Mode()&fs.ModeCharDevice != 0 {
			if st, ok := info.Sys().(*syscall.Stat_t); ok && st.Rdev == 0 {
				return add(api.DiffEntry{Path: "/" + rel, Kind: "removed"})
			}
		}
		existed := inLower(rel)
		if info.IsDir() {
			if existed {
				return nil // contents are listed one by one
			}
			return add(api.DiffEntry{Path: "/" + rel, Kind: "added", Dir: true})
		}
		kind := "added"
		if existed {
			kind = "changed"
		}
		return add(api.DiffEntry{Path: "/" + rel, Kind: kind, Size: info.Size()})
	})
	if err != nil {
		return nil, err
	}
	for _, vm := range sb.Spec.Volumes {
		if !vm.Owned {
			continue
		}
		err := walk(filepath.Join(m.volumes.Path(vm.VolumeID), volumeDataDir), func(rel string, d fs.DirEntry, info fs.FileInfo) error {
			return add(api.DiffEntry{Path: filepath.Join(vm.Path, rel), Kind: "added", Size: sizeOf(info), Dir: info.IsDir()})
		})
		if err != nil {
			return nil, err
		}
	}
	return out, nil
}

func sizeOf(info fs.FileInfo) int64 {
	if info.IsDir() {
		return 0
	}
	return info.Size()
}

// walk visits every entry below root (not root itself) without following
// symlinks; a missing root is empty.
func walk(root string, fn func(rel string, d fs.DirEntry, info fs.FileInfo) error) error {
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		if path == root {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return nil
		}
		rel, _ := filepath.Rel(root, path)
		return fn(rel, d, info)
	})
	return err
}
