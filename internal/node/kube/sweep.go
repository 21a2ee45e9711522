package kube

import (
	"context"
	"fmt"
	"slices"

	"k8s.io/apimachinery/pkg/labels"

	"github.com/berth-sh/berth/internal/node"
	"github.com/berth-sh/berth/internal/sandbox"
)

// labelled lists, from the cache, the sandbox ids that have a pod,
// identity or network policy of this instance, and the volume ids that
// have a claim.
func (b *Backend) labelled() (sandboxes, volumes []string, err error) {
	sel := labels.SelectorFromSet(labels.Set{LabelManagedBy: ManagedBy, LabelInstance: b.cfg.Instance})
	seen := map[string]bool{}
	add := func(l map[string]string) {
		if id := l[LabelSandbox]; id != "" && !seen[id] {
			seen[id] = true
			sandboxes = append(sandboxes, id)
		}
	}
	pods, err := b.pods.Pods(b.cfg.Namespace).List(sel)
	if err != nil {
		return nil, nil, err
	}
	for _, p := range pods {
		add(p.Labels)
	}
	secrets, err := b.secrets.Secrets(b.cfg.Namespace).List(sel)
	if err != nil {
		return nil, nil, err
	}
	for _, s := range secrets {
		add(s.Labels)
	}
	claims, err := b.claims.PersistentVolumeClaims(b.cfg.Namespace).List(sel)
	if err != nil {
		return nil, nil, err
	}
	for _, c := range claims {
		add(c.Labels)
		if v := c.Labels[LabelVolume]; v != "" && c.DeletionTimestamp == nil {
			volumes = append(volumes, v)
		}
	}
	slices.Sort(sandboxes)
	slices.Sort(volumes)
	return sandboxes, volumes, nil
}

// Sweep reports the pods, identities and policies of sandboxes no live
// record accounts for (the fix removes them), claims of volumes no
// record knows (the fix deletes them), and live running records whose
// pod ended or is gone.
func (b *Backend) Sweep(ctx context.Context, in node.SweepInput, report node.Report) {
	ids, vols, err := b.labelled()
	if err != nil {
		report("kubernetes", b.cfg.Namespace, "listing berth's objects: "+err.Error(), nil)
		return
	}
	for _, id := range ids {
		// Busy re-reads the record into Live: look again after it.
		if in.Live[id] != nil || in.Busy(id) || in.Live[id] != nil {
			continue
		}
		report("sandbox", id, "pod, identity or network policy labelled with a sandbox no live record accounts for", func() error {
			return b.Remove(ctx, &sandbox.Sandbox{ID: id})
		})
	}
	for _, v := range vols {
		if _, known := in.VolumeOwner(v); known {
			continue
		}
		report("volume", v, "claim "+claimName(v)+" of a volume no record knows", func() error { return b.DeleteVolume(v) })
	}
	b.sweepCaptures(ctx, in.Snapshot, report)
	for id, sb := range in.Live {
		if sb.State != sandbox.StateRunning || in.Busy(id) {
			continue
		}
		if p := b.podOf(id); p == nil {
			report("sandbox", id, "running record without a pod", nil)
		} else if st := statusOf(p); st != node.StatusRunning {
			report("sandbox", id, fmt.Sprintf("running record whose pod is %s: %s", p.Status.Phase, podWhy(p)), nil)
		}
	}
}

// Recover adopts what matches live records (their identities are in
// their Secrets: nothing to re-register) and removes the objects of
// sandboxes that have none.
func (b *Backend) Recover(ctx context.Context, live []*sandbox.Sandbox) error {
	keep := map[string]bool{}
	for _, sb := range live {
		keep[sb.ID] = true
	}
	ids, _, err := b.labelled()
	if err != nil {
		return err
	}
	adopted, removed := 0, 0
	for _, id := range ids {
		if keep[id] {
			adopted++
			continue
		}
		if err := b.Remove(ctx, &sandbox.Sandbox{ID: id}); err != nil {
			return fmt.Errorf("removing the objects of sandbox %s, which has no record: %w", id, err)
		}
		removed++
	}
	b.log.Info("kubernetes objects recovered", "adopted", adopted, "removed", removed)
	return nil
}

// Tick: the informers keep the caches; egress pins that expired leave
// their policies (only the node lease's holder ticks).
func (b *Backend) Tick(ctx context.Context, live []*sandbox.Sandbox) {
	b.expirePins(ctx) // egress.go
}
