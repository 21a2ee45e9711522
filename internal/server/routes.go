package server

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/internal/access"
	"github.com/berth-sh/berth/internal/auth"
	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/internal/openapi"
	"github.com/berth-sh/berth/internal/server/edge"
	"github.com/berth-sh/berth/internal/server/events"
	"github.com/berth-sh/berth/internal/server/idempotency"
	"github.com/berth-sh/berth/internal/server/input"
	"github.com/berth-sh/berth/internal/server/rest"
)

// Route is one entry of the API's route table: a ServeMux pattern and
// the operation it is (internal/access), whose rule says who may call it.
// Every handler is mounted through guard, which decides from the route's
// operation and the path values the mux matched, never from the URL.
type Route struct {
	// Pattern is the ServeMux pattern ("GET /v1/sandboxes/{id}"; the port
	// proxy's patterns have no method). HostPortPattern is the host-routed
	// port proxy, dispatched before the mux.
	Pattern string
	// Op is the operation the route is (internal/access): its rule,
	// its audit action. The route keeps no rule of its own.
	Op access.Op
	// PublicPort marks the port proxy: when the {id} sandbox lists the
	// {port} path value among its public ports, no credential is needed.
	PublicPort bool
	// Stream marks a route whose request or response may last as long as
	// the work it carries (exec streams, the WebSocket PTY, file and tar
	// transfers, builds, registry pulls, the port proxy): it gets no
	// per-request read or write deadline. Every other route gets both
	// (Server.BodyTimeout, Server.WriteTimeout).
	Stream bool
	// EventStream marks a route that streams (as Stream) when the request
	// accepts text/event-stream, and is an ordinary one otherwise.
	EventStream bool
	// Upload marks a route whose request body streams into a sandbox or
	// the daemon's disk (a template archive, a tar of files): it counts
	// against its tenant's share of uploads while it runs (shares.go), and
	// the body may take as long as it needs, but each read must bring data
	// within Server.BodyTimeout, so a stalled upload is cut (400) instead
	// of holding its connection and its work open for ever.
	Upload bool
	// Idem makes the route honour an Idempotency-Key of this kind
	// (idempotency.go): the handler is wrapped at the table's end, and
	// the document gives the route the header and its answers.
	Idem *idempotency.Kind
	// In is the request body the handler decodes, Query its query
	// parameters (an api struct whose fields carry query tags) and Out
	// its success answers: the types api/openapi.json is generated from
	// (openapigen). Error answers are the same on every route.
	In    openapi.Body
	Query any
	Out   []openapi.Answer
	h     http.Handler
}

// HostPortPattern is the pattern of the host-routed port proxy,
// {port}-{id}.{domain}: every request to such a host name goes to that
// sandbox port, whatever its path.
const HostPortPattern = "{port}-{id}.{domain}"

// Answers of routes, as Route.Out declares them.
var (
	noContent = []openapi.Answer{{Status: http.StatusNoContent}}
	accepted  = []openapi.Answer{{Status: http.StatusAccepted}}
	found     = []openapi.Answer{{Status: http.StatusFound}}
	redirect  = []openapi.Answer{{Status: http.StatusPermanentRedirect}}
	notFound  = []openapi.Answer{{Status: http.StatusNotFound, Body: api.ErrorBody{}}}
)

// ok is a 200 answer with any of bodies (alternative content types), or
// with no body declared.
func ok(bodies ...openapi.Body) []openapi.Answer { return status(http.StatusOK, bodies) }

// created is a 201 answer with body.
func created(body openapi.Body) []openapi.Answer {
	return status(http.StatusCreated, []openapi.Body{body})
}

func status(code int, bodies []openapi.Body) []openapi.Answer {
	if len(bodies) == 0 {
		return []openapi.Answer{{Status: code}}
	}
	var out []openapi.Answer
	for _, b := range bodies {
		out = append(out, openapi.Answer{Status: code, Body: b})
	}
	return out
}

// ptr is a pointer to a copy of v.
func ptr[T any](v T) *T { return &v }

// answers is several answers of one route.
func answers(as ...[]openapi.Answer) []openapi.Answer { return slices.Concat(as...) }

// webSocket is the upgrade of a WebSocket route: the JSON text message
// its client sends first (nil: none) and the JSON payloads of its frames.
func webSocket(first any, messages ...any) []openapi.Answer {
	return []openapi.Answer{{Status: http.StatusSwitchingProtocols, Body: openapi.WebSocket{First: first, Messages: messages}}}
}

// routeTable is the whole API: every route with its operation, in one
// place. What a lease token may do is the catalogue's (internal/access):
// exec, files, processes, the port proxy, reading its sandbox and events,
// and touch.
func (s *Server) routeTable() []Route {
	hf := func(f http.HandlerFunc) http.Handler { return f }
	rt := []Route{
		{Pattern: "GET /healthz", Op: access.Health, Out: ok(openapi.Text("text/plain")), h: hf(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok\n") })},
		{Pattern: "GET /v1/version", Op: access.Read, Out: ok(api.Version{}), h: hf(s.version)},
		{Pattern: "GET /v1/whoami", Op: access.Read, Out: ok(api.WhoAmI{}), h: hf(s.whoami)},
		{Pattern: "GET /v1/openapi.json", Op: access.Read, Out: ok(openapi.AnyJSON{}), h: hf(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			w.Write(api.OpenAPI)
		})},
		{Pattern: "GET /metrics", Op: access.HostRead, Out: ok(openapi.Text("text/plain")), h: promhttp.HandlerFor(s.metrics.reg, promhttp.HandlerOpts{})},

		{Pattern: "POST /v1/sandboxes", Op: access.SandboxCreate, In: api.CreateSandboxRequest{}, Out: created(api.Sandbox{}), Idem: ptr(s.idemCreate()), h: hf(s.sandboxes.Create)},
		{Pattern: "GET /v1/sandboxes", Op: access.Read, Query: api.ListQuery{}, Out: ok([]api.Sandbox{}), h: hf(s.sandboxes.List)},
		{Pattern: "GET /v1/sandboxes/{id}", Op: access.SandboxGet, Out: ok(api.Sandbox{}), h: hf(s.sandboxes.Get)},
		{Pattern: "DELETE /v1/sandboxes/{id}", Op: access.SandboxDelete, Query: api.DeleteSandboxQuery{}, Out: ok(api.Sandbox{}), h: hf(s.sandboxes.Delete)},
		{Pattern: "GET /v1/sandboxes/{id}/events", Op: access.SandboxGet, EventStream: true, Query: api.SandboxEventsQuery{}, Out: ok([]api.Event{}, openapi.SSE{Of: api.Event{}}), h: hf(s.events.Sandbox)},
		{Pattern: "GET /v1/events", Op: access.Read, EventStream: true, Query: api.EventsQuery{}, Out: ok([]api.Event{}, openapi.SSE{Of: api.Event{}}), h: hf(s.events.All)},
		{Pattern: "POST /v1/run", Op: access.SandboxRun, Stream: true, In: api.RunRequest{}, Out: ok(openapi.NDJSON{Of: api.ExecEvent{}}), h: hf(s.exec.Run)},

		{Pattern: "POST /v1/sandboxes/{id}/exec", Op: access.Exec, Stream: true, In: api.ExecRequest{}, Out: ok(openapi.NDJSON{Of: api.ExecEvent{}}), h: hf(s.exec.Exec)},
		{Pattern: "GET /v1/sandboxes/{id}/exec/ws", Op: access.ExecPTY, Stream: true, Out: webSocket(api.ExecRequest{}, api.Resize{}, api.ExecExit{}, api.Error{}), h: hf(s.exec.ExecWS)},

		{Pattern: "GET /v1/sandboxes/{id}/files", Op: access.FilesRead, Stream: true, Query: api.ReadFileQuery{}, Out: ok(openapi.Bytes{"application/octet-stream", "application/x-tar"}), h: hf(s.files.Get)},
		{Pattern: "PUT /v1/sandboxes/{id}/files", Op: access.FilesWrite, Stream: true, Upload: true, In: openapi.Bytes{"application/octet-stream", "application/x-tar"}, Query: api.WriteFileQuery{}, Out: answers(ok(api.FileInfo{}), noContent), h: hf(s.files.Put)},
		{Pattern: "DELETE /v1/sandboxes/{id}/files", Op: access.FilesRemove, Query: api.RemoveFileQuery{}, Out: noContent, h: hf(s.files.Remove)},
		{Pattern: "GET /v1/sandboxes/{id}/files/stat", Op: access.FilesRead, Query: api.FileQuery{}, Out: ok(api.FileInfo{}), h: hf(s.files.Stat)},
		{Pattern: "GET /v1/sandboxes/{id}/files/list", Op: access.FilesRead, Query: api.FileQuery{}, Out: ok([]api.FileInfo{}), h: hf(s.files.List)},
		{Pattern: "POST /v1/sandboxes/{id}/files/mkdir", Op: access.FilesMkdir, Query: api.MkdirQuery{}, Out: noContent, h: hf(s.files.Mkdir)},
		{Pattern: "POST /v1/sandboxes/{id}/export", Op: access.FilesExport, Stream: true, In: api.ExportRequest{}, Out: ok(openapi.Bytes{"application/x-tar"}), h: hf(s.files.Export)},
		{Pattern: "POST /v1/copy", Op: access.FilesCopy, Stream: true, In: api.CopyRequest{}, Out: noContent, h: hf(s.files.Copy)},

		{Pattern: "POST /v1/sandboxes/{id}/touch", Op: access.SandboxTouch, Out: ok(api.Sandbox{}), h: s.sandboxes.Lifecycle("touch")},
		{Pattern: "GET /v1/sandboxes/{id}/diff", Op: access.SandboxInspect, Out: ok([]api.DiffEntry{}), h: hf(s.sandboxes.Diff)},
		{Pattern: "POST /v1/sandboxes/{id}/fork", Op: access.SandboxFork, In: api.ForkRequest{}, Out: created(api.ForkResponse{}), Idem: ptr(s.idemFork()), h: hf(s.sandboxes.Fork)},
		{Pattern: "POST /v1/sandboxes/{id}/snapshots", Op: access.SnapshotCreate, In: api.CreateSnapshotRequest{}, Out: created(api.Snapshot{}), Idem: ptr(s.idemSnapshot()), h: hf(s.sandboxes.CreateSnapshot)},
		{Pattern: "GET /v1/sandboxes/{id}/snapshots", Op: access.SandboxInspect, Query: api.Page{}, Out: ok([]api.Snapshot{}), h: hf(s.sandboxes.ListSnapshots)},
		{Pattern: "GET /v1/snapshots", Op: access.Read, Query: api.Page{}, Out: ok([]api.Snapshot{}), h: hf(s.sandboxes.ListSnapshots)},
		{Pattern: "GET /v1/snapshots/{id}", Op: access.Read, Out: ok(api.Snapshot{}), h: hf(s.sandboxes.GetSnapshot)},
		{Pattern: "DELETE /v1/snapshots/{id}", Op: access.SnapshotDelete, Out: noContent, h: hf(s.sandboxes.DeleteSnapshot)},
		{Pattern: "POST /v1/snapshots/{id}/restore", Op: access.SnapshotRestore, Out: ok(api.Sandbox{}), h: hf(s.sandboxes.RestoreSnapshot)},

		{Pattern: "POST /v1/volumes", Op: access.VolumeCreate, In: api.CreateVolumeRequest{}, Out: created(api.Volume{}), Idem: ptr(s.idemVolume()), h: hf(s.sandboxes.CreateVolume)},
		{Pattern: "GET /v1/volumes", Op: access.Read, Query: api.ListQuery{}, Out: ok([]api.Volume{}), h: hf(s.sandboxes.ListVolumes)},
		{Pattern: "GET /v1/volumes/{name}", Op: access.Read, Out: ok(api.Volume{}), h: hf(s.sandboxes.GetVolume)},
		{Pattern: "DELETE /v1/volumes/{name}", Op: access.VolumeDelete, Out: noContent, h: hf(s.sandboxes.DeleteVolume)},

		{Pattern: "GET /v1/templates", Op: access.Read, Query: api.Page{}, Out: ok([]api.Template{}), h: hf(s.templates.List)},
		{Pattern: "GET /v1/templates/{name}", Op: access.Read, Out: ok(api.Template{}), h: hf(s.templates.Get)},
		{Pattern: "DELETE /v1/templates/{name}", Op: access.TemplateDelete, Out: noContent, h: hf(s.templates.Delete)},
		{Pattern: "POST /v1/templates/import", Op: access.TemplateImport, Stream: true, Upload: true, In: api.ImportTemplateRequest{}, Out: created(api.Template{}), h: hf(s.templates.Import)},
		{Pattern: "PUT /v1/templates/{name}/archive", Op: access.TemplateUpload, Stream: true, Upload: true, In: openapi.Bytes{"application/x-tar", "application/octet-stream"}, Out: created(api.Template{}), h: hf(s.templates.Upload)},
		{Pattern: "POST /v1/templates/{name}/push", Op: access.TemplatePush, Stream: true, In: api.PushTemplateRequest{}, Out: ok(api.PushResult{}, openapi.NDJSON{Of: api.PushEvent{}}), h: hf(s.templates.Push)},
		{Pattern: "POST /v1/templates/build", Op: access.TemplateBuild, Stream: true, Upload: true, In: api.BuildTemplateRequest{}, Out: ok(openapi.NDJSON{Of: api.BuildEvent{}}), h: hf(s.templates.Build)},
		{Pattern: "POST /v1/templates/{name}/dockerfile", Op: access.TemplateBuildDF, Stream: true, Upload: true, In: openapi.Bytes{"application/x-tar"}, Query: api.DockerfileQuery{}, Out: ok(openapi.NDJSON{Of: api.BuildEvent{}}), h: hf(s.templates.BuildDockerfile)},
		{Pattern: "PUT /v1/templates/{name}/pool", Op: access.TemplatePool, In: api.PoolRequest{}, Out: ok(api.Pool{}), h: hf(s.templates.SetPool)},
		{Pattern: "GET /v1/templates/{name}/pool", Op: access.Read, Out: ok(api.Pool{}), h: hf(s.templates.GetPool)},
		{Pattern: "GET /v1/pools", Op: access.Read, Out: ok([]api.Pool{}), h: hf(s.templates.ListPools)},
		{Pattern: "POST /v1/apply", Op: access.TemplateApply, Stream: true, In: api.ApplyRequest{}, Out: ok(openapi.NDJSON{Of: api.BuildEvent{}}), h: hf(s.templates.Apply)},
		{Pattern: "GET /v1/doctor", Op: access.HostRead, Out: ok(api.DoctorReport{}), h: hf(s.doctor)},
		{Pattern: "POST /v1/doctor/fix", Op: access.HostDoctorFix, Out: ok(api.DoctorReport{}), h: hf(s.doctor)},
		{Pattern: "GET /v1/webhooks", Op: access.HostRead, Out: ok([]api.Webhook{}), h: hf(s.observe.WebhookList)},

		{Pattern: "GET /v1/sandboxes/{id}/network", Op: access.SandboxInspect, Out: ok(api.NetworkRules{}), h: hf(s.sandboxes.GetNetwork)},
		{Pattern: "POST /v1/sandboxes/{id}/network", Op: access.NetworkUpdate, In: api.NetworkRulesRequest{}, Out: ok(api.NetworkRules{}), h: hf(s.sandboxes.UpdateNetwork)},
		{Pattern: "GET /v1/sandboxes/{id}/flows", Op: access.SandboxInspect, Query: api.FlowsQuery{}, Out: ok([]api.Flow{}), h: hf(s.sandboxes.Flows)},
		{Pattern: "GET /v1/sandboxes/{id}/usage", Op: access.SandboxInspect, Out: ok(api.SandboxUsage{}), h: hf(s.observe.Usage)},
		{Pattern: "/v1/sandboxes/{id}/ports/{port}/{path...}", Op: access.Ports, PublicPort: true, Stream: true, Out: ok(),
			h: hf(func(w http.ResponseWriter, r *http.Request) {
				s.proxy(w, r, r.PathValue("id"), r.PathValue("port"), "/"+r.PathValue("path"))
			})},
		{Pattern: "/v1/sandboxes/{id}/ports/{port}", Op: access.Ports, PublicPort: true, Stream: true, Out: redirect,
			h: hf(func(w http.ResponseWriter, r *http.Request) {
				u := *r.URL
				u.Path, u.RawPath = r.URL.Path+"/", r.URL.EscapedPath()+"/"
				http.Redirect(w, r, u.RequestURI(), http.StatusPermanentRedirect)
			})},
		{Pattern: HostPortPattern, Op: access.Ports, PublicPort: true, Stream: true, Out: ok(),
			h: hf(func(w http.ResponseWriter, r *http.Request) {
				s.proxy(w, r, r.PathValue("id"), r.PathValue("port"), r.URL.Path)
			})},

		// Tenants, API keys, minted leases and port tokens (package admin).
		{Pattern: "POST /v1/tenants", Op: access.HostTenantCreate, In: api.CreateTenantRequest{}, Out: created(api.Tenant{}), h: hf(s.admin.CreateTenant)},
		{Pattern: "GET /v1/tenants", Op: access.HostRead, Out: ok([]api.Tenant{}), h: hf(s.admin.ListTenants)},
		{Pattern: "DELETE /v1/tenants/{name}", Op: access.HostTenantDelete, Out: noContent, h: hf(s.admin.DeleteTenant)},
		{Pattern: "POST /v1/keys", Op: access.KeyCreate, In: api.CreateAPIKeyRequest{}, Out: created(api.CreatedAPIKey{}), h: hf(s.admin.CreateKey)},
		{Pattern: "GET /v1/keys", Op: access.KeyList, Query: api.Page{}, Out: ok([]api.APIKey{}), h: hf(s.admin.ListKeys)},
		{Pattern: "DELETE /v1/keys/{id}", Op: access.KeyRevoke, Out: ok(api.APIKey{}), h: hf(s.admin.RevokeKey)},
		{Pattern: "POST /v1/sandboxes/{id}/leases", Op: access.LeaseCreate, In: api.CreateLeaseRequest{}, Out: created(api.Lease{}), h: hf(s.admin.MintLease)},
		{Pattern: "DELETE /v1/sandboxes/{id}/leases/{lease}", Op: access.LeaseRevoke, Out: noContent, h: hf(s.admin.RevokeLease)},
		{Pattern: "POST /v1/sandboxes/{id}/ports/{port}/token", Op: access.PortTokenCreate, In: api.CreatePortTokenRequest{}, Out: created(api.PortToken{}), h: hf(s.admin.MintPortToken)},
		{Pattern: "GET /v1/sandboxes/{id}/port-tokens", Op: access.PortTokenList, Out: ok([]api.PortTokenInfo{}), h: hf(s.admin.ListPortTokens)},
		{Pattern: "DELETE /v1/sandboxes/{id}/port-tokens/{token}", Op: access.PortTokenRevoke, Out: ok(api.PortTokenInfo{}), h: hf(s.admin.RevokePortToken)},
		// Audit log (package admin): a tenant's admin reads its own
		// chain (the audit scope), the host admin every chain.
		{Pattern: "GET /v1/audit", Op: access.AuditRead, Query: api.AuditQuery{}, Out: ok([]api.AuditEntry{}), h: hf(s.admin.ListAudit)},
		{Pattern: "GET /v1/audit/export", Op: access.AuditRead, Stream: true, Out: ok(openapi.NDJSON{Of: api.AuditRecord{}}), h: hf(s.admin.ExportAudit)},
		{Pattern: "POST /v1/audit/verify", Op: access.AuditVerify, In: openapi.Optional{Body: api.AuditVerifyRequest{}}, Out: ok(api.AuditVerify{}), h: hf(s.admin.VerifyAudit)},
		// Quotas (package admin): per-tenant limits, host admin only; a tenant
		// reads its own through /v1/quota (the tenant is the caller's).
		{Pattern: "GET /v1/quota", Op: access.Read, Out: ok(api.Quota{}), h: hf(s.admin.GetOwnQuota)},
		{Pattern: "GET /v1/tenants/{tenant}/quota", Op: access.HostRead, Out: ok(api.Quota{}), h: hf(s.admin.GetQuota)},
		{Pattern: "PUT /v1/tenants/{tenant}/quota", Op: access.HostQuotaSet, In: api.QuotaRequest{}, Out: ok(api.Quota{}), h: hf(s.admin.PutQuota)},
		// Files beyond the basic ones: move, watch.
		{Pattern: "POST /v1/sandboxes/{id}/files/move", Op: access.FilesMove, Query: api.MoveFileQuery{}, Out: noContent, h: hf(s.files.Move)},
		{Pattern: "GET /v1/sandboxes/{id}/files/watch", Op: access.FilesRead, Stream: true, Query: api.WatchQuery{}, Out: ok(openapi.NDJSON{Of: api.WatchEvent{}}), h: hf(s.files.Watch)},
		// Background processes (package exec): the exec scope, leases too.
		{Pattern: "POST /v1/sandboxes/{id}/processes", Op: access.ProcessStart, In: api.StartProcessRequest{}, Out: created(api.Process{}), h: hf(s.exec.StartProcess)},
		{Pattern: "GET /v1/sandboxes/{id}/processes", Op: access.ProcessRead, Out: ok(api.ProcessList{}), h: hf(s.exec.ListProcesses)},
		{Pattern: "GET /v1/sandboxes/{id}/processes/{pid}", Op: access.ProcessRead, Out: ok(api.Process{}), h: hf(s.exec.GetProcess)},
		{Pattern: "GET /v1/sandboxes/{id}/processes/{pid}/logs", Op: access.ProcessRead, Stream: true, Query: api.ProcessLogsQuery{}, Out: ok(openapi.NDJSON{Of: api.ProcessEvent{}}), h: hf(s.exec.ProcessLogs)},
		{Pattern: "GET /v1/sandboxes/{id}/processes/{pid}/ws", Op: access.ProcessAttach, Stream: true, Out: webSocket(nil, api.Resize{}, api.ExecExit{}, api.Error{}), h: hf(s.exec.ProcessWS)},
		{Pattern: "POST /v1/sandboxes/{id}/processes/{pid}/stdin", Op: access.ProcessStdin, Stream: true, In: openapi.Optional{Body: openapi.Bytes{"application/octet-stream"}}, Query: api.ProcessStdinQuery{}, Out: noContent, h: hf(s.exec.ProcessStdin)},
		{Pattern: "POST /v1/sandboxes/{id}/processes/{pid}/signal", Op: access.ProcessSignal, In: api.SignalRequest{}, Out: noContent, h: hf(s.exec.SignalProcess)},
		{Pattern: "POST /v1/sandboxes/{id}/processes/{pid}/kill", Op: access.ProcessKill, Out: noContent, h: hf(s.exec.KillProcess)},
		{Pattern: "POST /v1/sandboxes/{id}/processes/{pid}/wait", Op: access.ProcessWait, Stream: true, Out: ok(api.ExecExit{}), h: hf(s.exec.WaitProcess)},
		// Secrets (package admin): managing them is the secrets scope's; the
		// master key's rotation is the host operator's.
		{Pattern: "PUT /v1/secrets/{name}", Op: access.SecretPut, In: api.PutSecretRequest{}, Out: answers(ok(api.Secret{}), created(api.Secret{})), h: hf(s.admin.PutSecret)},
		{Pattern: "GET /v1/secrets", Op: access.SecretList, Query: api.Page{}, Out: ok([]api.Secret{}), h: hf(s.admin.ListSecrets)},
		{Pattern: "DELETE /v1/secrets/{name}", Op: access.SecretDelete, Out: noContent, h: hf(s.admin.DeleteSecret)},
		{Pattern: "POST /v1/secrets/rotate-key", Op: access.HostSecretsKey, In: api.RotateSecretsKeyRequest{}, Out: ok(api.RotateSecretsKeyResponse{}), h: hf(s.admin.RotateSecretsKey)},
		// MCP (internal/mcp, mcp.go): streamable HTTP, every tool call
		// re-checked as the REST call it makes. Leases may not.
		{Pattern: "POST /v1/mcp", Op: access.MCPCall, Stream: true, In: openapi.AnyJSON{}, Out: answers(ok(), accepted), h: s.mcpHandler()},
		{Pattern: "GET /v1/mcp", Op: access.MCPStream, Stream: true, Out: ok(openapi.SSE{Of: openapi.AnyJSON{}}), h: s.mcpHandler()},
		{Pattern: "DELETE /v1/mcp", Op: access.MCPClose, Out: noContent, h: s.mcpHandler()},

		// Anything else: a 404, for callers with a credential.
		{Pattern: "/", Op: access.Read, Out: notFound, h: hf(func(w http.ResponseWriter, r *http.Request) {
			rest.Error(w, errdefs.NotFound("no route %s %s", r.Method, r.URL.Path))
		})},
	}
	// The web console and its sign-in exchange (console.go).
	rt = append(rt, s.consoleRoutes()...)

	lifecycle := []struct {
		name string
		op   access.Op
	}{{"pause", access.SandboxPause}, {"resume", access.SandboxResume}, {"stop", access.SandboxStop},
		{"start", access.SandboxStart}, {"reset", access.SandboxReset},
		{"quarantine", access.SandboxQuarantine}, {"release", access.SandboxRelease}}
	for _, lc := range lifecycle {
		var query any
		if lc.name == "stop" {
			query = api.StopQuery{}
		}
		rt = append(rt, Route{Pattern: "POST /v1/sandboxes/{id}/" + lc.name, Op: lc.op, Query: query, Out: ok(api.Sandbox{}), h: s.sandboxes.Lifecycle(lc.name)})
	}
	for _, lc := range []struct {
		name string
		op   access.Op
	}{{"hibernate", access.SandboxHibernate}, {"wake", access.SandboxWake}} {
		rt = append(rt, Route{Pattern: "POST /v1/sandboxes/{id}/" + lc.name, Op: lc.op, Out: ok(api.Sandbox{}), h: s.sandboxes.Hibernate(lc.name)})
	}
	for i := range rt {
		if rt[i].Idem != nil {
			rt[i].h = s.idempotent(*rt[i].Idem, rt[i].h.ServeHTTP)
		}
	}
	return rt
}

// mount checks every route's rule and registers the table: mux routes
// each behind guard, the host-routed proxy kept for Handler.
func (s *Server) mount(table []Route) {
	s.mux = http.NewServeMux()
	s.table = nil
	for _, rt := range table {
		if err := checkRoute(rt); err != nil {
			panic(err)
		}
		s.table = append(s.table, rt)
		if rt.Pattern == HostPortPattern {
			s.hostRoute = rt
			continue
		}
		s.mux.Handle(rt.Pattern, s.guard(rt))
	}
	if s.hostRoute.h == nil {
		panic("server: no route for " + HostPortPattern)
	}
}

// checkRoute refuses a route whose rule would be unsafe to serve.
func checkRoute(rt Route) error {
	_, path, hasMethod := strings.Cut(rt.Pattern, " ")
	if !hasMethod {
		path = rt.Pattern
	}
	rule := rt.Op.Rule()
	switch {
	case !rt.Op.Known() || !rule.Valid():
		return fmt.Errorf("server: route %q names no operation of the catalogue with a valid rule", rt.Pattern)
	case rule.Lease && rt.Pattern != HostPortPattern && !strings.HasPrefix(path, "/v1/sandboxes/{id}"):
		// A lease names a sandbox: its {id} must be a sandbox's.
		return fmt.Errorf("server: route %q lets leases in but is not under /v1/sandboxes/{id}", rt.Pattern)
	case rt.PublicPort && (!strings.Contains(path, "{id}") || !strings.Contains(path, "{port}")):
		return fmt.Errorf("server: public-port route %q lacks {id} or {port}", rt.Pattern)
	}
	return nil
}

// Routes returns the server's route table, in registration order.
func (s *Server) Routes() []Route { return slices.Clone(s.table) }

// Routes returns the API's route table (for tests and documentation).
func Routes() []Route { return New(nil, nil, nil).Routes() }

// guard is the authorization of one route: it runs after the mux has
// matched rt, and decides from rt's rule and the decoded path values the
// mux matched — the same values the handler reads.
func (s *Server) guard(rt Route) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Pattern != rt.Pattern {
			// Mounted anywhere but on its own pattern: refuse.
			rest.Error(w, errdefs.Permission("route %q reached by pattern %q", rt.Pattern, r.Pattern))
			return
		}
		rest.SetRoute(w, rt.Pattern)
		r = s.deadlines(w, r, rt)
		if err := input.CheckPathValues(r); err != nil {
			rest.Error(w, err)
			return
		}
		p, err := s.authorize(r, rt)
		if err == nil && s.portTokenRedirect(w, r, rt, p) {
			return
		}
		if err != nil {
			if _, status := errdefs.Code(err); status == http.StatusUnauthorized || status == http.StatusForbidden {
				// A caller without a working credential gets its answer
				// and the connection back: no keep-alive to hold.
				w.Header().Set("Connection", "close")
			}
			rest.Error(w, err)
			return
		}
		if p.Actor != auth.Anonymous.Actor {
			edge.Authenticated(r.Context()) // its connection keeps its slot (edge.Listener)
		}
		if err := s.rateLimit(r.Context(), p); err != nil { // ratelimit.go
			rest.Error(w, err)
			return
		}
		if s.maybeForward(w, r, rt, p) { // forward.go: another daemon runs the sandbox
			return
		}
		if rt.Upload {
			release, err := s.uploads.admit(p.Tenant)
			if err != nil {
				rest.Error(w, err)
				return
			}
			defer release()
		}
		ctx := rest.WithCaller(r.Context(), p)
		if rt.Stream || rt.EventStream && events.WantsStream(r) {
			// A connection that outlives its request's moment ends with
			// its credential (live.go).
			var release func()
			ctx, release = s.bind(ctx, p)
			defer release()
		}
		s.serveAudited(w, r.WithContext(ctx), rt, p)
	})
}

// deadlines sets the connection's deadlines for a request on rt
// (edge.Deadlines).
func (s *Server) deadlines(w http.ResponseWriter, r *http.Request, rt Route) *http.Request {
	stream := rt.Stream || rt.EventStream && events.WantsStream(r)
	return edge.Deadlines(w, r, stream, rt.Upload, s.WriteTimeout, s.BodyTimeout)
}

// authorize returns the principal of a request for rt, or why it may not
// call it.
func (s *Server) authorize(r *http.Request, rt Route) (auth.Principal, error) {
	ctx := r.Context()
	if trusted := rest.Trusted(ctx); trusted {
		return auth.Admin, nil
	}
	id := r.PathValue("id")
	if rt.Op.Rule().Public || rt.PublicPort && s.publicPort(ctx, id, r.PathValue("port")) {
		return auth.Anonymous, nil
	}
	if p, ok, err := s.portPrincipal(r, rt); ok {
		if err != nil {
			return auth.Principal{}, err
		}
		return p, access.Authorize(p, rt.Op, id)
	}
	key, _ := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if key == "" && bearerRoutes[rt.Pattern] {
		key = wsBearer(r) // a browser's WebSocket (console.go)
	}
	p, err := s.authn.Authenticate(ctx, strings.TrimSpace(key))
	if err != nil {
		return auth.Principal{}, err
	}
	if p.IsLease() {
		// A lease is a credential only while its sandbox runs (its
		// record is revoked when the sandbox stops, is quarantined or
		// goes; this covers the moment in between).
		if sb, err := s.lookup(ctx, p.Sandbox); err != nil || !rest.Leasable(sb.State) {
			return auth.Principal{}, errdefs.Unauthenticated("the lease token ended with its sandbox")
		}
	}
	if err := access.Authorize(p, rt.Op, id); err != nil {
		return auth.Principal{}, err
	}
	return p, nil
}

// publicPort reports whether sandbox id made port public: then its proxy
// needs no credential.
func (s *Server) publicPort(ctx context.Context, id, port string) bool {
	n, err := strconv.Atoi(port)
	if err != nil || id == "" {
		return false
	}
	sb, err := s.lookup(ctx, id)
	return err == nil && access.PublicPort(sb, n, access.DoorREST)
}
