package daemon

import (
	"context"

	"github.com/berth-sh/berth/internal/engine"
	"github.com/berth-sh/berth/internal/metrics"
	"github.com/berth-sh/berth/internal/sandbox"
	"github.com/berth-sh/berth/internal/store"
)

// MetricsSnapshot reads what the scrape-time gauges show: this node's
// live sandboxes, the warm pools, and storage in use by kind. It is a
// metrics.Source; the collector caches it between scrapes.
func (m *engineSet) MetricsSnapshot(ctx context.Context) (metrics.Snapshot, error) {
	var s metrics.Snapshot
	st, backend := m.Store(), m.Engine.Host().Backend()
	live, _, err := st.ListSandboxes(ctx, store.SandboxFilter{Owner: store.AnyOwner, Node: m.Node()}, store.Page{})
	if err != nil {
		return s, err
	}
	tpls, _, err := st.ListTemplates(ctx, store.Page{}) // the shared catalogue
	if err != nil {
		return s, err
	}
	shared := map[string]bool{}
	for _, t := range tpls {
		shared[t.Name] = true
	}
	s.Storage = map[string]int64{}
	for _, sb := range live {
		// A name the shared catalogue does not have is a tenant's own.
		tname := sb.Spec.Template
		if engine.IsImageTemplate(tname) {
			tname = engine.ImageTemplateLabel
		} else if !shared[tname] {
			tname = engine.TenantTemplateLabel
		}
		s.Sandboxes = append(s.Sandboxes, metrics.SandboxStat{
			State: string(sb.State), Template: tname, Class: m.Engine.Host().ClassOf(sb),
			TeardownFailed: (sb.State == sandbox.StateDeleting || sb.State == sandbox.StateFailed) && sb.Error != "",
		})
		if d := backend.DiskUsage(sb); d != nil {
			s.Storage["scratch"] += d.UsedBytes
		}
	}
	pools, err := m.Pools(ctx)
	if err != nil {
		return s, err
	}
	for _, p := range pools {
		s.Pools = append(s.Pools, metrics.PoolStat{Template: p.Template, Target: p.Min, Ready: p.Ready,
			Start: p.Starting, Hits: p.Hits, Misses: p.Misses})
	}
	if ids, err := backend.VolumeIDs(); err == nil {
		for _, id := range ids {
			if u, err := backend.VolumeUsage(id); err == nil {
				s.Storage["volumes"] += u.UsedBytes
			}
		}
	}
	snaps, _, err := st.ListSnapshots(ctx, store.SnapshotFilter{Owner: store.AnyOwner}, store.Page{})
	if err != nil {
		return s, err
	}
	for _, sn := range snaps {
		s.Storage["snapshots"] += sn.SizeBytes
	}
	seen := map[string]bool{}
	images := m.Engine.Host().Images()
	for _, t := range tpls {
		for _, l := range t.Layers {
			if !seen[l] && images != nil {
				seen[l] = true
				if n := images.Size(l); n > 0 {
					s.Storage["layers"] += n
				}
			}
		}
	}
	if c, err := backend.Capacity(); err == nil {
		s.CapacityBytes = c
	}
	return s, nil
}
