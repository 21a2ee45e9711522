// Package volumes is the named-volume feature over the engine's core:
// create, list, usage and delete of volumes that sandboxes mount by name.
// Attaching and releasing them with a sandbox is the core's.
package volumes

import (
	"context"
	"fmt"

	"github.com/berth-sh/berth/internal/engine"
	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/internal/failpoint"
	"github.com/berth-sh/berth/internal/node"
	"github.com/berth-sh/berth/internal/sandbox"
	"github.com/berth-sh/berth/internal/store"
)

// Volumes serves named volumes.
type Volumes struct {
	e     engine.Host
	store store.Store
	node  node.Backend
}

// New returns the volumes feature of e.
func New(e engine.Host) *Volumes { return &Volumes{e: e, store: e.Store(), node: e.Backend()} }

// CreateVolume makes a named volume.
func (m *Volumes) CreateVolume(ctx context.Context, req *CreateRequest, tenant string) (*store.Volume, error) {
	if !sandbox.ValidName(req.Name) {
		return nil, errdefs.Invalid("bad volume name %q: use 1-63 letters, digits, '.', '_' or '-'", req.Name)
	}
	size, inodes, err := m.node.NormalizeVolume(req.SizeBytes, req.Inodes)
	if err != nil {
		return nil, err
	}
	if c, err := m.node.Capacity(); err == nil && size > c {
		return nil, errdefs.Invalid("volume size %s exceeds the storage pool's size %s", sandbox.FormatBytes(size), sandbox.FormatBytes(c))
	}
	if err := m.e.Admit(ctx, size, "volume "+req.Name); err != nil {
		return nil, err
	}
	now := m.e.Now()
	v := &store.Volume{ID: engine.NewID(), Name: req.Name, Tenant: tenant, State: store.VolumeAvailable,
		SizeBytes: size, Inodes: inodes, Keep: true, CreatedAt: now, UpdatedAt: now}
	// Within the tenant's storage quota, counted and recorded under its lock.
	if err := m.e.AdmitVolume(ctx, tenant, size, func() error { return m.store.CreateVolume(ctx, v) }); err != nil {
		return nil, err
	}
	err = failpoint.Inject("volume.create.after-record")
	if err == nil {
		err = m.node.CreateVolume(v.ID, size, inodes)
	}
	if err != nil {
		v.State, v.DeletedAt = store.VolumeDeleted, m.e.Now()
		_ = m.store.UpdateVolume(context.WithoutCancel(ctx), v)
		_ = m.node.DeleteVolume(v.ID)
		return nil, fmt.Errorf("creating volume: %w", err)
	}
	return v, nil
}

// ListVolumes lists a page of live volumes, or of all with tombstones.
func (m *Volumes) ListVolumes(ctx context.Context, all bool, p store.Page) ([]*store.Volume, string, error) {
	return m.store.ListVolumes(ctx, store.VolumeFilter{Owner: engine.Owner(ctx), IncludeDeleted: all}, p)
}

// VolumeUsage reports what a volume holds.
func (m *Volumes) VolumeUsage(v *store.Volume) node.VolumeUsage {
	if v.State == store.VolumeDeleted {
		return node.VolumeUsage{}
	}
	u, _ := m.node.VolumeUsage(v.ID)
	return u
}

// DeleteVolume removes a volume that no live sandbox uses.
func (m *Volumes) DeleteVolume(ctx context.Context, ref string) error {
	v, err := m.e.GetVolume(ctx, ref)
	if err != nil {
		return err
	}
	if v.State == store.VolumeAttached {
		return errdefs.Conflict("volume %s is attached to sandbox %s; delete the sandbox first", v.Name, v.SandboxID)
	}
	return m.e.DropVolume(ctx, v)
}
