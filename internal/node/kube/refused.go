package kube

// What a pod cannot do, refused with errdefs.ErrNotSupported and the
// reason, so the API answers with a stable code and a sentence rather
// than a half-done operation. The classes' Caps say the same as data; a
// capability no pod has is an interface the backend does not implement,
// and Refuse gives the reason node.Need answers with.

import (
	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/internal/node"
)

func notOnKube(what, why string) error {
	return errdefs.NotSupported("%s is not available on the kubernetes backend: %s", what, why)
}

const (
	whyFreeze     = "Kubernetes cannot freeze a pod's processes in place; only the gVisor class (runsc) with berth's node agent on its nodes (--kube-node-agent-port) can, and for other classes pause maps to stop (the pod is deleted, its volumes and identity kept)"
	whyCheckpoint = "Kubernetes has no checkpoint and restore of a pod's processes that berth can drive (the kubelet's checkpoint API is forensic, not restorable; " +
		"for gVisor pods runsc can checkpoint, but a pod cannot be started from the image: the kubelet's CRI has no restore)"
)

// Refuse says why the backend lacks a capability (node.Refuser): a pod
// has no checkpoint, no root layer of berth's, no egress proxy on its
// path and no hostname that changes, so the backend implements neither
// node.Hibernator, node.RootLayer, node.EgressProxy nor node.Renamer. It
// implements node.Freezer for the gVisor class only (freeze.go): Freeze
// and Thaw of any other class return the freeze's refusal themselves.
func (b *Backend) Refuse(op string) error {
	switch op {
	case node.OpPause, node.OpResume:
		return notOnKube(op, whyFreeze)
	case node.OpQuarantine:
		// What a quarantine needs beyond the freeze (Freezer) and the
		// cut (Egress), both served for gVisor pods: reads of its files
		// while it is frozen, which come from the host side.
		return notOnKube("reading a quarantined sandbox's files", "they are read from the node while its processes are frozen, "+
			"and a pod's root layer belongs to the node's container runtime, out of the daemon's reach")
	case node.OpHibernate, node.OpWake:
		return notOnKube(op, whyCheckpoint)
	case node.OpDiff:
		return notOnKube(op, "a pod's writable root layer belongs to the node's container runtime, out of the daemon's reach")
	case node.OpTemplateBuilds:
		return notOnKube(op, "a pod's root is its container image; build templates on a local daemon and push them as images")
	case node.OpEgressSecrets:
		return notOnKube(op, whyEgressProxy)
	case node.OpRename:
		// A pod's hostname is fixed at its creation, so a warm-pool
		// claim keeps its member's (Caps.Rename false).
		return errdefs.NotSupported("kubernetes: a pod's hostname is set when it is made and cannot change " +
			"(a warm-pool member serves only creates without a name, keeping its sb-<id> hostname)")
	}
	return nil
}
