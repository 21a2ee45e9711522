package local

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/berth-sh/berth/internal/cgroups"
	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/internal/network"
	"github.com/berth-sh/berth/internal/node"
	"github.com/berth-sh/berth/internal/overlay"
	"github.com/berth-sh/berth/internal/sandbox"
)

// Sweep is the host half of doctor: containers, cgroups, mounts, dirs,
// volume images, clones and network objects that no live record of this
// node accounts for, frozen or read-only filesystems, freezer states that
// disagree with their records, and running records with no container.
func (b *Backend) Sweep(ctx context.Context, in node.SweepInput, add node.Report) {
	live, busy := in.Live, in.Busy
	for _, cls := range b.Classes() {
		rt := b.runtimeNamed(cls.Name)
		containers, err := rt.List(ctx)
		if err != nil {
			add("runtime", "", cls.Name+": listing containers: "+err.Error(), nil)
		}
		for _, c := range containers {
			if !busy(c.ID) && (live[c.ID] == nil || b.rtFor(live[c.ID]) != rt) {
				add("runtime", c.ID, fmt.Sprintf("%s container %s (%s) has no live sandbox", cls.Name, c.ID, c.Status), func() error {
					return rt.Delete(ctx, c.ID)
				})
			}
		}
	}
	for _, id := range cgroups.Children(b.CgroupParent()) {
		if !busy(id) && live[id] == nil {
			rel := b.CgroupParent() + "/" + id
			add("cgroup", id, rel, func() error { return cgroups.Destroy(rel) })
		}
	}
	sbRoot := filepath.Join(b.cfg.DataDir, "sandboxes")
	// Volumes mounted for no running sandbox of ours.
	if vmounts, err := overlay.MountsUnder(b.volumes.Root()); err == nil {
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
			vid, _, _ := strings.Cut(strings.TrimPrefix(mp, b.volumes.Root()+"/"), "/")
			if running[vid] {
				continue
			}
			// Look again at the sandbox that holds the volume: it may have
			// started since the list was read, or be stopping right now.
			if owner, _ := in.VolumeOwner(vid); owner != "" {
				if busy(owner) {
					continue
				}
				if sb := live[owner]; sb != nil && sb.State != sandbox.StateStopped {
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
	if ents, err := os.ReadDir(b.scratch.Root()); err == nil {
		for _, e := range ents {
			id := e.Name()
			if !busy(id) && live[id] == nil {
				add("dir", id, filepath.Join(b.scratch.Root(), id), func() error { return b.scratch.Delete(id) })
			}
		}
	}
	// Writable-layer filesystems mounted for a sandbox that is not running.
	if smounts, err := overlay.MountsUnder(b.scratch.Root()); err == nil {
		for _, mp := range smounts {
			id, _, _ := strings.Cut(strings.TrimPrefix(mp, b.scratch.Root()+"/"), "/")
			if busy(id) {
				continue
			}
			if sb := live[id]; sb == nil || sb.State != sandbox.StateStopped {
				continue // none: the dir finding above removes it; else in use
			}
			add("mount", id, mp, func() error { return overlay.Unmount(mp) })
		}
	}
	if vids, err := b.volumes.IDs(); err == nil {
		known := map[string]bool{}
		// A workspace volume being made for a sandbox in creation has
		// its image before its record.
		for _, sb := range live {
			for _, vm := range sb.Spec.Volumes {
				known[vm.VolumeID] = true
			}
		}
		for _, vid := range vids {
			if _, recorded := in.VolumeOwner(vid); !recorded && !known[vid] {
				add("volume", vid, b.volumes.Image(vid), func() error { return b.volumes.Delete(vid) })
			}
		}
	}
	dirs, _ := b.sandboxDirs()
	for _, id := range dirs {
		if !busy(id) && live[id] == nil {
			add("dir", id, filepath.Join(sbRoot, id), func() error { return b.teardown(ctx, &sandbox.Sandbox{ID: id}) })
		}
	}
	for id := range live {
		if busy(id) || live[id] == nil {
			continue
		}
		if sb := live[id]; sb.State == sandbox.StateRunning {
			if _, err := b.rtFor(sb).State(ctx, id); errors.Is(err, errdefs.ErrNotFound) {
				add("record", id, "sandbox is running but has no container", nil)
			}
		}
	}
	b.doctorClones(in, add)
	b.doctorFrozen(ctx, in, add)
	b.doctorNetwork(ctx, live, add)
}

// doctorNetwork counts this daemon's network objects (veths, per-sandbox
// chains) against its attached egress sandboxes; the fix removes the
// extra ones.
func (b *Backend) doctorNetwork(ctx context.Context, live map[string]*sandbox.Sandbox, add node.Report) {
	if b.egress.Up() == nil && !network.Exists(b.cfg.Instance) {
		return
	}
	n, err := b.egress.Get(ctx)
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
