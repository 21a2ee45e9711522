package engine

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"

	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/internal/failpoint"
	"github.com/berth-sh/berth/internal/sandbox"
	"github.com/berth-sh/berth/internal/store"
)

// GetVolume finds a live volume by name or id.
func (m *Engine) GetVolume(ctx context.Context, ref string) (*store.Volume, error) {
	v, err := m.store.GetVolumeByName(ctx, owner(ctx), ref)
	if errors.Is(err, errdefs.ErrNotFound) {
		v, err = m.store.GetVolume(ctx, owner(ctx), ref)
		if errors.Is(err, errdefs.ErrNotFound) || (err == nil && v.State == store.VolumeDeleted) {
			return nil, errdefs.NotFound("no volume %q", ref)
		}
	}
	return v, err
}

func (m *Engine) dropVolume(ctx context.Context, v *store.Volume) error {
	if err := m.node.DeleteVolume(v.ID); err != nil {
		return err
	}
	v.State, v.SandboxID, v.DeletedAt, v.UpdatedAt = store.VolumeDeleted, "", m.now(), m.now()
	return m.store.UpdateVolume(ctx, v)
}

// resolveVolumes turns a create request's volumes into mounts: the
// persistent sandbox's own workspace volume first, then named volumes.
func (m *Engine) resolveVolumes(ctx context.Context, req *CreateRequest, sp *sandbox.Spec) error {
	used := map[string]bool{}
	if sp.Persistent {
		size, inodes, err := m.node.NormalizeVolume(req.VolumeSizeBytes, req.VolumeInodes)
		if err != nil {
			return err
		}
		if c, err := m.node.Capacity(); err == nil && size > c {
			return errdefs.Invalid("volume size %s exceeds the storage pool's size %s", sandbox.FormatBytes(size), sandbox.FormatBytes(c))
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
func (m *Engine) attachVolumes(ctx context.Context, sb *sandbox.Sandbox) error {
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
				// Another create took it first: that is the conflict,
				// said as such (not "modified concurrently").
				if cur, gerr := m.store.GetVolume(ctx, store.AnyOwner, v.ID); errors.Is(err, errdefs.ErrModified) && gerr == nil &&
					cur.State != store.VolumeAvailable {
					return errdefs.Conflict("volume %s is attached to sandbox %s", v.Name, cur.SandboxID)
				}
				return fmt.Errorf("attaching volume %s: %w", v.Name, err)
			}
		}
		// Recorded as attached: a create failing from here releases it
		// (fail → destroyLocked → releaseVolumes).
		if err := failpoint.Inject("volume.attach.after-record"); err != nil {
			return err
		}
		if err := m.node.CreateVolume(v.ID, v.SizeBytes, v.Inodes); err != nil {
			return err
		}
	}
	return nil
}

// releaseVolumes runs after a sandbox is gone: owned volumes are deleted
// unless kept; the others become available again.
func (m *Engine) releaseVolumes(ctx context.Context, sb *sandbox.Sandbox) error {
	var errs []error
	for _, vm := range sb.Spec.Volumes {
		v, err := m.store.GetVolume(ctx, store.AnyOwner, vm.VolumeID)
		if errors.Is(err, errdefs.ErrNotFound) {
			// An interrupted create may have made the image only.
			if vm.Owned {
				errs = append(errs, m.node.DeleteVolume(vm.VolumeID))
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
		// The backend unmounted it with the rest of the sandbox (Remove).
		v.State, v.SandboxID, v.UpdatedAt = store.VolumeAvailable, "", m.now()
		errs = append(errs, m.store.UpdateVolume(ctx, v))
	}
	return errors.Join(errs...)
}
