package kube

import (
	"context"
	"fmt"
	"slices"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/internal/node"
	"github.com/berth-sh/berth/internal/sandbox"
	"github.com/berth-sh/berth/internal/volume"
)

// NormalizeVolume applies berth's volume defaults and limits (the claim's
// inode count is its filesystem's; the number is kept, not enforced).
func (b *Backend) NormalizeVolume(size, inodes int64) (int64, int64, error) {
	size, inodes, err := volume.Normalize(size, inodes)
	if err == nil && size > b.cfg.MaxVolume {
		return 0, 0, errdefs.Invalid("volume size %d exceeds this backend's largest, %d", size, b.cfg.MaxVolume)
	}
	return size, inodes, err
}

// CreateVolume makes volume id's claim unless it exists.
func (b *Backend) CreateVolume(id string, size, inodes int64) error {
	if !validID(id) {
		return errdefs.Invalid("volume id %q cannot name a claim", id)
	}
	ctx := context.Background()
	_, err := b.client.CoreV1().PersistentVolumeClaims(b.cfg.Namespace).Create(ctx, b.claimFor(id, size), metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("volume %s: %w", id, err)
	}
	return nil
}

// DeleteVolume deletes volume id's claim; a missing one is not an error.
// (The claim's data goes as its PersistentVolume's reclaim policy says.)
func (b *Backend) DeleteVolume(id string) error {
	err := b.client.CoreV1().PersistentVolumeClaims(b.cfg.Namespace).Delete(context.Background(), claimName(id), metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("volume %s: %w", id, err)
	}
	return nil
}

// VolumeUsage: the API does not say what a claim holds; a volume known
// to the cluster reports zero use (docs/kubernetes.md).
func (b *Backend) VolumeUsage(id string) (node.VolumeUsage, error) {
	if _, err := b.client.CoreV1().PersistentVolumeClaims(b.cfg.Namespace).Get(context.Background(), claimName(id), metav1.GetOptions{}); err != nil {
		if apierrors.IsNotFound(err) {
			return node.VolumeUsage{}, errdefs.NotFound("no volume %s", id)
		}
		return node.VolumeUsage{}, err
	}
	return node.VolumeUsage{}, nil
}

// VolumeIDs lists the volumes whose claims this instance made and that
// are not being deleted.
func (b *Backend) VolumeIDs() ([]string, error) {
	cs, err := b.client.CoreV1().PersistentVolumeClaims(b.cfg.Namespace).List(context.Background(), metav1.ListOptions{
		LabelSelector: labels.Set{LabelManagedBy: ManagedBy, LabelInstance: b.cfg.Instance}.String() + "," + LabelVolume})
	if err != nil {
		return nil, err
	}
	var ids []string
	for _, c := range cs.Items {
		if c.DeletionTimestamp == nil {
			ids = append(ids, c.Labels[LabelVolume])
		}
	}
	slices.Sort(ids)
	return ids, nil
}

// Capacity is the largest volume or disk cap admitted.
func (b *Backend) Capacity() (int64, error) { return b.cfg.MaxVolume, nil }

// Admit refuses only what exceeds Capacity: the cluster's quotas and
// provisioner decide the rest when the claim is made.
func (b *Backend) Admit(need int64, what string, committed func() int64) error {
	if need > b.cfg.MaxVolume {
		return errdefs.InsufficientStorage("%s needs %d bytes; this kubernetes backend admits at most %d", what, need, b.cfg.MaxVolume)
	}
	return nil
}

// Committed: the node keeps no storage of its own.
func (b *Backend) Committed(sb *sandbox.Sandbox) int64 { return 0 }

// ReleaseReserve: there is no reserve.
func (b *Backend) ReleaseReserve() {}

// DiskUsage: the pod's writable layer is the kubelet's; its cap is the
// container's ephemeral-storage limit, enforced by eviction.
func (b *Backend) DiskUsage(sb *sandbox.Sandbox) *node.Disk {
	if sb.Spec.Resources.DiskBytes <= 0 {
		return nil
	}
	return &node.Disk{CapBytes: sb.Spec.Resources.DiskBytes, CapInodes: sandbox.DiskInodes(sb.Spec.Resources.DiskBytes),
		Enforced: false, Note: "kubernetes: the cap is the container's ephemeral-storage limit, which the kubelet enforces by evicting the pod; use is not reported"}
}
