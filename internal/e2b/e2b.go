// Package e2b is berth's E2B-compatible front door (`berth serve
// --e2b-listen`): E2B's control API (sandboxes created, listed, killed,
// paused, connected to, their timeouts set) over the engine's own domain
// calls, and envd — E2B's in-sandbox daemon, Connect RPC process and
// filesystem services plus the /files routes — served by the daemon over
// berth's agent. Any other sandbox port goes through berth's port proxy.
//
// Credentials are berth's: the control API's X-API-Key is a berth API key
// (its tenant and scopes apply), envd's X-Access-Token is the sandbox's
// create-time lease token, checked by the same code as the REST server's
// (server.Credential). Every envd call and proxied port connection is
// bound to its token (server.Bind), so a process stream, a watch or a
// proxied WebSocket ends within seconds of the token's revocation, as a
// REST stream does. Mutating calls are audited like the REST API's.
//
// One router (ParseTarget, fuzzed) picks the target: a host
// {port}-{id}.{domain} first (api.{domain} is the control API), else the
// E2b-Sandbox-Id and E2b-Sandbox-Port headers. control.go is the control
// API (its metrics from Engine.ResourceUse: CPU over 200 ms from the cgroup,
// memory from the backend, the writable layer's disk); envd.go, process.go
// and filesystem.go are envd over engine/procs and engine/files, with the
// polling watchers kept in the door. Errors are E2B's {code, message}
// (Connect codes on RPC). docs/e2b.md describes the mapping and the tests.
package e2b

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"path/filepath"
	"runtime/debug"
	"time"

	"github.com/berth-sh/berth/internal/access"
	"github.com/berth-sh/berth/internal/audit"
	"github.com/berth-sh/berth/internal/auth"
	"github.com/berth-sh/berth/internal/engine"
	"github.com/berth-sh/berth/internal/engine/files"
	"github.com/berth-sh/berth/internal/engine/netrules"
	"github.com/berth-sh/berth/internal/engine/procs"
	"github.com/berth-sh/berth/internal/engine/snapshots"
	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/internal/sandbox"
	"github.com/berth-sh/berth/internal/server"
	"github.com/berth-sh/berth/internal/server/edge"
	"github.com/berth-sh/berth/internal/store"
)

// EnvdVersion is the envd version the door reports: the e2b SDKs gate
// features on it (closeStdin from 0.5.2, octet-stream uploads from 0.5.7,
// file metadata from 0.6.2, entry info in watch events from 0.6.3,
// watches that allow network mounts from 0.6.4).
const EnvdVersion = "0.6.4"

// maxBody bounds a control-plane JSON body.
const maxBody = 1 << 20

var errBadTarget = errdefs.Invalid("malformed sandbox target (host {port}-{sandboxID}.{domain} or E2b-Sandbox-Id and E2b-Sandbox-Port)")

// Server is the REST server's half the door borrows: one credential
// check, one lease, one port proxy for every door.
type Server interface {
	// Credential authenticates token for op on target: the access
	// layer's decision (internal/access), as REST's guard makes it.
	Credential(ctx context.Context, token string, op access.Op, target access.Target) (auth.Principal, error)
	SandboxLease(ctx context.Context, sb *sandbox.Sandbox, caller auth.Principal) (string, error)
	ProxyPort(w http.ResponseWriter, r *http.Request, id string, port int, path string)
	// Bind ties a call's context to p's credential: it ends within a few
	// seconds of that credential's end, so a stream opened with a token
	// does not outlive its revocation.
	Bind(ctx context.Context, p auth.Principal) (context.Context, func())
	// SignedLease finds the lease token of sb a signed file URL was
	// made with (signing.go).
	SignedLease(ctx context.Context, sb *sandbox.Sandbox, matches func(token string) bool) (string, error)
}

// Engine is what the door drives of the engine: the sandbox records and
// their lifecycle, exec and processes, files, snapshots and fork, and
// egress rules. The daemon assembles it from the core and its features.
type Engine interface {
	Config() engine.Config
	Create(ctx context.Context, req *engine.CreateRequest, opt engine.CreateOptions) (*sandbox.Sandbox, error)
	Get(ctx context.Context, ref string) (*sandbox.Sandbox, error)
	ListFiltered(ctx context.Context, f store.SandboxFilter, p store.Page) ([]*sandbox.Sandbox, string, error)
	Delete(ctx context.Context, ref, actor string, cause sandbox.Cause, reason string) (*sandbox.Sandbox, error)
	ResolveTemplate(ctx context.Context, tenant, name string) (*store.Template, error)
	LastActivity(sb *sandbox.Sandbox) time.Time
	ResourceUse(ctx context.Context, ref string) (engine.ResourceUse, error)
	Pause(ctx context.Context, ref, actor string) (*sandbox.Sandbox, error)
	Resume(ctx context.Context, ref, actor string) (*sandbox.Sandbox, error)
	Start(ctx context.Context, ref, actor string) (*sandbox.Sandbox, error)
	Stop(ctx context.Context, ref, actor string) (*sandbox.Sandbox, error)
	SetTimeout(ctx context.Context, ref string, d time.Duration, actor string) (*sandbox.Sandbox, error)
	Touch(ctx context.Context, ref, actor string) (*sandbox.Sandbox, error)
	Exec(ctx context.Context, ref string, req *engine.ExecRequest, eio engine.ExecIO, actor string) (engine.Exit, error)

	StartProcess(ctx context.Context, ref string, req *procs.StartRequest, actor string) (procs.Process, error)
	ListProcesses(ctx context.Context, ref string) ([]procs.Process, error)
	AttachProcess(ctx context.Context, ref, pid string, follow bool, aio procs.AttachIO, actor string) (*engine.Exit, error)
	ProcessStdin(ctx context.Context, ref, pid string, r io.Reader, close bool, actor string) error
	SignalProcess(ctx context.Context, ref, pid, sig string, stop bool, actor string) error

	Files(ctx context.Context, ref string, write bool, actor string) (*files.Files, error)

	Fork(ctx context.Context, ref string, req *snapshots.ForkRequest, actor string, ids ...string) ([]*sandbox.Sandbox, time.Duration, error)
	CreateSnapshot(ctx context.Context, ref string, req *snapshots.SnapshotRequest, actor string, ids ...string) (*store.Snapshot, error)
	ListSnapshots(ctx context.Context, ref string, p store.Page) ([]*store.Snapshot, string, error)
	GetSnapshot(ctx context.Context, ref string) (*store.Snapshot, error)
	DeleteSnapshot(ctx context.Context, ref string) error

	UpdateNetworkRules(ctx context.Context, ref string, req *netrules.Request, actor string) (*netrules.NetworkRules, error)
}

// Config is what the door needs.
type Config struct {
	Manager Engine // the engine the door drives
	Server  Server
	// WithCaller puts an authorized principal into a call's context.
	WithCaller func(context.Context, auth.Principal) context.Context
	// Templates builds E2B's templates (templates.go); nil: the template
	// build API answers 404.
	Templates TemplateBuilder
	Audit     *audit.Log // nil: calls are not audited
	Log       *slog.Logger
	// Domain, if set, routes hosts {port}-{sandboxID}.{Domain} to that
	// sandbox's port and is the domain sandboxes report.
	Domain string
	// StateDir keeps the door's records that outlive a restart (template
	// builds); "" keeps them in memory only.
	StateDir string
}

// Door serves the E2B APIs.
type Door struct {
	cfg     Config
	control *http.ServeMux
	envd    *http.ServeMux
	watch   *watchers
	tpl     *tplState
}

// New returns the door for cfg.
func New(cfg Config) *Door {
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	filesDir := "" // copy steps' uploads: beside the engine's own uploads when it has a place for them
	if cfg.Manager != nil && cfg.Manager.Config().UploadDir != "" {
		filesDir = filepath.Join(cfg.Manager.Config().UploadDir, "e2b-files")
	}
	recDir := ""
	if cfg.StateDir != "" {
		recDir = filepath.Join(cfg.StateDir, "builds")
	}
	d := &Door{cfg: cfg, watch: newWatchers(), tpl: newTplState(filesDir, recDir, cfg.Log)}
	d.control = d.controlRoutes()
	d.envd = d.envdRoutes()
	return d
}

// Close ends the door's polling watchers and its template builds.
func (d *Door) Close() {
	d.watch.closeAll()
	d.tpl.close()
}

// ServeHTTP sends a request to the data plane when it names a sandbox
// target (host or headers), else to the control API.
func (d *Door) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	defer func() {
		if v := recover(); v != nil {
			if v == http.ErrAbortHandler {
				panic(v)
			}
			id, _ := r.Context().Value(requestIDKey{}).(string)
			d.cfg.Log.Error("e2b handler panic", "request_id", id, "method", r.Method, "path", r.URL.Path,
				"panic", fmt.Sprint(v), "stack", string(debug.Stack()))
			writeError(w, d.cfg.Log, errors.New("handler panic"))
		}
	}()
	// Every answer carries a request id: the caller's when it is a safe
	// one (server.ValidRequestID: it cannot forge a log or audit line),
	// else a fresh one; the audit record names it.
	id := r.Header.Get(server.RequestIDHeader)
	if !server.ValidRequestID(id) {
		b := make([]byte, 16)
		_, _ = rand.Read(b)
		id = hex.EncodeToString(b)
	}
	w.Header().Set(server.RequestIDHeader, id)
	r = r.WithContext(context.WithValue(r.Context(), requestIDKey{}, id))
	t, ok, err := ParseTarget(r.Host, d.cfg.Domain, r.Header.Get("E2b-Sandbox-Id"), r.Header.Get("E2b-Sandbox-Port"))
	// Deadlines are per connection: a keep-alive connection's stream
	// must not inherit a control call's.
	rc := http.NewResponseController(w)
	_ = rc.SetReadDeadline(time.Time{})
	_ = rc.SetWriteDeadline(time.Time{})
	switch {
	case err != nil:
		writeError(w, d.cfg.Log, err)
	case !ok:
		if signed, err := unroutedSignedFile(r); signed {
			writeError(w, d.cfg.Log, err)
			return
		}
		d.control.ServeHTTP(w, r)
	case t.Port == EnvdPort:
		r = r.WithContext(context.WithValue(r.Context(), targetKey{}, t))
		d.envd.ServeHTTP(w, r)
	default:
		d.proxy(w, r, t)
	}
}

type targetKey struct{}

type requestIDKey struct{}

func requestIDOf(ctx context.Context) string { s, _ := ctx.Value(requestIDKey{}).(string); return s }

func targetOf(ctx context.Context) Target { t, _ := ctx.Value(targetKey{}).(Target); return t }

// errorBody is E2B's error shape: the status again, and a message.
type errorBody struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
}

// statusOf is the HTTP status of err's category (500 for none).
func statusOf(err error) int {
	_, status := errdefs.Code(err)
	if status == 0 {
		return http.StatusInternalServerError
	}
	return status
}

// writeError answers err in E2B's shape; a 5xx's cause is logged, never
// shown.
func writeError(w http.ResponseWriter, log *slog.Logger, err error) {
	status := statusOf(err)
	msg := err.Error()
	if status >= 500 {
		id := w.Header().Get(server.RequestIDHeader)
		log.Error("e2b request failed", "request_id", id, "status", status, "err", err)
		if !errors.Is(err, errdefs.ErrUnavailable) {
			msg = "internal error (request id " + id + ")"
		}
	}
	if status == http.StatusUnauthorized || status == http.StatusForbidden {
		w.Header().Set("Connection", "close")
	}
	writeJSON(w, status, errorBody{Code: status, Message: msg})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// authorize checks token for op on sandbox id and returns the call's
// context; a tenant's key naming another tenant's sandbox passes here and
// meets 404 at the engine's owner-scoped read.
func (d *Door) authorize(r *http.Request, token string, op access.Op, id string) (context.Context, auth.Principal, error) {
	p, err := d.cfg.Server.Credential(r.Context(), token, op, access.Target{Sandbox: id})
	if err != nil {
		return nil, auth.Principal{}, err
	}
	edge.Authenticated(r.Context()) // its connection keeps its slot under the per-client cap
	return d.cfg.WithCaller(r.Context(), p), p, nil
}

// audited runs fn as op of p through the access layer's gate: decided,
// begun in the audit log before it acts (a begin that cannot be written
// refuses the call), completed with its outcome — the record REST's call
// of op leaves. source is the caller's address; req, when op has a
// request type, is validated by its one Validate before fn runs.
func (d *Door) audited(ctx context.Context, source string, p auth.Principal, op access.Op, target string, req access.Validator, fn func() error) error {
	return d.auditedFrom(ctx, source, p, op, target, func() (access.Validator, error) { return req, nil }, fn)
}

// auditedFrom is audited with the call's wire request translated by tr
// inside the gate, after the decision and the begin record: a request
// the door cannot translate (a bad user, an empty command, a process
// that is not there) leaves the record REST's refusal of it leaves
// ("error 400", "error 404"), never none.
func (d *Door) auditedFrom(ctx context.Context, source string, p auth.Principal, op access.Op, target string, tr access.Translate, fn func() error) error {
	g := access.Gate{Audit: d.cfg.Audit, Log: d.cfg.Log}
	sandbox := targetOf(ctx).Sandbox
	if sandbox == "" {
		sandbox = target
	}
	return g.DoTranslated(ctx, access.Call{P: p, Op: op, Sandbox: sandbox, Target: target, Source: source, RequestID: requestIDOf(ctx)}, tr, fn)
}
