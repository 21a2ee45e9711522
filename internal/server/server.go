// Package server is berth's HTTP API (/v1): JSON over a root-only unix
// socket and, with API keys, over TCP. This package assembles it: the
// Server, the route table, and the middleware every route passes. The
// handlers live in a package per resource, each declaring the small
// interface of the engine it uses (sandboxes, exec, files, events,
// templates, admin); what they share — the JSON and error writers, the
// one mapping of error categories (internal/errdefs) to statuses and
// stable codes, request ids, paging, the caller in the context — is
// package rest, and the API types become the engine's and back in package
// convert only.
//
// One route table (routes.go) registers every route with the operation it
// is (internal/access, whose catalogue holds its rule and audit action; an
// unknown operation or an unsafe rule stops the server from starting) and what it is
// (Stream, EventStream, Upload). Each handler sits behind a guard that
// authenticates and authorizes after the ServeMux matched, from the matched
// pattern and the decoded path values the handler reads, so authorization
// and routing cannot read different forms of a path; the guard also sets the
// per-request deadlines, binds long-lived requests to their credential
// (live.go), applies the per-key rate limit (ratelimit.go) and per-tenant
// shares (shares.go), and begins the audit record (audit.go). Host routing
// ({port}-{id}.{domain}) parses the host once into the same path values and
// guard, and the port proxy (proxy.go) serves both forms. Routes() exposes
// the table (TestCrossTenantRoutes and TestEveryMutatingRouteAudited walk
// it; the OpenAPI scopes are checked against it). door.go lends the E2B
// door the guard's credential check for an operation (Credential, SandboxLease, ProxyPort,
// WithCaller). The edge's behaviour (errors, input, TLS, connections,
// tenancy, quotas) is described in docs/api.md.
package server

import (
	"context"
	"crypto/ed25519"
	"fmt"
	"log/slog"
	"net/http"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/internal/audit"
	"github.com/berth-sh/berth/internal/auth"
	"github.com/berth-sh/berth/internal/console"
	"github.com/berth-sh/berth/internal/errdefs"
	bmetrics "github.com/berth-sh/berth/internal/metrics"
	"github.com/berth-sh/berth/internal/sandbox"
	"github.com/berth-sh/berth/internal/server/admin"
	"github.com/berth-sh/berth/internal/server/convert"
	"github.com/berth-sh/berth/internal/server/events"
	"github.com/berth-sh/berth/internal/server/exec"
	"github.com/berth-sh/berth/internal/server/files"
	"github.com/berth-sh/berth/internal/server/input"
	"github.com/berth-sh/berth/internal/server/observe"
	"github.com/berth-sh/berth/internal/server/ratelimit"
	"github.com/berth-sh/berth/internal/server/rest"
	"github.com/berth-sh/berth/internal/server/sandboxes"
	"github.com/berth-sh/berth/internal/server/templates"
)

// maxJSONBody bounds every JSON request body (but apply's).
const maxJSONBody = input.MaxBody

// Version is set by the daemon from the build.
var Version = "dev"

// Server serves the API.
type Server struct {
	// Domain, if set, routes requests for {port}-{id}.{Domain} to that
	// sandbox port.
	Domain string
	// Leases mints the lease token a create returns (nil: none).
	Leases *auth.Leases
	// Audit, if set, records every audited call (audit.go) and serves
	// /v1/audit.
	Audit *audit.Log
	// AuditAnchorKey checks the anchors POST /v1/audit/verify is given
	// (audit.Anchorer signs them with its private half).
	AuditAnchorKey ed25519.PublicKey
	// BodyTimeout bounds how long a request on a non-streaming route may
	// take to send its body; WriteTimeout how long such a request may take
	// to be answered (0: no bound). Streaming routes (Route.Stream) have
	// neither; see deadlines.
	BodyTimeout  time.Duration
	WriteTimeout time.Duration
	// MaxHeaderBytes is the http.Server's limit, quoted in the 431 answer
	// (0: DefaultMaxHeaderBytes).
	MaxHeaderBytes int
	// TLSFingerprint is the pin of the TLS listener's certificate, shown
	// in GET /v1/version.
	TLSFingerprint string
	// KeyRate is the default request rate of each API key (ratelimit.go);
	// a tenant's quota key_rate overrides it.
	KeyRate  KeyRate
	keyRates ratelimit.Keys
	// MCPMaxSessions, MCPMaxSessionsPerTenant and MCPIdleTimeout bound
	// /v1/mcp's sessions (0: internal/mcp's defaults).
	MCPMaxSessions          int
	MCPMaxSessionsPerTenant int
	MCPIdleTimeout          time.Duration
	// Forward, if set, sends requests about sandboxes another daemon of
	// the shared store runs to that daemon (forward.go).
	Forward *Forwarder
	// Webhooks are the configured webhook endpoints GET /v1/webhooks
	// shows (serve --webhook-url).
	Webhooks []WebhookSource
	// EventPing is the heartbeat of an idle event stream (0: 15 s).
	EventPing time.Duration
	events    *events.Handlers // the event routes and their open streams
	admin     *admin.Handlers  // tenants, keys, tokens, quotas, secrets, audit reads
	templates *templates.Handlers
	sandboxes *sandboxes.Handlers
	files     *files.Handlers
	exec      *exec.Handlers
	live      liveCreds    // long-lived connections bound to their credentials (live.go)
	uploads   uploadShares // running uploads per tenant (shares.go)
	m         Engine
	authn     *auth.Authenticator
	log       *slog.Logger
	mux       *http.ServeMux
	metrics   *metrics
	// table is the mounted route table; hostRoute its host-routed proxy.
	table     []Route
	hostRoute Route
	// lookup resolves a sandbox for authorization (the engine's Get).
	lookup func(context.Context, string) (*sandbox.Sandbox, error)
	idem   idemState // Idempotency-Key attempts (idempotency.go, internal/server/idempotency)

	// Secrets serves /v1/secrets (package admin).
	Secrets SecretsConfig
	mcp     mcpState // the MCP endpoint (mcp.go)

	// ConsoleURLs are the base URLs of the daemon's TCP listeners
	// ("http://127.0.0.1:7070"), for the sign-in links of `berth console`
	// (console.go).
	ConsoleURLs  []string
	consoleCodes *console.Codes
	observe      *observe.Handlers
}

// WebhookSource is a configured webhook endpoint (GET /v1/webhooks).
type WebhookSource = observe.WebhookSource

// New returns the API server for m.
func New(m Engine, authn *auth.Authenticator, log *slog.Logger) *Server {
	s := &Server{m: m, authn: authn, log: log, consoleCodes: console.NewCodes()}
	// The engine's registry (package metrics), when it has one: /metrics
	// serves the API's measures and the engine's together.
	if r, ok := engineRegistry(m); ok {
		s.metrics = newMetricsOn(r, false)
	} else {
		s.metrics = newMetrics()
	}
	s.events = &events.Handlers{Ping: func() time.Duration { return s.EventPing }, Log: s.logger}
	s.admin = &admin.Handlers{Opts: s.adminOptions, Now: s.now, CredentialsChanged: s.credentialsChanged,
		QuotaChanged: s.keyRates.Forget, Log: s.logger}
	s.templates = &templates.Handlers{}
	s.sandboxes = &sandboxes.Handlers{Created: s.metrics.created, Deleted: s.metrics.deleted, CreateLease: s.createLease}
	s.files = &files.Handlers{}
	s.observe = &observe.Handlers{Webhooks: func() []WebhookSource { return s.Webhooks }}
	s.exec = &exec.Handlers{Execs: s.metrics.execs, ExecSeconds: s.metrics.execDur, Created: s.metrics.created,
		Deleted: s.metrics.deleted, Log: s.logger}
	if m != nil {
		s.lookup = m.Get
		s.metrics.watchEngine(m)
		// Only a real engine: a nil one in an interface would not read as
		// none where a handler asks.
		s.events.E, s.admin.E, s.templates.E = m, m, m
		s.sandboxes.E, s.files.E, s.exec.E, s.observe.E = m, m, m, m
	}
	s.mount(s.routeTable())
	return s
}

// SecretsConfig is what the secrets routes need from the daemon.
type SecretsConfig = admin.SecretsConfig

// adminOptions are the settings the admin routes read, as the daemon
// left them on s.
func (s *Server) adminOptions() admin.Options {
	return admin.Options{Leases: s.Leases, Domain: s.Domain, Audit: s.Audit, AuditAnchorKey: s.AuditAnchorKey,
		Secrets: s.Secrets}
}

// LeaseRevoker is the engine's OnState hook: a sandbox that stops, is
// quarantined, fails or is deleted loses its leases (see package admin).
func LeaseRevoker(st admin.LeaseStore, log *slog.Logger) func(string, sandbox.State) {
	return admin.LeaseRevoker(st, log)
}

// CloseStreams ends every open event stream and refuses new ones: the
// daemon calls it before shutting its listeners down, so streams do not
// hold the shutdown up (their clients reconnect to the next daemon).
func (s *Server) CloseStreams() { s.events.Close() }

// EventJSON is an event as the events API writes it: the body of its
// webhook delivery too (webhook.Config.Encode).
func EventJSON(e *sandbox.Event) ([]byte, error) { return events.EventJSON(e) }

// Handler returns the handler for one listener. On the local unix socket
// (trusted) callers are the host administrator; elsewhere each route's
// guard authenticates and authorizes the request after the mux (or the
// host name, for {port}-{id}.{domain}) has chosen its route.
func (s *Server) Handler(trusted bool) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		id := rest.RequestIDOf(r)
		w.Header().Set(RequestIDHeader, id)
		sw := rest.NewWriter(w, id, r.Method, s.log)
		defer func() {
			if v := recover(); v != nil {
				if v == http.ErrAbortHandler {
					panic(v)
				}
				// The stack is what finds the bug; the client gets the
				// request id that names this log line.
				s.logger().Error("handler panic", "request_id", id, "method", r.Method, "route", sw.Route(),
					"panic", fmt.Sprint(v), "stack", string(debug.Stack()))
				if !sw.Wrote() {
					rest.Error(sw, fmt.Errorf("handler panic: %v", v))
				}
			}
			s.metrics.observe(r, sw.Status(), time.Since(start))
		}()
		if r.RequestURI == "*" {
			// The mux would answer an empty 400 (OPTIONS * never gets here).
			rest.Error(sw, errdefs.Invalid("request target * is only for OPTIONS"))
			return
		}
		r = r.WithContext(rest.WithTrusted(r.Context(), trusted))
		if id, port, ok := s.hostTarget(r); ok {
			// {port}-{id}.{domain}: the whole request goes to the sandbox.
			// The host name is parsed once, into the path values the
			// guard and the proxy both read.
			r.Pattern = s.hostRoute.Pattern
			r.SetPathValue("id", id)
			r.SetPathValue("port", strconv.Itoa(port))
			s.guard(s.hostRoute).ServeHTTP(sw, r)
			return
		}
		s.mux.ServeHTTP(sw, r)
	})
}

func (s *Server) logger() *slog.Logger {
	if s.log == nil {
		return slog.Default()
	}
	return s.log
}

func (s *Server) version(w http.ResponseWriter, r *http.Request) {
	rest.JSON(w, 200, api.Version{Version: Version, Go: goVersion(), Runtime: strings.Join(s.m.RuntimeNames(), ","),
		TLSFingerprint: s.TLSFingerprint, Classes: convert.ClassesToAPI(s.m.Classes())})
}

func (s *Server) doctor(w http.ResponseWriter, r *http.Request) {
	rep, err := s.m.Doctor(r.Context(), r.Method == http.MethodPost)
	if err != nil {
		rest.Error(w, err)
		return
	}
	rest.JSON(w, 200, convert.DoctorToAPI(rep))
}

type metrics struct {
	reg      *prometheus.Registry
	requests *prometheus.CounterVec
	latency  *prometheus.HistogramVec
	created  prometheus.Counter
	deleted  prometheus.Counter
	execs    prometheus.Counter
	execDur  prometheus.Histogram
	// connOpen and connRefused count the API's connections (Listener).
	connOpen    prometheus.Gauge
	connRefused prometheus.Counter
}

// engineRegistry is the registry of m's Recorder, if it keeps one.
func engineRegistry(m Engine) (*prometheus.Registry, bool) {
	if m == nil {
		return nil, false
	}
	r, ok := m.Config().Metrics.(interface{ Registry() *prometheus.Registry })
	if !ok {
		return nil, false
	}
	return r.Registry(), true
}

func newMetrics() *metrics { return newMetricsOn(prometheus.NewRegistry(), true) }

// newMetricsOn registers the API's collectors (package metrics') on reg;
// runtime adds the Go runtime's and the process's (which a registry of
// metrics.New has).
func newMetricsOn(reg *prometheus.Registry, runtime bool) *metrics {
	a := bmetrics.NewAPI(reg)
	if runtime {
		bmetrics.RegisterRuntime(reg)
	}
	return &metrics{reg: reg, requests: a.Requests, latency: a.Latency, created: a.Created, deleted: a.Deleted,
		execs: a.Execs, execDur: a.ExecSeconds, connOpen: a.ConnOpen, connRefused: a.ConnRefused}
}

// watchEngine adds the measures the engine keeps itself.
func (m *metrics) watchEngine(mgr Engine) {
	bmetrics.RegisterAgentRefusals(m.reg, mgr.AgentRefusals)
}

func (m *metrics) observe(r *http.Request, status int, d time.Duration) {
	m.requests.WithLabelValues(r.Method, strconv.Itoa(status)).Inc()
	m.latency.WithLabelValues(r.Method).Observe(d.Seconds())
}

func goVersion() string { return runtime.Version() }
