// Package snapshots is the capture feature over the engine's core: fork
// (a running sandbox's children), snapshots and their restore or a new
// sandbox made from one, export, and copy between or within sandboxes.
//
// Captures are the node backend's (node.Capturer, asked for with
// node.Need: a backend without it refuses every capture). On the local backend a
// capture freezes the sandbox's cgroup, FIFREEZEs its volume and reflink-
// clones the volume image and the writable layer inside the storage pool:
// the freeze lasts some 40 ms whatever the data size (docs/storage.md).
// Children and snapshot-made sandboxes get their own clones, so nothing
// depends on the parent living on. On Kubernetes a capture is a CSI
// VolumeSnapshot of each owned claim, taken without a freeze
// (docs/kubernetes.md, "Forks and snapshots").
//
// A child's spec is its parent's with its network identity cleared
// (childSpec): it gets addresses of its own (a fork's children one after
// another), and with them its own egress-proxy registration and CA.
//
// Copy (cp.go) follows docker cp's rules; the archive's top name is
// rewritten by retar.
package snapshots
