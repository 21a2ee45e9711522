package manager

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/internal/overlay"
	"github.com/berth-sh/berth/internal/runtime"
	"github.com/berth-sh/berth/internal/sandbox"
	"github.com/berth-sh/berth/internal/store"
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
func stageName(parent string) string { return "fork-" + parent + "-" + newID() }

// markClone records that an operation of this daemon uses dir (and its
// .tmp) until the returned func is called.
func (m *Manager) markClone(dir string) func() {
	name := filepath.Base(dir)
	m.mu.Lock()
	m.clonesInFlight[name]++
	m.mu.Unlock()
	return func() {
		m.mu.Lock()
		if m.clonesInFlight[name]--; m.clonesInFlight[name] <= 0 {
			delete(m.clonesInFlight, name)
		}
		m.mu.Unlock()
	}
}

func (m *Manager) cloneInFlight(name string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.clonesInFlight[strings.TrimSuffix(name, ".tmp")] > 0
}

// doctorClones reports unfinished or unrecorded clones in the snapshots
// dir.
func (m *Manager) doctorClones(ctx context.Context, add func(kind, id, detail string, fixFn func() error)) {
	root := filepath.Join(m.pool.Root(), "snapshots")
	ents, err := os.ReadDir(root)
	if err != nil {
		return
	}
	for _, e := range ents {
		name := e.Name()
		if m.cloneInFlight(name) {
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
			if _, err := m.store.GetSnapshot(ctx, store.AnyOwner, name); errors.Is(err, errdefs.ErrNotFound) {
				add("clone", name, "snapshot clone with no record "+path, remove)
			}
		}
	}
}

// doctorFrozen reports filesystems under the pool left frozen and volumes
// the kernel made read-only, and sandboxes whose cgroup freezer disagrees
// with their record; fix thaws, remounts read-write where the filesystem
// allows it, and thaws or freezes the cgroup as the record says. busy
// sandboxes (an operation in flight may freeze them) are left alone.
func (m *Manager) doctorFrozen(ctx context.Context, live map[string]*sandbox.Sandbox, busy func(string) bool,
	probeFreeze bool, add func(kind, id, detail string, fixFn func() error)) {
	mounts, _ := overlay.MountsUnder(m.pool.Root())
	for _, mp := range mounts {
		// Only a sandbox's own mounts, under its lock for the whole
		// look: a capture (which freezes them) holds it.
		owner := m.mountOwner(mp)
		if owner == "" {
			continue
		}
		unlock, ok := m.locks.TryLock(owner)
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
		var st unix.Statfs_t
		if err := unix.Statfs(mp, &st); err == nil && st.Flags&unix.ST_RDONLY != 0 {
			add("readonly", owner, "filesystem is read-only (the kernel remounts on errors): "+mp, func() error {
				return unix.Mount("", mp, "", unix.MS_REMOUNT, "")
			})
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
		st, err := m.rtFor(sb).State(ctx, id)
		if err != nil || (st.Status != runtime.StatusRunning && st.Status != runtime.StatusPaused) || string(st.Status) == want {
			continue
		}
		rt := m.rtFor(sb)
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
func (m *Manager) mountOwner(mp string) string {
	rel, err := filepath.Rel(m.pool.Root(), mp)
	if err != nil {
		return ""
	}
	kind, rest, _ := strings.Cut(rel, "/")
	id, _, _ := strings.Cut(rest, "/")
	switch kind {
	case "scratch":
		return id
	case "volumes":
		if v, err := m.store.GetVolume(context.Background(), store.AnyOwner, id); err == nil {
			return v.SandboxID
		}
	}
	return ""
}
