// Package server is berth's HTTP API (/v1): JSON over a root-only unix
// socket and, with API keys, over TCP. Handlers decode and validate input,
// call the sandbox manager, and map error categories (internal/errdefs) to
// statuses and stable codes in one place (rest.Error).
//
// One route table (routes.go) registers every route with its auth.Rule (an
// invalid or unsafe rule stops the server from starting) and what it is
// (Stream, EventStream, Upload). Each handler sits behind a guard that
// authenticates and authorizes after the ServeMux matched, from the matched
// pattern and the decoded path values the handler reads, so authorization
// and routing cannot read different forms of a path; the guard also sets the
// per-request deadlines, binds long-lived requests to their credential
// (live.go), applies the per-key rate limit (ratelimit.go) and per-tenant
// shares (shares.go), and begins the audit record (audit.go). Host routing
// ({port}-{id}.{domain}) parses the host once into the same path values and
// guard. Routes() exposes the table (TestCrossTenantRoutes and
// TestEveryMutatingRouteAudited walk it; the OpenAPI scopes are checked
// against it). The API's types become the engine's and back in one file
// (convert.go; convert_test.go fails when a field of either side is not
// converted). door.go lends the E2B door the guard's credential check
// (Credential, CreateLease, ProxyPort, WithCaller). The edge's behaviour
// (errors, input, TLS, connections, tenancy, quotas) is described in
// docs/api.md.
package server

import (
	"context"
	"crypto/ed25519"
	"fmt"
	"log/slog"
	"net/http"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/internal/audit"
	"github.com/berth-sh/berth/internal/auth"
	"github.com/berth-sh/berth/internal/console"
	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/internal/manager"
	bmetrics "github.com/berth-sh/berth/internal/metrics"
	"github.com/berth-sh/berth/internal/sandbox"
	"github.com/berth-sh/berth/internal/server/admin"
	"github.com/berth-sh/berth/internal/server/convert"
	"github.com/berth-sh/berth/internal/server/events"
	"github.com/berth-sh/berth/internal/server/idempotency"
	"github.com/berth-sh/berth/internal/server/input"
	"github.com/berth-sh/berth/internal/server/rest"
	"github.com/berth-sh/berth/internal/server/templates"
	"github.com/berth-sh/berth/internal/store"
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
	keyRates keyRates
	// MCPMaxSessions, MCPMaxSessionsPerTenant and MCPIdleTimeout bound
	// /v1/mcp's sessions (0: internal/mcp's defaults).
	MCPMaxSessions          int
	MCPMaxSessionsPerTenant int
	MCPIdleTimeout          time.Duration
	// EventPing is the heartbeat of an idle event stream (0: 15 s).
	EventPing time.Duration
	events    *events.Handlers // the event routes and their open streams
	admin     *admin.Handlers  // tenants, keys, tokens, quotas, secrets, audit reads
	templates *templates.Handlers
	live      liveCreds    // long-lived connections bound to their credentials (live.go)
	uploads   uploadShares // running uploads per tenant (shares.go)
	m         *manager.Manager
	authn     *auth.Authenticator
	log       *slog.Logger
	mux       *http.ServeMux
	metrics   *metrics
	// table is the mounted route table; hostRoute its host-routed proxy.
	table     []Route
	hostRoute Route
	// lookup resolves a sandbox for authorization (the manager's Get).
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
}

// New returns the API server for m.
func New(m *manager.Manager, authn *auth.Authenticator, log *slog.Logger) *Server {
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
		QuotaChanged: s.keyRates.forget, Log: s.logger}
	s.templates = &templates.Handlers{}
	if m != nil {
		s.lookup = m.Get
		s.metrics.watchManager(m)
		// Only a real manager: a nil one in an interface would not read as
		// none where a handler asks.
		s.events.E, s.admin.E, s.templates.E = m, m, m
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
func LeaseRevoker(st store.Tenants, log *slog.Logger) func(string, sandbox.State) {
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

// toAPI converts a sandbox record to its API form.
func (s *Server) toAPI(sb *sandbox.Sandbox) api.Sandbox {
	out := api.Sandbox{
		ID: sb.ID, Name: sb.Name, Template: sb.Spec.Template, State: string(sb.State),
		Persistent: sb.Spec.Persistent,
		Resources: api.Resources{CPUs: sb.Spec.Resources.CPUs, MemoryBytes: sb.Spec.Resources.MemoryBytes,
			Pids: sb.Spec.Resources.Pids, DiskBytes: sb.Spec.Resources.DiskBytes},
		Env: sb.Spec.Env, Labels: sb.Spec.Labels, TimeoutSeconds: sb.Spec.Timeout.Seconds(),
		Network: sb.Spec.Network, Workdir: sb.Spec.Workdir, User: sb.Spec.User, Isolation: convert.IsolationToAPI(s.m.Isolation(sb)),
		CreatedAt: sb.CreatedAt, UpdatedAt: sb.UpdatedAt, Cause: string(sb.Cause), Reason: sb.Reason,
		Error: sb.Error,
	}
	if !sb.StartedAt.IsZero() {
		t := sb.StartedAt
		out.StartedAt = &t
	}
	if d, ok := sb.Deadline(); ok && sb.State != sandbox.StateDeleted {
		out.ExpiresAt = &d
	}
	if !sb.DeletedAt.IsZero() {
		t := sb.DeletedAt
		out.DeletedAt = &t
	}
	out.Hostname = sb.Hostname()
	out.IPv4, out.IPv6, out.Allow, out.PublicPorts = sb.Spec.IPv4, sb.Spec.IPv6, sb.Spec.Allow, sb.Spec.PublicPorts
	for _, r := range sb.Spec.Secrets {
		out.Secrets = append(out.Secrets, api.SecretRef{Name: r.Name, Env: r.Env, File: r.File, EgressHost: r.EgressHost})
	}
	out.PersistRoot, out.KeepVolume = sb.Spec.PersistRoot, sb.Spec.KeepVolume
	for _, vm := range sb.Spec.Volumes {
		out.Volumes = append(out.Volumes, api.VolumeMount{Name: vm.Name, Path: vm.Path, ReadOnly: vm.ReadOnly})
	}
	p := sb.Spec.Policy
	out.Policy = convert.PolicyToAPI(p)
	out.LastActivityAt = convert.TimePtr(s.m.LastActivity(sb))
	out.PausedAt, out.StoppedAt = convert.TimePtr(sb.PausedAt), convert.TimePtr(sb.StoppedAt)
	if due, ok := sandbox.Next(sb, s.m.LastActivity(sb)); ok {
		out.NextAction, out.NextActionAt = string(due.Action)+" ("+due.Policy+")", convert.TimePtr(due.At)
	}
	out.Disk = convert.DiskToAPI(s.m.DiskUsage(sb))
	if sb.Spec.Parent != "" || sb.Spec.FromSnapshot != "" {
		out.Lineage = &api.Lineage{Parent: sb.Spec.Parent, FromSnapshot: sb.Spec.FromSnapshot}
	}
	if sb.State.Live() {
		for _, vm := range sb.Spec.Volumes {
			if vm.Owned {
				if v, err := s.m.Store().GetVolume(context.Background(), store.AnyOwner, vm.VolumeID); err == nil {
					av := s.volumeToAPI(v)
					out.Storage = &av
				}
			}
		}
	}
	return out
}

func (s *Server) createSandbox(w http.ResponseWriter, r *http.Request) {
	var req api.CreateSandboxRequest
	if err := input.Decode(r, &req); err != nil {
		rest.Error(w, err)
		return
	}
	sb, err := s.m.Create(r.Context(), convert.CreateRequest(&req), manager.CreateOptions{Actor: rest.Actor(r), Tenant: rest.Tenant(r),
		ID: idempotency.ID(r), Reserve: idempotency.Reserve(r)})
	if err != nil {
		rest.Error(w, err)
		return
	}
	s.metrics.created.Inc()
	out := s.toAPI(sb)
	if out.LeaseToken, err = s.createLease(r.Context(), sb, rest.Principal(r)); err != nil {
		rest.Error(w, err)
		return
	}
	rest.JSON(w, http.StatusCreated, out)
}

func (s *Server) listSandboxes(w http.ResponseWriter, r *http.Request) {
	all, _ := strconv.ParseBool(r.URL.Query().Get("all"))
	p, err := rest.PageOf(r)
	if err != nil {
		rest.Error(w, err)
		return
	}
	// A page may hold fewer than limit: warm-pool members are left out.
	sbs, next, err := s.m.List(r.Context(), all, p)
	if err != nil {
		rest.Error(w, err)
		return
	}
	rest.SetNext(w, next)
	out := make([]api.Sandbox, 0, len(sbs))
	for _, sb := range sbs {
		if sb.Spec.Pool != "" {
			continue // unclaimed warm-pool members are not anyone's sandboxes
		}
		out = append(out, s.toAPI(sb))
	}
	rest.JSON(w, 200, out)
}

func (s *Server) getSandbox(w http.ResponseWriter, r *http.Request) {
	sb, err := s.m.Get(r.Context(), r.PathValue("id"))
	if err != nil {
		rest.Error(w, err)
		return
	}
	out := s.toAPI(sb)
	if kids := s.m.Children(r.Context(), sb.ID); len(kids) > 0 {
		if out.Lineage == nil {
			out.Lineage = &api.Lineage{}
		}
		out.Lineage.Children = kids
	}
	rest.JSON(w, 200, out)
}

func (s *Server) deleteSandbox(w http.ResponseWriter, r *http.Request) {
	sb, err := s.m.Delete(r.Context(), r.PathValue("id"), rest.Actor(r), sandbox.CauseUser, "deleted by user")
	if err != nil {
		rest.Error(w, err)
		return
	}
	s.metrics.deleted.Inc()
	rest.JSON(w, 200, s.toAPI(sb))
}

// streamWriter turns writes into ExecEvents on one stream.
type streamWriter struct {
	nd     *rest.NDJSON
	stream string
}

func (sw streamWriter) Write(p []byte) (int, error) {
	if err := sw.nd.Send(api.ExecEvent{Stream: sw.stream, Data: p}); err != nil {
		return 0, err
	}
	return len(p), nil
}

func (s *Server) exec(w http.ResponseWriter, r *http.Request) {
	var req api.ExecRequest
	if err := input.Decode(r, &req); err != nil {
		rest.Error(w, err)
		return
	}
	if req.TTY {
		rest.Error(w, errdefs.Invalid("tty needs the interactive exec at /exec/ws"))
		return
	}
	s.streamExec(w, r, func(ctx context.Context, eio manager.ExecIO) (manager.Exit, error) {
		return s.m.Exec(ctx, r.PathValue("id"), convert.ExecRequest(&req), eio, rest.Actor(r))
	})
}

// streamExec answers with an NDJSON exec stream. Errors before any output
// get a plain error status; once streaming, they become an error event.
func (s *Server) streamExec(w http.ResponseWriter, r *http.Request, run func(context.Context, manager.ExecIO) (manager.Exit, error)) {
	nd := rest.NewNDJSON(w)
	var mu sync.Mutex
	started := false
	lazy := func(stream string) streamWriter {
		return streamWriter{nd: nd, stream: stream}
	}
	eio := manager.ExecIO{Stdout: &startWriter{w: lazy("stdout"), started: &started, mu: &mu},
		Stderr: &startWriter{w: lazy("stderr"), started: &started, mu: &mu}}
	start := time.Now()
	exit, err := run(r.Context(), eio)
	s.metrics.execs.Inc()
	s.metrics.execDur.Observe(time.Since(start).Seconds())
	mu.Lock()
	wasStarted := started
	mu.Unlock()
	if err != nil {
		if !wasStarted && nd.Err() == nil {
			rest.Error(w, err)
			return
		}
		_ = nd.Send(api.ExecEvent{Error: rest.StreamError(w, err)})
		return
	}
	ex := convert.ExitToAPI(exit)
	_ = nd.Send(api.ExecEvent{Exit: &ex})
}

// startWriter records that output has begun, so the handler knows it can
// no longer answer with an error status.
type startWriter struct {
	w       streamWriter
	started *bool
	mu      *sync.Mutex
}

func (sw *startWriter) Write(p []byte) (int, error) {
	sw.mu.Lock()
	*sw.started = true
	sw.mu.Unlock()
	return sw.w.Write(p)
}

// run is the one-shot job: create an ephemeral sandbox, exec, stream,
// destroy — also when the client goes away mid-run.
func (s *Server) run(w http.ResponseWriter, r *http.Request) {
	var req api.RunRequest
	if err := input.Decode(r, &req); err != nil {
		rest.Error(w, err)
		return
	}
	if req.Exec.TTY {
		rest.Error(w, errdefs.Invalid("tty is not available for run"))
		return
	}
	if req.Sandbox.Persistent {
		rest.Error(w, errdefs.Invalid("run makes an ephemeral sandbox; use create --persistent"))
		return
	}
	// The command first: a run that cannot run anything makes nothing.
	exec := convert.ExecRequest(&req.Exec)
	if len(exec.Cmd) == 0 {
		// No command: the image's ENTRYPOINT and CMD, as docker run runs.
		t, err := s.m.ResolveTemplate(r.Context(), rest.Tenant(r), req.Sandbox.Template)
		if err != nil {
			rest.Error(w, err)
			return
		}
		if exec.Cmd = t.Config.Command(); len(exec.Cmd) == 0 {
			rest.Error(w, errdefs.Invalid("template %s names no CMD or ENTRYPOINT: give a command to run", t.Name))
			return
		}
	}
	sb, err := s.m.Create(r.Context(), convert.CreateRequest(&req.Sandbox), manager.CreateOptions{Actor: rest.Actor(r), Tenant: rest.Tenant(r), OneShot: true})
	if err != nil {
		rest.Error(w, err)
		return
	}
	s.metrics.created.Inc()
	defer func() {
		reason := "run finished"
		if r.Context().Err() != nil {
			reason = "client went away"
		}
		if _, err := s.m.Delete(context.WithoutCancel(r.Context()), sb.ID, rest.Actor(r), sandbox.CauseClient, reason); err != nil {
			s.log.Warn("run: destroying sandbox", "sandbox", sb.ID, "err", err)
		}
		s.metrics.deleted.Inc()
	}()
	w.Header().Set("X-Berth-Sandbox-Id", sb.ID)
	s.streamExec(w, r, func(ctx context.Context, eio manager.ExecIO) (manager.Exit, error) {
		return s.m.Exec(ctx, sb.ID, exec, eio, rest.Actor(r))
	})
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
func engineRegistry(m *manager.Manager) (*prometheus.Registry, bool) {
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

// watchManager adds the measures the manager keeps itself.
func (m *metrics) watchManager(mgr *manager.Manager) {
	bmetrics.RegisterAgentRefusals(m.reg, mgr.AgentRefusals)
}

func (m *metrics) observe(r *http.Request, status int, d time.Duration) {
	m.requests.WithLabelValues(r.Method, strconv.Itoa(status)).Inc()
	m.latency.WithLabelValues(r.Method).Observe(d.Seconds())
}
