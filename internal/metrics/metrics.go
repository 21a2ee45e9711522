// Package metrics owns berth's Prometheus registry and every measure of
// the engine: time to interactive, create outcomes, exec completion,
// resume latency, cleanup lag, teardown failures, orphans, policy
// actions, webhook deliveries and egress decisions (recorded as they
// happen through the engine's Recorder hook), and the gauges read at
// scrape time from a Source (sandboxes by state, pools, storage), cached
// for a few seconds so a scrape costs one store read at most.
//
// No label takes an unbounded value: there are no sandbox ids, and the
// template label is folded to "other" beyond MaxTemplates distinct names.
//
// The daemon makes the registry and hands it to the engine as
// engine.Config.Metrics (the engine's Recorder interface, so the engine
// imports no Prometheus) and to the server, which registers the API's
// collectors (NewAPI: requests, latency, connections, agent-channel
// refusals) on it. The scrape-time Source is the daemon's engine metrics snapshot (internal/daemon/enginemetrics.go). Where
// each measure is taken is in docs/metrics.md.
package metrics

import (
	"context"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// MaxTemplates bounds the distinct values of the template label; names
// beyond it are recorded as OtherTemplate.
const MaxTemplates = 64

// OtherTemplate is the template label of names past MaxTemplates.
const OtherTemplate = "other"

// Metrics is the registry and its collectors. Its methods are the
// engine's Recorder; they are safe for concurrent use.
type Metrics struct {
	reg *prometheus.Registry

	tti           *prometheus.HistogramVec
	creates       *prometheus.CounterVec
	execs         *prometheus.CounterVec
	execSeconds   *prometheus.HistogramVec
	resume        *prometheus.HistogramVec
	cleanupLag    *prometheus.HistogramVec
	teardownFails *prometheus.CounterVec
	orphansFound  *prometheus.CounterVec
	orphansGone   *prometheus.CounterVec
	policy        *prometheus.CounterVec
	webhooks      *prometheus.CounterVec
	egress        *prometheus.CounterVec
	provision     *prometheus.HistogramVec

	tplMu sync.Mutex
	tpls  map[string]bool
}

// latencyBuckets span 5ms to about 80s: a pool claim to a cold start of a
// large image.
var latencyBuckets = prometheus.ExponentialBuckets(0.005, 2, 15)

// New returns a registry holding the engine's collectors and the Go
// runtime's and process's.
func New() *Metrics {
	m := &Metrics{reg: prometheus.NewRegistry(), tpls: map[string]bool{}}
	m.tti = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "berth_time_to_interactive_seconds",
		Help:    "Create request to the sandbox's agent answering, of successful creates, by template, runtime class and path (cold, pool, snapshot).",
		Buckets: latencyBuckets,
	}, []string{"template", "class", "path"})
	m.creates = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "berth_sandbox_creates_total",
		Help: "Create requests by outcome: code is ok or the error code the API returned (invalid_argument, not_found, resource_exhausted, ...).",
	}, []string{"code"})
	m.execs = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "berth_exec_completions_total",
		Help: "Commands run by exec, by outcome: ok (exit 0), nonzero, timeout, error (did not run to an exit).",
	}, []string{"outcome"})
	m.execSeconds = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "berth_exec_duration_seconds",
		Help:    "Wall time of exec commands by outcome.",
		Buckets: prometheus.ExponentialBuckets(0.001, 2, 20),
	}, []string{"outcome"})
	m.resume = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "berth_resume_seconds",
		Help:    "Time to bring a sandbox back to running, by kind: unpause, start, wake (from hibernation), pool_claim.",
		Buckets: latencyBuckets,
	}, []string{"kind"})
	m.cleanupLag = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "berth_cleanup_lag_seconds",
		Help:    "Delete request (or the policy deadline) to every host resource of the sandbox verified gone, by cause (user, policy, reconciler).",
		Buckets: latencyBuckets,
	}, []string{"cause"})
	m.teardownFails = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "berth_teardown_failures_total",
		Help: "Failed teardown steps: stage attempt (retried at once), incomplete (left to the reconciler's retry).",
	}, []string{"stage"})
	m.orphansFound = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "berth_orphans_found_total",
		Help: "Host resources no record accounts for, found by a fixing sweep (start-up or doctor --fix), by kind.",
	}, []string{"kind"})
	m.orphansGone = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "berth_orphans_removed_total",
		Help: "Orphans a fixing sweep removed, by kind.",
	}, []string{"kind"})
	m.policy = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "berth_policy_actions_total",
		Help: "Lifecycle policy actions taken, by policy (timeout, idle, max_age, retention) and action (pause, stop, delete).",
	}, []string{"policy", "action"})
	m.webhooks = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "berth_webhook_deliveries_total",
		Help: "Webhook delivery attempts by outcome (ok, failed).",
	}, []string{"outcome"})
	m.egress = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "berth_egress_decisions_total",
		Help: "Egress flow-log decisions of sandboxes' connections and lookups: allow or deny.",
	}, []string{"decision"})
	m.provision = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "berth_provision_step_seconds",
		Help:    "Each step of laying down and starting a sandbox on this host (mounts, userns, netns, agent-channel, runtime-start, network, agent-ready), of provisions that succeeded up to that step.",
		Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16),
	}, []string{"step"})
	m.reg.MustRegister(m.tti, m.creates, m.execs, m.execSeconds, m.resume, m.cleanupLag, m.teardownFails,
		m.orphansFound, m.orphansGone, m.policy, m.webhooks, m.egress, m.provision,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// Registry is where every berth collector is registered; /metrics serves it.
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

// Template returns name as a template label value: the name itself for
// the first MaxTemplates names seen, OtherTemplate after.
func (m *Metrics) Template(name string) string {
	m.tplMu.Lock()
	defer m.tplMu.Unlock()
	if m.tpls[name] {
		return name
	}
	if len(m.tpls) >= MaxTemplates {
		return OtherTemplate
	}
	m.tpls[name] = true
	return name
}

// Created records a successful create and how long it took the sandbox to
// answer.
func (m *Metrics) Created(template, class, path string, d time.Duration) {
	m.creates.WithLabelValues("ok").Inc()
	m.tti.WithLabelValues(m.Template(template), class, path).Observe(d.Seconds())
}

// ProvisionStep records how long one step of a provision took (the local
// backend's Config.Step; the step names are its fixed set).
func (m *Metrics) ProvisionStep(step string, d time.Duration) {
	m.provision.WithLabelValues(step).Observe(d.Seconds())
}

// CreateFailed records a create refused or failed with the API error code.
func (m *Metrics) CreateFailed(code string) { m.creates.WithLabelValues(code).Inc() }

// ExecDone records an exec's outcome and wall time.
func (m *Metrics) ExecDone(outcome string, d time.Duration) {
	m.execs.WithLabelValues(outcome).Inc()
	m.execSeconds.WithLabelValues(outcome).Observe(d.Seconds())
}

// Resumed records how long bringing a sandbox back took.
func (m *Metrics) Resumed(kind string, d time.Duration) {
	m.resume.WithLabelValues(kind).Observe(d.Seconds())
}

// CleanedUp records a deletion verified complete d after it was asked for.
func (m *Metrics) CleanedUp(cause string, d time.Duration) {
	m.cleanupLag.WithLabelValues(cause).Observe(d.Seconds())
}

// TeardownFailed records a failed teardown step; incomplete says the
// deletion was left to the reconciler.
func (m *Metrics) TeardownFailed(incomplete bool) {
	stage := "attempt"
	if incomplete {
		stage = "incomplete"
	}
	m.teardownFails.WithLabelValues(stage).Inc()
}

// Orphan records an orphan a fixing sweep found, and whether it removed it.
func (m *Metrics) Orphan(kind string, removed bool) {
	m.orphansFound.WithLabelValues(kind).Inc()
	if removed {
		m.orphansGone.WithLabelValues(kind).Inc()
	}
}

// PolicyAction records a policy action taken.
func (m *Metrics) PolicyAction(policy, action string) {
	m.policy.WithLabelValues(policy, action).Inc()
}

// WebhookDelivery records one delivery attempt.
func (m *Metrics) WebhookDelivery(ok bool) {
	outcome := "ok"
	if !ok {
		outcome = "failed"
	}
	m.webhooks.WithLabelValues(outcome).Inc()
}

// Egress records a flow-log decision: anything but deny is allow.
func (m *Metrics) Egress(decision string) {
	if decision != "deny" {
		decision = "allow"
	}
	m.egress.WithLabelValues(decision).Inc()
}

// Watch registers the gauges read from src at scrape time; a result is
// reused for maxAge (a scrape storm costs one read per maxAge).
func (m *Metrics) Watch(src Source, maxAge time.Duration) {
	m.reg.MustRegister(&stateCollector{m: m, src: src, maxAge: maxAge})
}

// Source is what the scrape-time gauges read.
type Source func(ctx context.Context) (Snapshot, error)
