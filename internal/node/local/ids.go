package local

// Host ids per sandbox: the machinery is package hostids; this is what
// the backend asks of it for one sandbox.

import (
	"path/filepath"

	"github.com/berth-sh/berth/internal/node"
	"github.com/berth-sh/berth/internal/runtime"
	"github.com/berth-sh/berth/internal/sandbox"
)

// IDRange returns host id slot's range, or, when sandboxes cannot have
// their own (no idmapped mounts), the shared stored range and false.
func (b *Backend) IDRange(slot int) (sandbox.HostIDs, bool) { return b.ids.Range(slot) }

// idMapOf is the user-namespace mapping sb runs with.
func (b *Backend) idMapOf(sb *sandbox.Sandbox) runtime.IDMap {
	if ids := sb.Spec.IDs; ids != nil && ids.Mode == sandbox.IDModePerSandbox {
		return runtime.IDMap{HostUID: ids.Base, HostGID: ids.Base, Size: ids.Size}
	}
	return b.cfg.IDMap
}

// perSandboxIDs reports whether sb's files must be idmapped.
func perSandboxIDs(sb *sandbox.Sandbox) bool {
	return sb.Spec.IDs != nil && sb.Spec.IDs.Mode == sandbox.IDModePerSandbox
}

// idmapRoot returns the overlay dirs of sb as seen through its idmapped
// mounts (made here if missing), or the dirs themselves in shared mode.
func (b *Backend) idmapRoot(sb *sandbox.Sandbox, lowers []string, upper, work string) ([]string, string, string, error) {
	if !perSandboxIDs(sb) || len(lowers) == 0 {
		return lowers, upper, work, nil
	}
	return b.ids.IdmapRoot(b.paths(sb.ID).dir, sb.Spec.IDs.Base, lowers, upper, work)
}

// volumeSource is where volume i of sb is bind-mounted from: its data dir,
// through an idmapped view of the volume in per-sandbox mode.
func (b *Backend) volumeSource(sb *sandbox.Sandbox, i int) (string, error) {
	vid := sb.Spec.Volumes[i].VolumeID
	if !perSandboxIDs(sb) {
		return filepath.Join(b.volumes.Path(vid), volumeDataDir), nil
	}
	view, err := b.ids.IdmapVolume(b.paths(sb.ID).dir, sb.Spec.IDs.Base, i, b.volumes.Path(vid))
	if err != nil {
		return "", err
	}
	return filepath.Join(view, volumeDataDir), nil
}

// sandboxUserns returns the path of sb's own user namespace for the
// runtime to join ("" when the runtime makes it: runsc, or hosts that
// cannot make one owned by the sandbox's uid). The namespace is held by a
// bind mount in the sandbox dir, unmounted with its other mounts.
func (b *Backend) sandboxUserns(sb *sandbox.Sandbox, rt runtime.Runtime) (string, error) {
	if rt.Name() != "runc" || !b.ids.OwnedNS() || sb.Spec.IDs == nil {
		return "", nil
	}
	ids := b.idMapOf(sb)
	path, ahead, err := b.ids.BindUserns(b.paths(sb.ID).dir, ids.HostUID, ids.Size)
	if err == nil {
		b.log.Debug("sandbox user namespace", "sandbox", sb.ID, "owner", ids.HostUID, "made_ahead", ahead)
	}
	return path, err
}

// Isolation describes sb's boundary: its runtime class's, plus its ids.
func (b *Backend) Isolation(sb *sandbox.Sandbox) node.Isolation {
	rt := b.rtFor(sb)
	iso := nodeIsolation(rt.Isolation())
	ids := b.idMapOf(sb)
	iso.IDMode = sandbox.IDModeShared
	if perSandboxIDs(sb) {
		iso.IDMode = sandbox.IDModePerSandbox
	}
	if sb.Spec.IDs == nil && sb.State == sandbox.StateDeleted {
		iso.IDMode = ""
		return iso
	}
	iso.HostUID, iso.HostGID, iso.HostIDs = ids.HostUID, ids.HostGID, ids.Size
	switch {
	case rt.Name() == "runsc":
		iso.UsernsOwner = "sentry" // gVisor serves the per-user limits itself
	case rt.Name() == "runc" && b.ids.OwnedNS() && sb.Spec.IDs != nil:
		iso.UsernsOwner = "sandbox"
	default:
		iso.UsernsOwner = "host-root"
	}
	return iso
}

// nodeIsolation is the node's form of what a runtime class reports.
func nodeIsolation(iso runtime.Isolation) node.Isolation {
	return node.Isolation{Runtime: iso.Runtime, SharedKernel: iso.SharedKernel, UserNamespace: iso.UserNamespace,
		Seccomp: iso.Seccomp, Capabilities: iso.Capabilities, NoNewPrivs: iso.NoNewPrivs, ReadonlyImage: iso.ReadonlyImage}
}
