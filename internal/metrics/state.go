package metrics

import (
	"context"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Snapshot is what the scrape-time gauges show, as a Source read it.
type Snapshot struct {
	// Sandboxes are this node's live records (not deleted tombstones).
	Sandboxes []SandboxStat
	Pools     []PoolStat
	// Storage is bytes in use by kind: volumes, scratch (writable root
	// layers), snapshots, layers (the image store's unpacked layers).
	Storage map[string]int64
	// CapacityBytes is the storage pool's size; 0: unknown.
	CapacityBytes int64
}

// SandboxStat is one sandbox as the gauges count it.
type SandboxStat struct {
	State, Template, Class string
	// TeardownFailed: a deletion of it failed and waits on a retry.
	TeardownFailed bool
}

// PoolStat is one warm pool.
type PoolStat struct {
	Template             string
	Target, Ready, Start int
	Hits, Misses         int64
}

var (
	descSandboxes = prometheus.NewDesc("berth_sandboxes",
		"Sandboxes by state, template and runtime class (this node's records).", []string{"state", "template", "class"}, nil)
	descUndeleted = prometheus.NewDesc("berth_sandboxes_undeleted",
		"Sandboxes left after a failed deletion: teardown failed and waits on the reconciler's retry.", nil, nil)
	descPoolTarget   = prometheus.NewDesc("berth_pool_target", "Warm pool size asked for, by template.", []string{"template"}, nil)
	descPoolReady    = prometheus.NewDesc("berth_pool_ready", "Warm pool members ready to claim, by template.", []string{"template"}, nil)
	descPoolStarting = prometheus.NewDesc("berth_pool_starting", "Warm pool members being made, by template.", []string{"template"}, nil)
	descPoolHits     = prometheus.NewDesc("berth_pool_hits_total", "Creates served by a warm pool member, by template.", []string{"template"}, nil)
	descPoolMisses   = prometheus.NewDesc("berth_pool_misses_total", "Creates of a pooled template that found no ready member, by template.", []string{"template"}, nil)
	descStorage      = prometheus.NewDesc("berth_storage_bytes",
		"Storage in use by kind: volumes, scratch (writable root layers), snapshots, layers.", []string{"kind"}, nil)
	descCapacity = prometheus.NewDesc("berth_storage_capacity_bytes", "Size of the storage pool sandboxes' disks and volumes come from.", nil, nil)
	descSourceUp = prometheus.NewDesc("berth_metrics_source_up",
		"1 if the last read of the scrape-time gauges (store, pools, storage) succeeded, 0 if not.", nil, nil)
)

// stateCollector emits a Snapshot, read at most once per maxAge.
type stateCollector struct {
	m      *Metrics
	src    Source
	maxAge time.Duration

	mu   sync.Mutex
	at   time.Time
	last Snapshot
	ok   bool
}

func (c *stateCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descSandboxes, descUndeleted, descPoolTarget, descPoolReady, descPoolStarting,
		descPoolHits, descPoolMisses, descStorage, descCapacity, descSourceUp} {
		ch <- d
	}
}

// snapshot returns the cached snapshot, reading a new one when it is
// older than maxAge. Concurrent scrapes wait on one read.
func (c *stateCollector) snapshot() (Snapshot, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.at.IsZero() && time.Since(c.at) < c.maxAge {
		return c.last, c.ok
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := c.src(ctx)
	c.at, c.ok = time.Now(), err == nil
	if err == nil {
		c.last = s
	}
	return c.last, c.ok
}

func (c *stateCollector) Collect(ch chan<- prometheus.Metric) {
	s, ok := c.snapshot()
	up := 0.0
	if ok {
		up = 1
	}
	ch <- prometheus.MustNewConstMetric(descSourceUp, prometheus.GaugeValue, up)
	type key struct{ state, template, class string }
	counts := map[key]int{}
	undeleted := 0
	for _, sb := range s.Sandboxes {
		counts[key{sb.State, c.m.Template(sb.Template), sb.Class}]++
		if sb.TeardownFailed {
			undeleted++
		}
	}
	for k, n := range counts {
		ch <- prometheus.MustNewConstMetric(descSandboxes, prometheus.GaugeValue, float64(n), k.state, k.template, k.class)
	}
	ch <- prometheus.MustNewConstMetric(descUndeleted, prometheus.GaugeValue, float64(undeleted))
	// Pools folded into "other" are summed, so that no series repeats.
	pools := map[string]*PoolStat{}
	var order []string
	for _, p := range s.Pools {
		t := c.m.Template(p.Template)
		agg := pools[t]
		if agg == nil {
			agg = &PoolStat{Template: t}
			pools[t] = agg
			order = append(order, t)
		}
		agg.Target += p.Target
		agg.Ready += p.Ready
		agg.Start += p.Start
		agg.Hits += p.Hits
		agg.Misses += p.Misses
	}
	for _, t := range order {
		p := pools[t]
		ch <- prometheus.MustNewConstMetric(descPoolTarget, prometheus.GaugeValue, float64(p.Target), t)
		ch <- prometheus.MustNewConstMetric(descPoolReady, prometheus.GaugeValue, float64(p.Ready), t)
		ch <- prometheus.MustNewConstMetric(descPoolStarting, prometheus.GaugeValue, float64(p.Start), t)
		ch <- prometheus.MustNewConstMetric(descPoolHits, prometheus.CounterValue, float64(p.Hits), t)
		ch <- prometheus.MustNewConstMetric(descPoolMisses, prometheus.CounterValue, float64(p.Misses), t)
	}
	for _, kind := range StorageKinds {
		ch <- prometheus.MustNewConstMetric(descStorage, prometheus.GaugeValue, float64(s.Storage[kind]), kind)
	}
	if s.CapacityBytes > 0 {
		ch <- prometheus.MustNewConstMetric(descCapacity, prometheus.GaugeValue, float64(s.CapacityBytes))
	}
}

// StorageKinds are the kinds of berth_storage_bytes, always all exported.
var StorageKinds = []string{"volumes", "scratch", "snapshots", "layers"}
