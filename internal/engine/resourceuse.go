package engine

import (
	"context"
	"time"

	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/internal/sandbox"
)

// usageWindow is how long ResourceUse watches the CPU counter.
const usageWindow = 200 * time.Millisecond

// ResourceUse is a running sandbox's resource use now, from berth's own
// accounting (its cgroup and its writable layer).
type ResourceUse struct {
	At          time.Time
	CPUPercent  float64 // of its CPU limit, over the last usageWindow
	CPUs        float64
	MemoryBytes int64 // what its cgroup holds, page cache included
	MemoryLimit int64
	DiskBytes   int64 // its writable root layer; 0 when that is on its volume
	DiskLimit   int64
}

// ResourceUse samples sandbox ref's CPU over a short window, its memory and its
// disk. Only a running sandbox has processes to account: another is a
// conflict.
func (m *Engine) ResourceUse(ctx context.Context, ref string) (ResourceUse, error) {
	sb, err := m.local(ctx, ref)
	if err != nil {
		return ResourceUse{}, err
	}
	if sb.State != sandbox.StateRunning {
		return ResourceUse{}, errdefs.Conflict("sandbox %s is %s: only a running sandbox has usage", sb.ID, sb.State)
	}
	u := ResourceUse{CPUs: sb.Spec.Resources.CPUs, MemoryLimit: sb.Spec.Resources.MemoryBytes}
	c0, err := m.node.CPUUsage(sb)
	if err != nil {
		return ResourceUse{}, err
	}
	t0 := time.Now()
	select {
	case <-ctx.Done():
		return ResourceUse{}, ctx.Err()
	case <-time.After(usageWindow):
	}
	c1, err := m.node.CPUUsage(sb)
	if err != nil {
		return ResourceUse{}, err
	}
	u.At = time.Now()
	if el := u.At.Sub(t0); el > 0 && u.CPUs > 0 {
		u.CPUPercent = min(100, max(0, 100*float64(c1-c0)/float64(el)/u.CPUs))
	}
	if u.MemoryBytes, err = m.node.MemoryUsage(sb); err != nil {
		return ResourceUse{}, err
	}
	if d := m.node.DiskUsage(sb); d != nil {
		u.DiskBytes, u.DiskLimit = d.UsedBytes, d.CapBytes
	}
	return u, nil
}
