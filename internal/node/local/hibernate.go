package local

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
	"github.com/berth-sh/berth/internal/atomicfile"
	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/internal/failpoint"
	"github.com/berth-sh/berth/internal/node"
	"github.com/berth-sh/berth/internal/node/local/agentchan"
	"github.com/berth-sh/berth/internal/runtime"
	"github.com/berth-sh/berth/internal/sandbox"
)

// checkpointer is a runtime class that can save a container's processes
// and memory to a directory, ending the container, and start it again from
// there (gVisor: runsc checkpoint / restore). runc does not implement it:
// CRIU 3.17 (Debian 12) fails on this kernel.
type checkpointer interface {
	Checkpoint(ctx context.Context, id, dir string) error
	Restore(ctx context.Context, id, bundle, dir string, log *os.File) error
}

// initSignaller signals only a container's init process (the agent).
type initSignaller interface {
	SignalInit(ctx context.Context, id string, sig syscall.Signal) error
}

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
func (b *Backend) checkpointDir(id string) string {
	return filepath.Join(b.paths(id).scratch, "checkpoint")
}

func (b *Backend) hibernationMarker(id string) string {
	return filepath.Join(b.paths(id).bundle, runtime.HibernatedMarker)
}

// hibernatingIntent is the file a checkpoint in progress keeps in the
// sandbox's bundle, from before the agent is quiesced until the marker is
// written (or the checkpoint undone). A daemon killed in between finds it
// at its next start (recoverCheckpoints) and brings the sandbox back to
// one of the two states a hibernate may leave: running as before, or
// hibernated with a complete image.
const hibernatingIntent = "berth-hibernating.json"

func (b *Backend) hibernatingIntent(id string) string {
	return filepath.Join(b.paths(id).bundle, hibernatingIntent)
}

// hibernationOf returns sb's hibernation marker, if it has one.
func (b *Backend) hibernationOf(sb *sandbox.Sandbox) (*hibernation, bool) {
	data, err := os.ReadFile(b.hibernationMarker(sb.ID))
	if err != nil {
		return nil, false
	}
	var h hibernation
	if json.Unmarshal(data, &h) != nil || h.Dir == "" {
		return nil, false
	}
	return &h, true
}

// Hibernated reports whether sb has its processes and memory saved, to be
// restored by Restore.
func (b *Backend) Hibernated(sb *sandbox.Sandbox) bool {
	_, ok := b.hibernationOf(sb)
	return ok
}

func (b *Backend) checkpointClass(sb *sandbox.Sandbox) (checkpointer, initSignaller, error) {
	rt := b.rtFor(sb)
	cp, ok := rt.(checkpointer)
	sig, ok2 := rt.(initSignaller)
	if !ok || !ok2 {
		return nil, nil, errdefs.Conflict("hibernate is not supported by runtime class %s: it cannot checkpoint processes "+
			"(runc would need CRIU, and Debian's CRIU 3.17 fails on this kernel); create the sandbox with "+
			"runtime runsc, or use stop (files only) or pause (memory kept, in RAM)", rt.Name())
	}
	return cp, sig, nil
}

// Checkpoint saves a running or paused sandbox's processes and memory in
// its scratch dir and ends its container; the marker in its bundle says
// so. On failure alive says whether it still runs (as it did before).
func (b *Backend) Checkpoint(ctx context.Context, sb *sandbox.Sandbox) (node.Checkpoint, bool, error) {
	cp, sig, err := b.checkpointClass(sb)
	if err != nil {
		return node.Checkpoint{}, true, err
	}
	rt := b.rtFor(sb)
	id := sb.ID
	dir := b.checkpointDir(id)
	wasPaused := sb.State == sandbox.StatePaused
	// The agent must run to close its socket.
	if wasPaused {
		if err := rt.Resume(ctx, id); err != nil {
			return node.Checkpoint{}, true, fmt.Errorf("hibernate: resuming to checkpoint: %w", err)
		}
	}
	undo := func() {
		if wasPaused {
			_ = rt.Pause(context.WithoutCancel(ctx), id)
		}
	}
	if err := os.RemoveAll(dir); err != nil {
		undo()
		return node.Checkpoint{}, true, err
	}
	intent, err := json.Marshal(hibernation{Dir: dir, Runtime: rt.Name(), At: time.Now().UTC()})
	if err == nil {
		err = atomicfile.Write(b.hibernatingIntent(id), intent, 0o600)
	}
	if err != nil {
		undo()
		return node.Checkpoint{}, true, fmt.Errorf("hibernate: writing intent: %w", err)
	}
	defer os.Remove(b.hibernatingIntent(id)) // each return settles it
	// gVisor cannot save the agent's listening socket (it is bound on the
	// host): have the agent close it, which removes the socket file.
	if err := b.quiesceAgent(ctx, id); err != nil {
		b.relisten(ctx, id, sig)
		undo()
		return node.Checkpoint{}, true, fmt.Errorf("hibernate: %w", err)
	}
	b.forgetAgent(id)
	err = failpoint.Inject("hibernate.after-quiesce")
	t0 := time.Now()
	if err == nil {
		err = cp.Checkpoint(ctx, id, dir)
	}
	if err != nil {
		_ = os.RemoveAll(dir)
		if st, serr := rt.State(ctx, id); serr == nil && (st.Status == runtime.StatusRunning || st.Status == runtime.StatusPaused) {
			// Still alive: serve again as before.
			if st.Status == runtime.StatusPaused {
				_ = rt.Resume(ctx, id)
			}
			b.relisten(ctx, id, sig)
			if werr := b.waitReady(ctx, id); werr != nil {
				b.log.Warn("agent after failed checkpoint", "sandbox", id, "err", werr)
			}
			undo()
			return node.Checkpoint{}, true, fmt.Errorf("hibernate: checkpoint failed, sandbox left %s: %w", sb.State, err)
		}
		// gVisor ends the sandbox when a save fails part way.
		return node.Checkpoint{}, false, fmt.Errorf("hibernate: checkpoint failed and the sandbox's processes are gone (it is stopped now): %w", err)
	}
	took := time.Since(t0)
	// From here the processes live only in the image, which is complete:
	// a step that fails still records it (the marker), so that the
	// engine can undo the hibernate by restoring it (alive false and
	// Hibernated true), as recoverCheckpoints does after a kill.
	mk, err := json.Marshal(hibernation{Dir: dir, Runtime: rt.Name(), At: time.Now().UTC(), Took: took.Seconds()})
	if err != nil {
		return node.Checkpoint{}, false, fmt.Errorf("hibernate: writing marker: %w", err)
	}
	if ferr := failpoint.Inject("hibernate.after-checkpoint"); ferr != nil {
		if werr := atomicfile.Write(b.hibernationMarker(id), mk, 0o600); werr != nil {
			return node.Checkpoint{}, false, fmt.Errorf("hibernate: %w (and writing marker: %v)", ferr, werr)
		}
		return node.Checkpoint{}, false, fmt.Errorf("hibernate: %w", ferr)
	}
	if err := atomicfile.Write(b.hibernationMarker(id), mk, 0o600); err != nil {
		return node.Checkpoint{}, false, fmt.Errorf("hibernate: writing marker: %w", err)
	}
	if err := failpoint.Inject("hibernate.after-marker"); err != nil {
		return node.Checkpoint{}, false, fmt.Errorf("hibernate: %w", err)
	}
	return node.Checkpoint{Took: took, SizeBytes: dirSize(dir)}, false, nil
}

// relisten has a quiesced agent listen again: its new socket is another
// file than the pinned one, so the pin is forgotten first (the next ping
// pins the new one).
func (b *Backend) relisten(ctx context.Context, id string, sig initSignaller) {
	if err := b.resetAgentPin(id); err != nil {
		b.log.Warn("resetting the agent pin", "sandbox", id, "err", err)
	}
	if err := sig.SignalInit(ctx, id, agent.SigRelisten); err != nil {
		b.log.Warn("asking the agent to listen again", "sandbox", id, "err", err)
	}
}

// quiesceAgent asks the agent to close its listening socket and waits
// until the socket file is gone.
func (b *Backend) quiesceAgent(ctx context.Context, id string) error {
	qctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := b.agentFor(id).Quiesce(qctx); err != nil {
		return fmt.Errorf("asking the agent to close its socket: %w", err)
	}
	socket := filepath.Join(b.paths(id).run, agentchan.SockName)
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

// Restore mounts a hibernated sandbox's volumes and root as they were at
// the checkpoint, restores its container and waits for its agent; the
// marker and image are removed once it runs.
func (b *Backend) Restore(ctx context.Context, sb *sandbox.Sandbox) error {
	h, ok := b.hibernationOf(sb)
	if !ok {
		return errdefs.Conflict("sandbox %s is stopped, not hibernated: use start", sb.ID)
	}
	cp, sig, err := b.checkpointClass(sb)
	if err != nil {
		return errdefs.Conflict("sandbox %s was hibernated by runtime class %s, which this daemon's %s cannot restore",
			sb.ID, h.Runtime, b.rtFor(sb).Name())
	}
	id := sb.ID
	p := b.paths(id)
	if err := b.mountVolumes(sb); err != nil {
		return err
	}
	if err := b.prepareScratch(sb); err != nil {
		return err
	}
	upper, work := b.layerDirs(sb)
	lowers, err := b.lowerDirs(sb)
	if err != nil {
		return err
	}
	if err := b.mountRoot(sb, lowers, upper, work); err != nil {
		return err
	}
	for i := range sb.Spec.Volumes { // the checkpoint's bundle mounts them from there
		if _, err := b.volumeSource(sb, i); err != nil {
			return err
		}
	}
	// A wake interrupted after the restore left a container: start over.
	rt := b.rtFor(sb)
	if err := rt.Delete(ctx, id); err != nil {
		return err
	}
	// The guest's socket dir as at the checkpoint (Stop unmounted it),
	// and a socket the daemon pins anew once the agent listens.
	uid, gid := b.idMapOf(sb).HostRoot()
	if err := agentchan.MountRunTmpfs(p.run, uid, gid); err != nil {
		return err
	}
	if err := b.resetAgentPin(id); err != nil {
		return err
	}
	// The checkpoint's bundle binds the resolv.conf of berth's resolver
	// (in the daemon's share tmpfs, which a daemon restart empties) and
	// names the network namespace it was made in (the hibernation's stop
	// removed it with the veth): both anew. gVisor's netstack takes the
	// interfaces of a namespace wired anew.
	if sb.Spec.Network == "egress" {
		if _, err := b.resolvConf(ctx, sb); err != nil {
			return err
		}
		if netnsBeforeStart(rt) {
			if _, err := b.wireNetns(ctx, sb); err != nil {
				return err
			}
		}
	}
	logw, err := b.openInitLog(id)
	if err != nil {
		return err
	}
	err = cp.Restore(ctx, id, p.bundle, h.Dir, logw)
	logw.Close()
	if err != nil {
		if tail := strings.TrimSpace(b.initLogTail(id, 2048, 100*time.Millisecond)); tail != "" {
			err = fmt.Errorf("%w: %s", err, tail)
		}
		return err
	}
	// A step failing from here leaves the restored container to the
	// engine's undo (Stop), the marker and image as they were: a wake
	// may be tried again.
	if err := failpoint.Inject("wake.after-restore"); err != nil {
		return err
	}
	if err := sig.SignalInit(ctx, id, agent.SigRelisten); err != nil {
		return fmt.Errorf("signalling the restored agent: %w", err)
	}
	if err := b.waitReady(ctx, id); err != nil {
		return err
	}
	if err := failpoint.Inject("wake.after-ready"); err != nil {
		return err
	}
	// The marker first: a sandbox with a marker and no image would be
	// lost, an image with no marker is garbage recoverCheckpoints removes.
	if err := os.Remove(b.hibernationMarker(id)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	if err := failpoint.Inject("wake.after-marker"); err != nil {
		// The image is still whole: named again, it stays wakeable.
		if mk, merr := json.Marshal(h); merr == nil {
			if werr := atomicfile.Write(b.hibernationMarker(id), mk, 0o600); werr != nil {
				return fmt.Errorf("%w (and writing the marker back: %v)", err, werr)
			}
		}
		return err
	}
	_ = os.RemoveAll(h.Dir)
	return nil
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

// recoverCheckpoints settles, at the backend's start, the hibernations
// and wakes a killed daemon left half done, so that the engine's recovery
// finds each such sandbox running as before (its agent listening again)
// or hibernated with a complete image (the marker written), never with
// processes alive that no one can reach or an image no marker names:
//   - an intent and no marker: the checkpoint was cut short. If the
//     container still runs, it did not happen: the agent, quiesced, is
//     told to listen again and the partial image goes. If the container
//     is gone and runsc's image is there, the save finished (the runsc
//     client outlives the daemon, and gVisor ends a sandbox only after
//     its save): the marker is written.
//   - an image and neither marker nor intent: a wake removed the marker
//     and was killed before the image; the image is garbage.
//
// rts are the classes to settle for: all of them at start, or one that
// joined later (AddRuntime, atStart false: only its intents are settled).
// An intent of a class not in rts is left for when that class comes.
func (b *Backend) recoverCheckpoints(rts map[string]runtime.Runtime, atStart bool) {
	ents, err := os.ReadDir(filepath.Join(b.cfg.DataDir, "sandboxes"))
	if err != nil {
		return
	}
	for _, e := range ents {
		if !e.IsDir() {
			continue
		}
		id := e.Name()
		data, err := os.ReadFile(b.hibernatingIntent(id))
		if err != nil {
			if !atStart {
				continue
			}
			if _, merr := os.Stat(b.hibernationMarker(id)); errors.Is(merr, os.ErrNotExist) {
				if _, derr := os.Stat(b.checkpointDir(id)); derr == nil {
					b.log.Info("removing the checkpoint image of a finished wake", "sandbox", id)
					_ = os.RemoveAll(b.checkpointDir(id))
				}
			}
			continue
		}
		var h hibernation
		if json.Unmarshal(data, &h) != nil || h.Dir != b.checkpointDir(id) {
			b.log.Warn("unreadable hibernate intent; removed", "sandbox", id)
			_ = os.Remove(b.hibernatingIntent(id))
			continue
		}
		if _, err := os.Stat(b.hibernationMarker(id)); err == nil {
			_ = os.Remove(b.hibernatingIntent(id)) // finished: the engine completes it
			continue
		}
		rt := rts[h.Runtime]
		if rt == nil {
			if atStart {
				b.log.Warn("hibernate intent of a runtime class this daemon lacks (now); left", "sandbox", id, "runtime", h.Runtime)
			}
			continue
		}
		b.settleCheckpoint(id, &h, rt)
	}
}

func (b *Backend) settleCheckpoint(id string, h *hibernation, rt runtime.Runtime) {
	log := b.log.With("sandbox", id)
	sig, ok := rt.(initSignaller)
	if !ok {
		log.Warn("hibernate intent of a runtime class that cannot checkpoint; left", "runtime", h.Runtime)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), b.cfg.ReadyTimeout+30*time.Second)
	defer cancel()
	promote := func() bool {
		if _, err := os.Stat(filepath.Join(h.Dir, "checkpoint.img")); err != nil {
			return false
		}
		mk, err := json.Marshal(hibernation{Dir: h.Dir, Runtime: h.Runtime, At: time.Now().UTC()})
		if err == nil {
			err = atomicfile.Write(b.hibernationMarker(id), mk, 0o600)
		}
		if err != nil {
			log.Warn("recording a finished checkpoint", "err", err)
			return false
		}
		_ = rt.Delete(ctx, id) // what runsc keeps of the ended sandbox
		log.Info("a checkpoint the daemon did not see finish is complete: the sandbox is hibernated")
		return true
	}
	st, err := rt.State(ctx, id)
	switch {
	case err == nil && (st.Status == runtime.StatusRunning || st.Status == runtime.StatusPaused):
		if st.Status == runtime.StatusPaused {
			_ = rt.Resume(ctx, id)
		}
		if err := b.resetAgentPin(id); err != nil {
			log.Warn("resetting the agent pin", "err", err)
		}
		if err := sig.SignalInit(ctx, id, agent.SigRelisten); err != nil {
			log.Warn("asking the agent of an interrupted hibernate to listen again", "err", err)
		}
		if err := b.waitReady(ctx, id); err == nil {
			_ = os.RemoveAll(h.Dir)
			log.Info("interrupted hibernate undone: the sandbox runs as before")
		} else if st2, serr := rt.State(ctx, id); serr != nil || (st2.Status != runtime.StatusRunning && st2.Status != runtime.StatusPaused) {
			// It ended meanwhile: a save still in flight at the start.
			if !promote() {
				log.Warn("a save in flight at the start ended the sandbox without a complete image")
			}
		} else {
			log.Warn("the agent of an interrupted hibernate does not answer", "err", err)
		}
	default:
		if !promote() {
			log.Warn("a hibernate was interrupted before its image was complete and the sandbox's processes are gone")
			_ = os.RemoveAll(h.Dir)
		}
	}
	_ = os.Remove(b.hibernatingIntent(id))
}
