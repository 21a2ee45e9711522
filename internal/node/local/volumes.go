package local

import (
	"errors"
	"os"
	"path/filepath"

	"github.com/berth-sh/berth/internal/node"
	"github.com/berth-sh/berth/internal/sandbox"
	"github.com/berth-sh/berth/internal/volume"
)

// volumeDataDir is the directory, inside a volume's filesystem, that is
// mounted into sandboxes; rootLayerDir holds a persisted writable root.
const (
	volumeDataDir = "data"
	rootLayerDir  = "root"
)

// NormalizeVolume applies the volume defaults and limits of package volume.
func (b *Backend) NormalizeVolume(size, inodes int64) (int64, int64, error) {
	return volume.Normalize(size, inodes)
}

// CreateVolume makes volume id's image (idempotent: an existing one is kept).
func (b *Backend) CreateVolume(id string, size, inodes int64) error {
	return b.volumes.Create(id, size, inodes)
}

// DeleteVolume unmounts and removes volume id's image.
func (b *Backend) DeleteVolume(id string) error { return b.volumes.Delete(id) }

// VolumeUsage reports what volume id holds.
func (b *Backend) VolumeUsage(id string) (node.VolumeUsage, error) {
	u, err := b.volumes.Usage(id)
	if err != nil {
		return node.VolumeUsage{}, err
	}
	return node.VolumeUsage{UsedBytes: u.UsedBytes, UsedInodes: u.UsedInodes, ReadOnly: u.ReadOnly}, nil
}

// VolumeIDs lists the volume images in the pool.
func (b *Backend) VolumeIDs() ([]string, error) { return b.volumes.IDs() }

// mountVolumes mounts sb's volumes on the host and makes sure their data
// dirs exist, owned by sandbox root.
func (b *Backend) mountVolumes(sb *sandbox.Sandbox) error {
	uid, gid := b.cfg.IDMap.HostRoot()
	for _, vm := range sb.Spec.Volumes {
		if err := b.volumes.Mount(vm.VolumeID); err != nil {
			return err
		}
		d := filepath.Join(b.volumes.Path(vm.VolumeID), volumeDataDir)
		if err := os.Mkdir(d, 0o755); err != nil && !os.IsExist(err) {
			return err
		}
		if err := os.Chown(d, uid, gid); err != nil {
			return err
		}
	}
	return nil
}

func (b *Backend) unmountVolumes(sb *sandbox.Sandbox) error {
	var errs []error
	for _, vm := range sb.Spec.Volumes {
		if err := b.volumes.Unmount(vm.VolumeID); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// layerDirs returns the upper and work dirs of sb's writable root layer:
// on its workspace volume when the root persists, else in scratch space.
func (b *Backend) layerDirs(sb *sandbox.Sandbox) (upper, work string) {
	if persistsRoot(sb) {
		base := filepath.Join(b.volumes.Path(sb.Spec.Volumes[0].VolumeID), rootLayerDir)
		return filepath.Join(base, "upper"), filepath.Join(base, "work")
	}
	if upper, work, ok := b.legacyUpper(sb.ID); ok {
		return upper, work
	}
	p := b.paths(sb.ID)
	return p.upper, p.work
}
