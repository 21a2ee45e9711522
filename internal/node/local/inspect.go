package local

import (
	"context"
	"os"
	"path/filepath"

	"github.com/berth-sh/berth/internal/agent/agentd"
	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/internal/node"
	"github.com/berth-sh/berth/internal/node/local/hostfiles"
	"github.com/berth-sh/berth/internal/overlay"
	"github.com/berth-sh/berth/internal/sandbox"
)

// Diff lists the files of sb that differ from its template: the writable
// root layer (overlay upper dir) against the template's layers, plus
// everything in its owned workspace volumes. The caller holds sb's lock.
func (b *Backend) Diff(ctx context.Context, sb *sandbox.Sandbox) ([]node.Change, error) {
	const maxEntries = 100000
	out := []node.Change{}
	add := func(e node.Change) error {
		if len(out) >= maxEntries {
			return errdefs.TooLarge("more than %d changed paths", maxEntries)
		}
		out = append(out, e)
		return nil
	}
	inLower := func(rel string) bool {
		for _, l := range sb.Spec.Layers {
			if _, err := os.Lstat(filepath.Join(b.images.LayerPath(l), rel)); err == nil {
				return true
			}
		}
		return false
	}
	upper, _ := b.layerDirs(sb)
	// So must the writable layer of a hibernated one.
	if b.scratch.Exists(sb.ID) && !b.scratch.Mounted(sb.ID) {
		if err := b.scratch.Mount(sb.ID); err == nil {
			defer b.scratch.Unmount(sb.ID)
		}
	}
	// Volumes of a stopped sandbox must be mounted to be read.
	for _, vm := range sb.Spec.Volumes {
		if vm.Owned && !b.volumes.Mounted(vm.VolumeID) {
			if err := b.volumes.Mount(vm.VolumeID); err == nil {
				if sb.State == sandbox.StateStopped {
					defer b.volumes.Unmount(vm.VolumeID)
				}
			}
		}
	}
	if err := hostfiles.UpperChanges(upper, inLower, add); err != nil {
		return nil, err
	}
	for _, vm := range sb.Spec.Volumes {
		if !vm.Owned {
			continue
		}
		if err := hostfiles.VolumeChanges(filepath.Join(b.volumes.Path(vm.VolumeID), volumeDataDir), vm.Path, add); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// QuarantineFiles serves reads of quarantined sb from the host side.
func (b *Backend) QuarantineFiles(ctx context.Context, sb *sandbox.Sandbox) (node.FileSource, error) {
	if mounted, _ := overlay.Mounted(b.paths(sb.ID).rootfs); !mounted {
		return nil, errdefs.Conflict("sandbox %s is quarantined and stopped: its root is not mounted; release and start it to read files", sb.ID)
	}
	dir, err := os.MkdirTemp(b.paths(sb.ID).dir, "q-")
	if err != nil {
		return nil, err
	}
	var vols []hostfiles.Volume
	for _, vm := range sb.Spec.Volumes {
		// A volume's data is stored in the stored range; the sandbox
		// sees it through an idmapped view (ids.go).
		vols = append(vols, hostfiles.Volume{Path: vm.Path, Data: filepath.Join(b.volumes.Path(vm.VolumeID), volumeDataDir),
			IDs: agentd.IDShift{Base: b.cfg.IDMap.HostUID, Size: b.cfg.IDMap.Size}})
	}
	// The root as mounted is the overlay over the sandbox's own idmapped
	// views: its files show the sandbox's range.
	m := b.idMapOf(sb)
	return hostfiles.NewReader(sb.ID, b.paths(sb.ID).rootfs, agentd.IDShift{Base: m.HostUID, Size: m.Size}, vols, dir, b.log), nil
}

// CommitLayer ends build sandbox sb's container, unmounts its root and
// stores what it wrote (its upper dir) as a new read-only layer.
func (b *Backend) CommitLayer(ctx context.Context, sb *sandbox.Sandbox) (string, error) {
	p := b.paths(sb.ID)
	if err := b.rtFor(sb).Delete(ctx, sb.ID); err != nil {
		return "", err
	}
	if err := overlay.Unmount(p.rootfs); err != nil {
		return "", err
	}
	// Mount points the runtime made are not part of the result.
	_ = os.RemoveAll(filepath.Join(p.upper, ".berth"))
	layer, _, err := b.images.CommitDir(ctx, p.upper)
	return layer, err
}
