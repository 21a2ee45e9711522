package metrics

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// API is the HTTP API's measures, which the server records into.
type API struct {
	Requests    *prometheus.CounterVec   // by method and status code
	Latency     *prometheus.HistogramVec // by method
	Created     prometheus.Counter
	Deleted     prometheus.Counter
	Execs       prometheus.Counter
	ExecSeconds prometheus.Histogram
	// ConnOpen and ConnRefused count the API's connections.
	ConnOpen    prometheus.Gauge
	ConnRefused prometheus.Counter
}

// NewAPI registers the API's collectors on reg.
func NewAPI(reg prometheus.Registerer) *API {
	a := &API{
		Requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "berth_http_requests_total", Help: "API requests by method and status code.",
		}, []string{"method", "code"}),
		Latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "berth_http_request_seconds", Help: "API request latency.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16),
		}, []string{"method"}),
		Created: prometheus.NewCounter(prometheus.CounterOpts{Name: "berth_sandboxes_created_total", Help: "Sandboxes created."}),
		Deleted: prometheus.NewCounter(prometheus.CounterOpts{Name: "berth_sandboxes_deleted_total", Help: "Sandboxes deleted."}),
		Execs:   prometheus.NewCounter(prometheus.CounterOpts{Name: "berth_execs_total", Help: "Commands executed."}),
		ExecSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "berth_exec_seconds", Help: "Exec wall time.", Buckets: prometheus.ExponentialBuckets(0.0005, 2, 20),
		}),
		ConnOpen: prometheus.NewGauge(prometheus.GaugeOpts{Name: "berth_http_connections_open", Help: "API connections open."}),
		ConnRefused: prometheus.NewCounter(prometheus.CounterOpts{Name: "berth_http_connections_refused_total",
			Help: "API connections closed at accept: the client had --max-conns-per-client open."}),
	}
	reg.MustRegister(a.Requests, a.Latency, a.Created, a.Deleted, a.Execs, a.ExecSeconds, a.ConnOpen, a.ConnRefused)
	return a
}

// RegisterRuntime registers the Go runtime's and the process's collectors
// on a registry New did not make (New's has them).
func RegisterRuntime(reg prometheus.Registerer) {
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
}

// RegisterAgentRefusals registers the count of agent connections the
// daemon refused, read from fn at scrape.
func RegisterAgentRefusals(reg prometheus.Registerer, fn func() uint64) {
	reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "berth_agent_channel_refused_total",
		Help: "Connections to sandbox agents the daemon refused for who was listening (a replaced, redirected or impostor socket).",
	}, func() float64 { return float64(fn()) }))
}
