package metrics

import "github.com/prometheus/client_golang/prometheus"

var descLeader = prometheus.NewDesc("berth_reconcile_leader",
	"1 if this replica holds the reconcile lease and runs its background work, 0 if another does; "+
		"lease is node (the node's sandboxes) or store (store-wide jobs). Summed over replicas: 1 per lease.",
	[]string{"lease"}, nil)

// LeaseSource says, at scrape time, whether this replica holds each lease
// kind ("node", "store").
type LeaseSource func() map[string]bool

// WatchLeases exports berth_reconcile_leader from src.
func (m *Metrics) WatchLeases(src LeaseSource) { m.reg.MustRegister(leaseCollector(src)) }

type leaseCollector LeaseSource

func (c leaseCollector) Describe(ch chan<- *prometheus.Desc) { ch <- descLeader }

func (c leaseCollector) Collect(ch chan<- prometheus.Metric) {
	for kind, held := range c() {
		v := 0.0
		if held {
			v = 1
		}
		ch <- prometheus.MustNewConstMetric(descLeader, prometheus.GaugeValue, v, kind)
	}
}
