// Package server is berth's HTTP API (/v1): JSON over a root-only unix
// socket and, with API keys, over TCP. Handlers decode and validate input,
// call the sandbox manager, and map error categories (internal/errdefs) to
// statuses and stable codes in one place (writeError).
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
	"encoding/json"
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
	"github.com/berth-sh/berth/internal/identity"
	"github.com/berth-sh/berth/internal/manager"
	bmetrics "github.com/berth-sh/berth/internal/metrics"
	"github.com/berth-sh/berth/internal/sandbox"
	"github.com/berth-sh/berth/internal/server/idempotency"
	"github.com/berth-sh/berth/internal/server/input"
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
	streams   streams      // the open event streams (events.go)
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

	// Secrets serves /v1/secrets (secrets.go).
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
	if m != nil {
		s.lookup = m.Get
		s.metrics.watchManager(m)
	}
	s.mount(s.routeTable())
	return s
}

// Handler returns the handler for one listener. On the local unix socket
// (trusted) callers are the host administrator; elsewhere each route's
// guard authenticates and authorizes the request after the mux (or the
// host name, for {port}-{id}.{domain}) has chosen its route.
func (s *Server) Handler(trusted bool) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		info := &reqInfo{id: requestID(r), method: r.Method, log: s.log}
		w.Header().Set(RequestIDHeader, info.id)
		sw := &statusWriter{ResponseWriter: w, status: 200, info: info}
		defer func() {
			if v := recover(); v != nil {
				if v == http.ErrAbortHandler {
					panic(v)
				}
				// The stack is what finds the bug; the client gets the
				// request id that names this log line.
				s.logger().Error("handler panic", "request_id", info.id, "method", r.Method, "route", info.route,
					"panic", fmt.Sprint(v), "stack", string(debug.Stack()))
				if !sw.wrote {
					writeError(sw, fmt.Errorf("handler panic: %v", v))
				}
			}
			s.metrics.observe(r, sw.status, time.Since(start))
		}()
		if r.RequestURI == "*" {
			// The mux would answer an empty 400 (OPTIONS * never gets here).
			writeError(sw, errdefs.Invalid("request target * is only for OPTIONS"))
			return
		}
		r = r.WithContext(context.WithValue(r.Context(), trustedKey{}, trusted))
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

type statusWriter struct {
	http.ResponseWriter
	status int
	wrote  bool
	info   *reqInfo
}

func (s *Server) logger() *slog.Logger {
	if s.log == nil {
		return slog.Default()
	}
	return s.log
}

func (w *statusWriter) WriteHeader(code int) {
	if !w.wrote {
		w.status, w.wrote = code, true
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	w.wrote = true
	return w.ResponseWriter.Write(b)
}

func (w *statusWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// Unwrap lets http.ResponseController and the WebSocket upgrade reach the
// underlying writer.
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

func actor(r *http.Request) string {
	p, _ := auth.From(r.Context())
	return p.Actor
}

func tenant(r *http.Request) string {
	p, _ := auth.From(r.Context())
	return p.Tenant
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}

// writeError answers err as the JSON error body with its category's
// status and stable code (5xx logged with the request id; see errorFor).
func writeError(w http.ResponseWriter, err error) {
	e, status := errorFor(w, err)
	writeJSON(w, status, api.ErrorBody{Error: *e})
}

func (s *Server) version(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, 200, api.Version{Version: Version, Go: goVersion(), Runtime: strings.Join(s.m.RuntimeNames(), ","),
		TLSFingerprint: s.TLSFingerprint, Classes: classesToAPI(s.m.Classes())})
}

// toAPI converts a sandbox record to its API form.
func (s *Server) toAPI(sb *sandbox.Sandbox) api.Sandbox {
	out := api.Sandbox{
		ID: sb.ID, Name: sb.Name, Template: sb.Spec.Template, State: string(sb.State),
		Persistent: sb.Spec.Persistent,
		Resources: api.Resources{CPUs: sb.Spec.Resources.CPUs, MemoryBytes: sb.Spec.Resources.MemoryBytes,
			Pids: sb.Spec.Resources.Pids, DiskBytes: sb.Spec.Resources.DiskBytes},
		Env: sb.Spec.Env, Labels: sb.Spec.Labels, TimeoutSeconds: sb.Spec.Timeout.Seconds(),
		Network: sb.Spec.Network, Workdir: sb.Spec.Workdir, User: sb.Spec.User, Isolation: isolationToAPI(s.m.Isolation(sb)),
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
	out.Policy = policyToAPI(p)
	out.LastActivityAt = timePtr(s.m.LastActivity(sb))
	out.PausedAt, out.StoppedAt = timePtr(sb.PausedAt), timePtr(sb.StoppedAt)
	if due, ok := sandbox.Next(sb, s.m.LastActivity(sb)); ok {
		out.NextAction, out.NextActionAt = string(due.Action)+" ("+due.Policy+")", timePtr(due.At)
	}
	out.Disk = diskToAPI(s.m.DiskUsage(sb))
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

func timePtr(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}

func (s *Server) createSandbox(w http.ResponseWriter, r *http.Request) {
	var req api.CreateSandboxRequest
	if err := input.Decode(r, &req); err != nil {
		writeError(w, err)
		return
	}
	sb, err := s.m.Create(r.Context(), createRequest(&req), manager.CreateOptions{Actor: actor(r), Tenant: tenant(r),
		ID: idempotency.ID(r), Reserve: idempotency.Reserve(r)})
	if err != nil {
		writeError(w, err)
		return
	}
	s.metrics.created.Inc()
	out := s.toAPI(sb)
	if out.LeaseToken, err = s.createLease(r.Context(), sb, principal(r)); err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusCreated, out)
}

func (s *Server) listSandboxes(w http.ResponseWriter, r *http.Request) {
	all, _ := strconv.ParseBool(r.URL.Query().Get("all"))
	p, err := pageOf(r)
	if err != nil {
		writeError(w, err)
		return
	}
	// A page may hold fewer than limit: warm-pool members are left out.
	sbs, next, err := s.m.List(r.Context(), all, p)
	if err != nil {
		writeError(w, err)
		return
	}
	setNext(w, next)
	out := make([]api.Sandbox, 0, len(sbs))
	for _, sb := range sbs {
		if sb.Spec.Pool != "" {
			continue // unclaimed warm-pool members are not anyone's sandboxes
		}
		out = append(out, s.toAPI(sb))
	}
	writeJSON(w, 200, out)
}

func (s *Server) getSandbox(w http.ResponseWriter, r *http.Request) {
	sb, err := s.m.Get(r.Context(), r.PathValue("id"))
	if err != nil {
		writeError(w, err)
		return
	}
	out := s.toAPI(sb)
	if kids := s.m.Children(r.Context(), sb.ID); len(kids) > 0 {
		if out.Lineage == nil {
			out.Lineage = &api.Lineage{}
		}
		out.Lineage.Children = kids
	}
	writeJSON(w, 200, out)
}

func (s *Server) deleteSandbox(w http.ResponseWriter, r *http.Request) {
	sb, err := s.m.Delete(r.Context(), r.PathValue("id"), actor(r), sandbox.CauseUser, "deleted by user")
	if err != nil {
		writeError(w, err)
		return
	}
	s.metrics.deleted.Inc()
	writeJSON(w, 200, s.toAPI(sb))
}

// ndjson writes a stream of JSON lines, flushing each, safe for
// concurrent writers (stdout and stderr).
type ndjson struct {
	mu  sync.Mutex
	w   http.ResponseWriter
	rc  *http.ResponseController
	enc *json.Encoder
	err error
}

func newNDJSON(w http.ResponseWriter) *ndjson {
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	return &ndjson{w: w, rc: http.NewResponseController(w), enc: json.NewEncoder(w)}
}

func (n *ndjson) send(v any) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.err != nil {
		return n.err
	}
	if n.err = n.enc.Encode(v); n.err == nil {
		n.err = n.rc.Flush()
	}
	return n.err
}

// streamWriter turns writes into ExecEvents on one stream.
type streamWriter struct {
	nd     *ndjson
	stream string
}

func (sw streamWriter) Write(p []byte) (int, error) {
	if err := sw.nd.send(api.ExecEvent{Stream: sw.stream, Data: p}); err != nil {
		return 0, err
	}
	return len(p), nil
}

func (s *Server) exec(w http.ResponseWriter, r *http.Request) {
	var req api.ExecRequest
	if err := input.Decode(r, &req); err != nil {
		writeError(w, err)
		return
	}
	if req.TTY {
		writeError(w, errdefs.Invalid("tty needs the interactive exec at /exec/ws"))
		return
	}
	s.streamExec(w, r, func(ctx context.Context, eio manager.ExecIO) (manager.Exit, error) {
		return s.m.Exec(ctx, r.PathValue("id"), execRequest(&req), eio, actor(r))
	})
}

// streamExec answers with an NDJSON exec stream. Errors before any output
// get a plain error status; once streaming, they become an error event.
func (s *Server) streamExec(w http.ResponseWriter, r *http.Request, run func(context.Context, manager.ExecIO) (manager.Exit, error)) {
	nd := newNDJSON(w)
	started := false
	lazy := func(stream string) streamWriter {
		return streamWriter{nd: nd, stream: stream}
	}
	eio := manager.ExecIO{Stdout: &startWriter{w: lazy("stdout"), started: &started, mu: &nd.mu},
		Stderr: &startWriter{w: lazy("stderr"), started: &started, mu: &nd.mu}}
	start := time.Now()
	exit, err := run(r.Context(), eio)
	s.metrics.execs.Inc()
	s.metrics.execDur.Observe(time.Since(start).Seconds())
	nd.mu.Lock()
	wasStarted := started
	nd.mu.Unlock()
	if err != nil {
		if !wasStarted && nd.err == nil {
			writeError(w, err)
			return
		}
		_ = nd.send(api.ExecEvent{Error: apiErrorFor(w, err)})
		return
	}
	ex := exitToAPI(exit)
	_ = nd.send(api.ExecEvent{Exit: &ex})
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
		writeError(w, err)
		return
	}
	if req.Exec.TTY {
		writeError(w, errdefs.Invalid("tty is not available for run"))
		return
	}
	if req.Sandbox.Persistent {
		writeError(w, errdefs.Invalid("run makes an ephemeral sandbox; use create --persistent"))
		return
	}
	// The command first: a run that cannot run anything makes nothing.
	exec := execRequest(&req.Exec)
	if len(exec.Cmd) == 0 {
		// No command: the image's ENTRYPOINT and CMD, as docker run runs.
		t, err := s.m.ResolveTemplate(r.Context(), tenant(r), req.Sandbox.Template)
		if err != nil {
			writeError(w, err)
			return
		}
		if exec.Cmd = t.Config.Command(); len(exec.Cmd) == 0 {
			writeError(w, errdefs.Invalid("template %s names no CMD or ENTRYPOINT: give a command to run", t.Name))
			return
		}
	}
	sb, err := s.m.Create(r.Context(), createRequest(&req.Sandbox), manager.CreateOptions{Actor: actor(r), Tenant: tenant(r), OneShot: true})
	if err != nil {
		writeError(w, err)
		return
	}
	s.metrics.created.Inc()
	defer func() {
		reason := "run finished"
		if r.Context().Err() != nil {
			reason = "client went away"
		}
		if _, err := s.m.Delete(context.WithoutCancel(r.Context()), sb.ID, actor(r), sandbox.CauseClient, reason); err != nil {
			s.log.Warn("run: destroying sandbox", "sandbox", sb.ID, "err", err)
		}
		s.metrics.deleted.Inc()
	}()
	w.Header().Set("X-Berth-Sandbox-Id", sb.ID)
	s.streamExec(w, r, func(ctx context.Context, eio manager.ExecIO) (manager.Exit, error) {
		return s.m.Exec(ctx, sb.ID, exec, eio, actor(r))
	})
}

func (s *Server) listTemplates(w http.ResponseWriter, r *http.Request) {
	p, err := pageOf(r)
	if err != nil {
		writeError(w, err)
		return
	}
	ts, next, err := s.m.ListTemplates(r.Context(), p)
	if err != nil {
		writeError(w, err)
		return
	}
	setNext(w, next)
	out := make([]api.Template, 0, len(ts))
	for _, t := range ts {
		out = append(out, s.templateToAPI(t))
	}
	writeJSON(w, 200, out)
}

func (s *Server) templateToAPI(t *store.Template) api.Template {
	out := templateToAPI(t)
	if out.Build != nil { // a list gives the flows' counts, not the flows
		for i := range out.Build.Steps {
			out.Build.Steps[i].Flows = nil
		}
	}
	// The pool of t itself: read as t's tenant, whose name resolves to t.
	ctx := context.Background()
	if t.Tenant != "" {
		ctx = identity.With(ctx, identity.Caller{Tenant: t.Tenant})
	}
	if p, err := s.m.Pool(ctx, t.Name); err == nil && (p.Min > 0 || p.Ready > 0) {
		out.Pool = poolPtrToAPI(p)
	}
	return out
}

func templateToAPI(t *store.Template) api.Template {
	return api.Template{Tenant: t.Tenant, Name: t.Name, Layers: t.Layers, Source: t.Source, Builtin: t.Builtin,
		Size: t.Size, Env: t.Config.Env, Workdir: t.Config.Workdir, User: t.Config.User,
		Entrypoint: t.Config.Entrypoint, Cmd: t.Config.Cmd, ExposedPorts: t.Config.ExposedPorts,
		StopSignal: t.Config.StopSignal, CreatedAt: t.CreatedAt, Build: buildRecordToAPI(t.Config.Build), Labels: t.Config.Labels}
}

func buildRecordToAPI(b *store.BuildRecord) *api.TemplateBuild {
	if b == nil {
		return nil
	}
	out := &api.TemplateBuild{Steps: make([]api.TemplateBuildStep, 0, len(b.Steps))}
	for _, st := range b.Steps {
		as := api.TemplateBuildStep{Step: st.Step, Desc: st.Desc, Line: st.Line, Cached: st.Cached, Network: st.Network,
			Allow: st.Allow, Sandbox: st.Sandbox, FlowCount: len(st.Flows) + st.FlowsDropped, FlowsDropped: st.FlowsDropped}
		for _, f := range st.Flows {
			as.Flows = append(as.Flows, api.Flow{Seq: uint64(f.ID), Time: f.Time, Kind: f.Kind, Proto: f.Proto, Src: f.Src,
				Dst: f.Dst, Name: f.Name, Decision: f.Decision, Rule: f.Rule})
		}
		out.Steps = append(out.Steps, as)
	}
	return out
}

func (s *Server) getTemplate(w http.ResponseWriter, r *http.Request) {
	// The caller's own template of that name, else the shared one.
	t, err := s.m.ResolveTemplate(r.Context(), tenant(r), r.PathValue("name"))
	if err != nil {
		writeError(w, err)
		return
	}
	out := s.templateToAPI(t)
	out.Build = buildRecordToAPI(t.Config.Build) // one template: with its build's flows
	writeJSON(w, 200, out)
}

func (s *Server) deleteTemplate(w http.ResponseWriter, r *http.Request) {
	if err := s.m.DeleteTemplate(r.Context(), r.PathValue("name")); err != nil {
		writeError(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) importTemplate(w http.ResponseWriter, r *http.Request) {
	var req api.ImportTemplateRequest
	if err := input.Decode(r, &req); err != nil {
		writeError(w, err)
		return
	}
	importStream(w, r, func(ctx context.Context) (*store.Template, error) {
		return s.m.ImportTemplate(ctx, importRequest(&req))
	})
}

func (s *Server) uploadTemplate(w http.ResponseWriter, r *http.Request) {
	importStream(w, r, func(ctx context.Context) (*store.Template, error) {
		return s.m.UploadTemplate(ctx, r.PathValue("name"), r.Body)
	})
}

// importStream runs an import. A client that accepts NDJSON gets the
// layers' progress as api.ImportEvent lines, then the template or the
// error; any other gets the template (201) or the error alone.
func importStream(w http.ResponseWriter, r *http.Request, run func(context.Context) (*store.Template, error)) {
	if !strings.Contains(r.Header.Get("Accept"), "application/x-ndjson") {
		t, err := run(r.Context())
		if err != nil {
			writeError(w, err)
			return
		}
		writeJSON(w, http.StatusCreated, templateToAPI(t))
		return
	}
	nd := newNDJSON(w)
	ctx := manager.WithImportProgress(r.Context(), func(p manager.ImportProgress) {
		_ = nd.send(api.ImportEvent{Progress: &api.ImportProgress{Layer: p.Layer, Layers: p.Layers, Digest: p.Digest,
			Bytes: p.Bytes, Size: p.Size, Done: p.Done, Cached: p.Cached}})
	})
	t, err := run(ctx)
	if err != nil {
		if nd.err == nil && !headerWritten(w) {
			writeError(w, err)
			return
		}
		_ = nd.send(api.ImportEvent{Error: apiErrorFor(w, err)})
		return
	}
	tt := templateToAPI(t)
	_ = nd.send(api.ImportEvent{Template: &tt})
}

func (s *Server) buildTemplate(w http.ResponseWriter, r *http.Request) {
	var req api.BuildTemplateRequest
	if err := input.Decode(r, &req); err != nil {
		writeError(w, err)
		return
	}
	buildStream(w, templateToAPI, func(progress func(manager.BuildEvent)) (*store.Template, error) {
		return s.m.BuildTemplate(r.Context(), buildRequest(&req), actor(r), progress)
	})
}

// buildStream runs a build whose progress streams as NDJSON lines
// (api.BuildEvent), then the template (as conv gives it) or the error. An
// error before the first line is a plain error response, with its status
// and code; after it, the stream's last line.
func buildStream(w http.ResponseWriter, conv func(*store.Template) api.Template, run func(progress func(manager.BuildEvent)) (*store.Template, error)) {
	nd := newNDJSON(w)
	t, err := run(func(ev manager.BuildEvent) { _ = nd.send(buildEventToAPI(ev)) })
	if err != nil {
		if nd.err == nil && !headerWritten(w) {
			writeError(w, err)
			return
		}
		_ = nd.send(api.BuildEvent{Error: apiErrorFor(w, err)})
		return
	}
	tt := conv(t)
	_ = nd.send(api.BuildEvent{Template: &tt})
}

func headerWritten(w http.ResponseWriter) bool {
	if sw, ok := w.(*statusWriter); ok {
		return sw.wrote
	}
	return true
}

func (s *Server) doctor(w http.ResponseWriter, r *http.Request) {
	rep, err := s.m.Doctor(r.Context(), r.Method == http.MethodPost)
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, 200, doctorToAPI(rep))
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
