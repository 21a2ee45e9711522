package manager

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/internal/sandbox"
	"github.com/berth-sh/berth/internal/store"
	"github.com/berth-sh/berth/internal/volume"
)

// volumeDataDir is the directory, inside a volume's filesystem, that is
// mounted into sandboxes; rootLayerDir holds a persisted writable root.
const (
	volumeDataDir = "data"
	rootLayerDir  = "root"
)

// CreateVolume makes a named volume.
func (m *Manager) CreateVolume(ctx context.Context, req *api.CreateVolumeRequest, tenant string) (*store.Volume, error) {
	if !sandbox.ValidName(req.Name) {
		return nil, errdefs.Invalid("bad volume name %q: use 1-63 letters, digits, '.', '_' or '-'", req.Name)
	}
	size, inodes, err := volume.Normalize(req.SizeBytes, req.Inodes)
	if err != nil {
		return nil, err
	}
	if c, err := m.pool.Capacity(); err == nil && size > c {
		return nil, errdefs.Invalid("volume size %s exceeds the storage pool's size %s", humanBytes(size), humanBytes(c))
	}
	if err := m.admit(ctx, size, "volume "+req.Name); err != nil {
		return nil, err
	}
	now := m.now()
	v := &store.Volume{ID: newID(), Name: req.Name, Tenant: tenant, State: store.VolumeAvailable,
		SizeBytes: size, Inodes: inodes, Keep: true, CreatedAt: now, UpdatedAt: now}
	if err := m.store.CreateVolume(ctx, v); err != nil {
		return nil, err
	}
	if err := m.volumes.Create(v.ID, size, inodes); err != nil {
		v.State, v.DeletedAt = store.VolumeDeleted, m.now()
		_ = m.store.UpdateVolume(context.WithoutCancel(ctx), v)
		_ = m.volumes.Delete(v.ID)
		return nil, fmt.Errorf("creating volume: %w", err)
	}
	return v, nil
}

// GetVolume finds a live volume by name or id.
func (m *Manager) GetVolume(ctx context.Context, ref string) (*store.Volume, error) {
	v, err := m.store.GetVolumeByName(ctx, owner(ctx), ref)
	if errors.Is(err, errdefs.ErrNotFound) {
		v, err = m.store.GetVolume(ctx, owner(ctx), ref)
		if errors.Is(err, errdefs.ErrNotFound) || (err == nil && v.State == store.VolumeDeleted) {
			return nil, errdefs.NotFound("no volume %q", ref)
		}
	}
	return v, err
}

// ListVolumes lists a page of live volumes, or of all with tombstones.
func (m *Manager) ListVolumes(ctx context.Context, all bool, p store.Page) ([]*store.Volume, string, error) {
	return m.store.ListVolumes(ctx, store.VolumeFilter{Owner: owner(ctx), IncludeDeleted: all}, p)
}

// VolumeUsage reports what a volume holds.
func (m *Manager) VolumeUsage(v *store.Volume) volume.Usage {
	if v.State == store.VolumeDeleted {
		return volume.Usage{}
	}
	u, _ := m.volumes.Usage(v.ID)
	return u
}

// DeleteVolume removes a volume that no live sandbox uses.
func (m *Manager) DeleteVolume(ctx context.Context, ref string) error {
	v, err := m.GetVolume(ctx, ref)
	if err != nil {
		return err
	}
	if v.State == store.VolumeAttached {
		return errdefs.Conflict("volume %s is attached to sandbox %s; delete the sandbox first", v.Name, v.SandboxID)
	}
	return m.dropVolume(ctx, v)
}

func (m *Manager) dropVolume(ctx context.Context, v *store.Volume) error {
	if err := m.volumes.Delete(v.ID); err != nil {
		return err
	}
	v.State, v.SandboxID, v.DeletedAt, v.UpdatedAt = store.VolumeDeleted, "", m.now(), m.now()
	return m.store.UpdateVolume(ctx, v)
}

// resolveVolumes turns a create request's volumes into mounts: the
// persistent sandbox's own workspace volume first, then named volumes.
func (m *Manager) resolveVolumes(ctx context.Context, req *api.CreateSandboxRequest, sp *sandbox.Spec) error {
	used := map[string]bool{}
	if sp.Persistent {
		size, inodes, err := volume.Normalize(req.VolumeSizeBytes, req.VolumeInodes)
		if err != nil {
			return err
		}
		if c, err := m.pool.Capacity(); err == nil && size > c {
			return errdefs.Invalid("volume size %s exceeds the storage pool's size %s", humanBytes(size), humanBytes(c))
		}
		sp.VolumeSize, sp.VolumeInodes = size, inodes
		sp.Volumes = append(sp.Volumes, sandbox.VolumeMount{VolumeID: newID(), Path: "/workspace", Owned: true})
		used["/workspace"] = true
	} else if req.VolumeSizeBytes != 0 || req.VolumeInodes != 0 || req.PersistRoot || req.KeepVolume {
		return errdefs.Invalid("volume size, persist_root and keep_volume need persistent")
	}
	for i, vm := range req.Volumes {
		if vm.Path == "" && i == 0 && !used["/workspace"] {
			vm.Path = "/workspace"
		}
		if !filepath.IsAbs(vm.Path) || filepath.Clean(vm.Path) != vm.Path || vm.Path == "/" {
			return errdefs.Invalid("volume %s: mount path must be a clean absolute path other than /", vm.Name)
		}
		for _, reserved := range []string{"/proc", "/sys", "/dev", "/.berth", "/usr"} {
			if vm.Path == reserved || len(vm.Path) > len(reserved) && vm.Path[:len(reserved)+1] == reserved+"/" {
				return errdefs.Invalid("volume %s: %s is reserved", vm.Name, reserved)
			}
		}
		if used[vm.Path] {
			return errdefs.Invalid("two volumes at %s", vm.Path)
		}
		used[vm.Path] = true
		v, err := m.GetVolume(ctx, vm.Name)
		if err != nil {
			return err
		}
		if v.State != store.VolumeAvailable {
			return errdefs.Conflict("volume %s is attached to sandbox %s", v.Name, v.SandboxID)
		}
		sp.Volumes = append(sp.Volumes, sandbox.VolumeMount{VolumeID: v.ID, Name: v.Name, Path: vm.Path, ReadOnly: vm.ReadOnly})
	}
	if len(sp.Volumes) > 16 {
		return errdefs.Invalid("at most 16 volumes")
	}
	return nil
}

// attachVolumes records sb's volumes as attached: named volumes move from
// available (compare-and-swap, so two sandboxes cannot both take one), the
// owned workspace volume is created. Idempotent for a restarted create.
func (m *Manager) attachVolumes(ctx context.Context, sb *sandbox.Sandbox) error {
	for i, vm := range sb.Spec.Volumes {
		v, err := m.store.GetVolume(ctx, store.AnyOwner, vm.VolumeID)
		switch {
		case errors.Is(err, errdefs.ErrNotFound) && vm.Owned:
			now := m.now()
			name := sb.Name
			if name == "" {
				name = sb.ID
			}
			v = &store.Volume{ID: vm.VolumeID, Name: name + "-workspace", Tenant: sb.Tenant, State: store.VolumeAttached,
				SizeBytes: sb.Spec.VolumeSize, Inodes: sb.Spec.VolumeInodes, SandboxID: sb.ID,
				Keep: sb.Spec.KeepVolume, CreatedAt: now, UpdatedAt: now}
			if err := m.store.CreateVolume(ctx, v); err != nil {
				return fmt.Errorf("workspace volume: %w", err)
			}
			sb.Spec.Volumes[i].Name = v.Name
		case err != nil:
			return err
		case v.SandboxID == sb.ID:
			// already ours
		case v.State != store.VolumeAvailable:
			return errdefs.Conflict("volume %s is attached to sandbox %s", v.Name, v.SandboxID)
		default:
			v.State, v.SandboxID, v.UpdatedAt = store.VolumeAttached, sb.ID, m.now()
			if err := m.store.UpdateVolume(ctx, v); err != nil {
				return fmt.Errorf("attaching volume %s: %w", v.Name, err)
			}
		}
		if err := m.volumes.Create(v.ID, v.SizeBytes, v.Inodes); err != nil {
			return err
		}
	}
	return nil
}

// mountVolumes mounts sb's volumes on the host and makes sure their data
// dirs exist, owned by sandbox root.
func (m *Manager) mountVolumes(sb *sandbox.Sandbox) error {
	uid, gid := m.cfg.IDMap.HostRoot()
	for _, vm := range sb.Spec.Volumes {
		if err := m.volumes.Mount(vm.VolumeID); err != nil {
			return err
		}
		d := filepath.Join(m.volumes.Path(vm.VolumeID), volumeDataDir)
		if err := os.Mkdir(d, 0o755); err != nil && !os.IsExist(err) {
			return err
		}
		if err := os.Chown(d, uid, gid); err != nil {
			return err
		}
	}
	return nil
}

func (m *Manager) unmountVolumes(sb *sandbox.Sandbox) error {
	var errs []error
	for _, vm := range sb.Spec.Volumes {
		if err := m.volumes.Unmount(vm.VolumeID); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// releaseVolumes runs after a sandbox is gone: owned volumes are deleted
// unless kept; the others become available again.
func (m *Manager) releaseVolumes(ctx context.Context, sb *sandbox.Sandbox) error {
	var errs []error
	for _, vm := range sb.Spec.Volumes {
		v, err := m.store.GetVolume(ctx, store.AnyOwner, vm.VolumeID)
		if errors.Is(err, errdefs.ErrNotFound) {
			// An interrupted create may have made the image only.
			if vm.Owned {
				errs = append(errs, m.volumes.Delete(vm.VolumeID))
			}
			continue
		}
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if v.State == store.VolumeDeleted || v.SandboxID != sb.ID {
			continue
		}
		if vm.Owned && !v.Keep {
			errs = append(errs, m.dropVolume(ctx, v))
			continue
		}
		if err := m.volumes.Unmount(v.ID); err != nil {
			errs = append(errs, err)
			continue
		}
		v.State, v.SandboxID, v.UpdatedAt = store.VolumeAvailable, "", m.now()
		errs = append(errs, m.store.UpdateVolume(ctx, v))
	}
	return errors.Join(errs...)
}

// layerDirs returns the upper and work dirs of sb's writable root layer:
// on its workspace volume when the root persists, else in scratch space.
func (m *Manager) layerDirs(sb *sandbox.Sandbox) (upper, work string) {
	if persistsRoot(sb) {
		base := filepath.Join(m.volumes.Path(sb.Spec.Volumes[0].VolumeID), rootLayerDir)
		return filepath.Join(base, "upper"), filepath.Join(base, "work")
	}
	if upper, work, ok := m.legacyUpper(sb.ID); ok {
		return upper, work
	}
	p := m.paths(sb.ID)
	return p.upper, p.work
}
