package engine

import (
	"context"

	"github.com/berth-sh/berth/internal/node"
	"github.com/berth-sh/berth/internal/sandbox"
)

// The node backend answers diff, isolation and disk usage in node's own
// result types; these are the only places the engine turns them into its
// own.

// Isolation describes sb's boundary (its runtime class's and its ids).
func (m *Engine) Isolation(sb *sandbox.Sandbox) Isolation {
	iso := m.node.Isolation(sb)
	return Isolation{Runtime: iso.Runtime, SharedKernel: iso.SharedKernel, UserNamespace: iso.UserNamespace,
		Seccomp: iso.Seccomp, Capabilities: iso.Capabilities, NoNewPrivs: iso.NoNewPrivs, ReadonlyImage: iso.ReadonlyImage,
		IDMode: iso.IDMode, HostUID: iso.HostUID, HostGID: iso.HostGID, HostIDs: iso.HostIDs, UsernsOwner: iso.UsernsOwner}
}

// DiskUsage reports the cap and usage of sb's writable root layer; nil
// when the layer is on the workspace volume or sb is gone.
func (m *Engine) DiskUsage(sb *sandbox.Sandbox) *Disk {
	d := m.node.DiskUsage(sb)
	if d == nil {
		return nil
	}
	return &Disk{CapBytes: d.CapBytes, CapInodes: d.CapInodes, UsedBytes: d.UsedBytes, UsedInodes: d.UsedInodes,
		Enforced: d.Enforced, Note: d.Note, ReadOnly: d.ReadOnly}
}

func (m *Engine) nodeDiff(ctx context.Context, sb *sandbox.Sandbox) ([]DiffEntry, error) {
	rl, err := node.Need[node.RootLayer](m.node, node.OpDiff)
	if err != nil {
		return nil, err
	}
	cs, err := rl.Diff(ctx, sb)
	return diffOf(cs), err
}

func diffOf(cs []node.Change) []DiffEntry {
	if cs == nil {
		return nil
	}
	out := make([]DiffEntry, len(cs))
	for i, c := range cs {
		out[i] = DiffEntry{Path: c.Path, Kind: c.Kind, Size: c.Size, Dir: c.Dir}
	}
	return out
}
