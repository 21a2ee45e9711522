package engine

import (
	"context"

	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/internal/sandbox"
	"github.com/berth-sh/berth/internal/store"
)

// diskDefault is the server-wide cap; 0: none.
func (m *Engine) diskDefault() int64 { return max(m.cfg.DiskDefault, 0) }

// withDiskDefault fills a spec's disk cap from the server default, unless
// its root layer is on its workspace volume.
func (m *Engine) withDiskDefault(sp *sandbox.Spec) {
	if sp.Resources.DiskBytes == 0 && !specPersistsRoot(sp) {
		sp.Resources.DiskBytes = m.diskDefault()
	}
}

// checkDisk refuses a disk cap the storage pool cannot hold, and one for
// a root layer that lives on the workspace volume.
func (m *Engine) checkDisk(sp *sandbox.Spec) error {
	b := sp.Resources.DiskBytes
	if b == 0 {
		return nil
	}
	if specPersistsRoot(sp) {
		return errdefs.Invalid("disk does not apply with persist_root: the root layer is on the workspace volume; size that (volume_size_bytes)")
	}
	max := int64(sandbox.MaxDiskBytes)
	if c, err := m.node.Capacity(); err == nil && c < max {
		max = c
	}
	if b < sandbox.MinDiskBytes || b > max {
		return errdefs.Invalid("disk must be between %d MiB and %d MiB (the storage pool's size), got %d bytes",
			sandbox.MinDiskBytes>>20, max>>20, b)
	}
	return nil
}

func specPersistsRoot(sp *sandbox.Spec) bool {
	return sp.PersistRoot && len(sp.Volumes) > 0 && sp.Volumes[0].Owned
}

// sandboxNeed is what a new sandbox of spec may grow to.
func (m *Engine) sandboxNeed(sp *sandbox.Spec) int64 {
	var need int64
	if !specPersistsRoot(sp) {
		if b := sp.Resources.DiskBytes; b != 0 {
			need += b
		} else {
			need += m.diskDefault()
		}
	}
	for _, vm := range sp.Volumes {
		if vm.Owned {
			need += sp.VolumeSize
		}
	}
	return need
}

// admit refuses (507) making objects that may grow to need bytes, for
// what, when the backend cannot fit them.
func (m *Engine) admit(ctx context.Context, need int64, what string) error {
	return m.node.Admit(need, what, func() int64 { return m.committed(ctx) })
}

// committed is what this node's live volumes and writable layers may still
// grow to.
func (m *Engine) committed(ctx context.Context) int64 {
	sbs, _, err := m.store.ListSandboxes(ctx, store.SandboxFilter{Owner: store.AnyOwner, Node: m.cfg.Node}, store.Page{})
	if err != nil {
		return 0
	}
	var sum int64
	for _, sb := range sbs {
		if sb.State.Live() {
			sum += m.node.Committed(sb)
		}
	}
	return max(sum, 0)
}
