package local

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/berth-sh/berth/internal/node"
	"github.com/berth-sh/berth/internal/overlay"
	"github.com/berth-sh/berth/internal/runtime"
	"github.com/berth-sh/berth/internal/sandbox"
	"github.com/berth-sh/berth/internal/volume"
)

// Clones of captured state live in the pool's snapshots dir under names
// that say whose they are: "<snapshot id>" once recorded, "fork-<parent
// id>-<random>" while a fork's children are made from it, and any of those
// with ".tmp" while capture writes it. The daemon marks the ones an
// operation of its own is using (inFlight); every other ".tmp", every
// fork stage and every snapshot dir without a record is a leftover of an
// operation that did not finish (a crash), which doctor reports and --fix
// (and every start) removes.

// stageName is the fork stage of parent: its id and a random suffix.
func stageName(parent string) string { return "fork-" + parent + "-" + randomSuffix() }

// CaptureName returns a fresh name for a fork's capture of parent.
func (b *Backend) CaptureName(parent string) string { return stageName(parent) }

// markClone records that an operation of this daemon uses dir (and its
// .tmp) until the returned func is called.
func (b *Backend) markClone(dir string) func() {
	name := filepath.Base(dir)
	b.mu.Lock()
	b.clonesInFlight[name]++
	b.mu.Unlock()
	return func() {
		b.mu.Lock()
		if b.clonesInFlight[name]--; b.clonesInFlight[name] <= 0 {
			delete(b.clonesInFlight, name)
		}
		b.mu.Unlock()
	}
}

func (b *Backend) cloneInFlight(name string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.clonesInFlight[strings.TrimSuffix(name, ".tmp")] > 0
}

// doctorClones reports unfinished or unrecorded clones in the snapshots
// dir.
func (b *Backend) doctorClones(in node.SweepInput, add node.Report) {
	root := filepath.Join(b.pool.Root(), "snapshots")
	ents, err := os.ReadDir(root)
	if err != nil {
		return
	}
	for _, e := range ents {
		name := e.Name()
		if b.cloneInFlight(name) {
			continue
		}
		path := filepath.Join(root, name)
		remove := func() error { return os.RemoveAll(path) }
		switch {
		case strings.HasSuffix(name, ".tmp"):
			add("clone", name, "unfinished capture "+path, remove)
		case strings.HasPrefix(name, "fork-"):
			add("clone", name, "fork stage of no fork in progress "+path, remove)
		default:
			if !in.Snapshot(name) {
				add("clone", name, "snapshot clone with no record "+path, remove)
			}
		}
	}
}

// doctorFrozen reports filesystems under the pool left frozen and volumes
// the kernel made read-only, and sandboxes whose cgroup freezer disagrees
// with their record; fix thaws, remounts read-write where the filesystem
// allows it (not ext4's emergency read-only state: that takes a fresh
// mount), and thaws or freezes the cgroup as the record says. busy
// sandboxes (an operation in flight may freeze them) are left alone.
func (b *Backend) doctorFrozen(ctx context.Context, in node.SweepInput, add node.Report) {
	live, busy, probeFreeze := in.Live, in.Busy, !in.AtStart
	mounts, _ := overlay.MountsUnder(b.pool.Root())
	for _, mp := range mounts {
		// Only a sandbox's own mounts, under its lock for the whole
		// look: a capture (which freezes them) holds it.
		owner := b.mountOwner(in, mp)
		if owner == "" {
			continue
		}
		unlock, ok := in.TryLock(owner)
		if !ok {
			continue
		}
		if probeFreeze {
			if frozen, err := volume.FrozenFS(mp); err == nil && frozen {
				add("frozen", owner, "filesystem frozen with no operation in flight: "+mp, func() error {
					_, err := volume.ThawFS(mp)
					return err
				})
			}
		}
		switch ro, _ := volume.ReadOnlyFS(mp); ro {
		case volume.MountedReadOnly:
			add("readonly", owner, "filesystem is read-only (the kernel remounts on errors): "+mp, func() error {
				return unix.Mount("", mp, "", unix.MS_REMOUNT, "")
			})
		case volume.EmergencyReadOnly:
			// No remount lifts ext4's emergency read-only state: --fix
			// must not claim it did.
			add("readonly", owner, "filesystem takes no writes since an I/O error (ext4 emergency_ro; the host disk under the pool filled, say): "+mp+"; stop and start the sandbox once there is room", nil)
		}
		unlock()
	}
	for id, sb := range live {
		if busy(id) || live[id] == nil {
			continue
		}
		want := ""
		switch sb.State {
		case sandbox.StateRunning:
			want = string(runtime.StatusRunning)
		case sandbox.StatePaused, sandbox.StateQuarantined:
			want = string(runtime.StatusPaused)
		default:
			continue
		}
		st, err := b.rtFor(sb).State(ctx, id)
		if err != nil || (st.Status != runtime.StatusRunning && st.Status != runtime.StatusPaused) || string(st.Status) == want {
			continue
		}
		rt := b.rtFor(sb)
		add("freezer", id, fmt.Sprintf("sandbox is %s but its processes are %s", sb.State, st.Status), func() error {
			if want == string(runtime.StatusRunning) {
				return rt.Resume(ctx, id)
			}
			return rt.Pause(ctx, id)
		})
	}
}

// mountOwner returns the sandbox a mount under the pool belongs to, when
// its path says (scratch/<id>/..., volumes/<vid> of a sandbox's volume).
func (b *Backend) mountOwner(in node.SweepInput, mp string) string {
	rel, err := filepath.Rel(b.pool.Root(), mp)
	if err != nil {
		return ""
	}
	kind, rest, _ := strings.Cut(rel, "/")
	id, _, _ := strings.Cut(rest, "/")
	switch kind {
	case "scratch":
		return id
	case "volumes":
		owner, _ := in.VolumeOwner(id)
		return owner
	}
	return ""
}
