package e2b

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"maps"
	"math"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/internal/access"
	"github.com/berth-sh/berth/internal/auth"
	"github.com/berth-sh/berth/internal/engine"
	"github.com/berth-sh/berth/internal/engine/templates"
	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/internal/interp"
	"github.com/berth-sh/berth/internal/sandbox"
	"github.com/berth-sh/berth/internal/server/convert"
	"github.com/berth-sh/berth/internal/server/input"
	"github.com/berth-sh/berth/internal/store"
)

// E2BUser is the user E2B's programs expect their commands to run as
// (uid 1000, home /home/user); berth's builtin templates have it.
const E2BUser = "user"

// DefaultTimeout is E2B's sandbox timeout when a create or connect names
// none.
const DefaultTimeout = 300 * time.Second

// Deadlines of a control call: its body's arrival, its answer's.
const (
	controlBodyTimeout  = time.Minute
	controlWriteTimeout = 10 * time.Minute
)

// controlRoutes is the control API: every route with the operation it is
// (internal/access), whose rule and audit action are the catalogue's, the
// same as REST's route of the operation has. No operation here lets a
// lease in but keep-alive (touch, as REST's), so an envd token cannot
// create, list or kill.
func (d *Door) controlRoutes() *http.ServeMux {
	mux := http.NewServeMux()
	// hr serves op with its wire request translated inside the gate; h
	// one without a request.
	hr := func(op access.Op, c control) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			// Control calls are short: the body has a minute to arrive
			// and the answer ten; a trickling caller holds nothing long.
			rc := http.NewResponseController(w)
			_ = rc.SetWriteDeadline(time.Now().Add(controlWriteTimeout))
			if r.Body != nil && r.Body != http.NoBody {
				_ = rc.SetReadDeadline(time.Now().Add(controlBodyTimeout))
				b, err := io.ReadAll(io.LimitReader(r.Body, maxBody+1))
				_ = rc.SetReadDeadline(time.Time{})
				if err != nil {
					writeError(w, d.cfg.Log, errdefs.Invalid("reading the body: %v", err))
					return
				}
				r.Body = io.NopCloser(bytes.NewReader(b))
			}
			id := r.PathValue("sandboxID")
			if id != "" && !validID(id) {
				writeError(w, d.cfg.Log, errdefs.NotFound("sandbox %q not found", id))
				return
			}
			ctx, p, err := d.authorize(r, r.Header.Get("X-API-Key"), op, id)
			if err == nil {
				// The record's target is what REST's names: the sandbox,
				// else the template or snapshot acted on.
				target := id
				if target == "" {
					target = r.PathValue("templateID")
				}
				tr, act := c(r)
				err = d.auditedFrom(ctx, r.RemoteAddr, p, op, target, tr, func() error { return act(ctx, w, r, p) })
			}
			if err != nil {
				writeError(w, d.cfg.Log, err)
			}
		}
	}
	h := func(op access.Op, fn handler) http.HandlerFunc { return hr(op, plain(fn)) }
	create := hr(access.SandboxCreate, d.create)
	mux.Handle("POST /sandboxes", create)
	mux.Handle("POST /v2/sandboxes", create)
	mux.Handle("GET /sandboxes", h(access.Read, d.listV1))
	mux.Handle("GET /v2/sandboxes", h(access.Read, d.listV2))
	mux.Handle("GET /sandboxes/{sandboxID}", h(access.SandboxCredentials, d.get))
	mux.Handle("DELETE /sandboxes/{sandboxID}", h(access.SandboxDelete, d.kill))
	mux.Handle("GET /sandboxes/{sandboxID}/metrics", h(access.SandboxInspect, d.metrics))
	mux.Handle("POST /sandboxes/{sandboxID}/timeout", hr(access.E2BTimeout, d.setTimeout))
	mux.Handle("POST /sandboxes/{sandboxID}/pause", h(access.E2BPause, d.pause))
	connect := hr(access.E2BConnect, d.connect)
	mux.Handle("POST /sandboxes/{sandboxID}/connect", connect)
	mux.Handle("POST /v2/sandboxes/{sandboxID}/connect", connect)
	mux.Handle("POST /sandboxes/{sandboxID}/resume", hr(access.E2BResume, d.resume))
	mux.Handle("POST /sandboxes/{sandboxID}/fork", hr(access.SandboxFork, d.fork))
	mux.Handle("POST /sandboxes/{sandboxID}/snapshots", hr(access.SnapshotCreate, d.createSnapshot))
	mux.Handle("GET /snapshots", h(access.Read, d.listSnapshots))
	mux.Handle("DELETE /templates/{templateID}", h(access.SnapshotDelete, d.deleteSnapshot))
	mux.Handle("PUT /sandboxes/{sandboxID}/network", hr(access.NetworkUpdate, d.updateNetwork))
	mux.Handle("POST /sandboxes/{sandboxID}/refreshes", h(access.SandboxTouch, d.refresh))
	if d.cfg.Templates != nil {
		mux.Handle("POST /v3/templates", h(access.E2BTemplateRequest, d.requestBuild))
		mux.Handle("GET /templates/{templateID}/files/{hash}", h(access.E2BTemplateFiles, d.fileLink))
		mux.Handle("PUT /templates/uploads/{token}", http.HandlerFunc(d.uploadFiles))
		mux.Handle("POST /v2/templates/{templateID}/builds/{buildID}", h(access.E2BTemplateBuild, d.startBuild))
		mux.Handle("GET /templates/{templateID}/builds/{buildID}/status", h(access.E2BTemplateStatus, d.buildStatus))
		mux.Handle("GET /templates/aliases/{alias}", h(access.Read, d.templateAlias))
		mux.Handle("GET /templates/{templateID}/{sub}", h(access.Read, d.templateSub))
		mux.Handle("POST /templates/tags", h(access.E2BTemplateTag, d.assignTags))
		mux.Handle("DELETE /templates/tags", h(access.E2BTemplateUntag, d.removeTags))
	}
	mux.Handle("/", h(access.Read, func(_ context.Context, _ http.ResponseWriter, r *http.Request, _ auth.Principal) error {
		return errdefs.NotFound("berth's E2B door has no route %s %s", r.Method, r.URL.Path)
	}))
	return mux
}

// handler acts on a control call once the gate let it through.
type handler func(ctx context.Context, w http.ResponseWriter, r *http.Request, p auth.Principal) error

// control is a control call whose wire request has a type of the
// operation's: its translation, which the gate runs after its decision
// and its record's begin and whose result it validates with that type's
// one rule set (REST's request types through input.Request, the
// engine's), and the handler that acts on what it translated. A request
// berth refuses is so refused with REST's code and REST's record
// ("error 400"), whichever door it came through.
type control func(r *http.Request) (access.Translate, handler)

// plain is a control call without a request.
func plain(fn handler) control {
	return func(*http.Request) (access.Translate, handler) {
		return func() (access.Validator, error) { return nil, nil }, fn
	}
}

// decode reads a JSON body into v (an empty body leaves v as it is).
// Unknown fields are ignored: newer SDKs send fields older ones lack, and
// those berth cannot honour are refused by name where they matter.
func decode(r *http.Request, v any) error {
	b, err := io.ReadAll(io.LimitReader(r.Body, maxBody+1))
	if err != nil {
		return errdefs.Invalid("reading the body: %v", err)
	}
	if len(b) > maxBody {
		return errdefs.Invalid("body over %d bytes", maxBody)
	}
	if len(strings.TrimSpace(string(b))) == 0 {
		return nil
	}
	if err := json.Unmarshal(b, v); err != nil {
		return errdefs.Invalid("bad JSON body: %v", err)
	}
	return nil
}

// newSandbox is E2B's NewSandbox body, the fields berth reads.
type newSandbox struct {
	TemplateID          string                  `json:"templateID"`
	Timeout             *int64                  `json:"timeout"`
	AutoPause           *bool                   `json:"autoPause"`
	AutoPauseMemory     *bool                   `json:"autoPauseMemory"`
	AutoResume          *struct{ Enabled bool } `json:"autoResume"`
	Secure              *bool                   `json:"secure"`
	AllowInternetAccess *bool                   `json:"allow_internet_access"`
	Network             *networkConfig          `json:"network"`
	Metadata            map[string]string       `json:"metadata"`
	EnvVars             map[string]string       `json:"envVars"`
	// MCP (the SDK's mcp option) is read by no one here: the SDK starts
	// the gateway itself, a command in the sandbox (mcp-gateway, which
	// the template must hold), and reaches it on port 50005 with a
	// bearer token of its own, through the port proxy like any port.
	MCP          json.RawMessage `json:"mcp"`
	VolumeMounts json.RawMessage `json:"volumeMounts"`
}

type networkConfig struct {
	AllowPublicTraffic *bool           `json:"allowPublicTraffic"`
	AllowOut           []string        `json:"allowOut"`
	DenyOut            []string        `json:"denyOut"`
	EgressProxy        json.RawMessage `json:"egressProxy"`
	Rules              json.RawMessage `json:"rules"`
	MaskRequestHost    *string         `json:"maskRequestHost"`
}

func present(m json.RawMessage) bool { return len(m) > 0 && string(m) != "null" }

// seconds reads an E2B timeout in whole seconds (nil: def): positive, as
// E2B's API has it; its bound is the rule set's of the request it goes
// into (REST's timeout_seconds, engine.TimeoutRequest), which the gate
// checks. A count of seconds past what a Duration holds saturates, and is
// refused there as out of range.
func seconds(v *int64, def time.Duration) (time.Duration, error) {
	if v == nil {
		return def, nil
	}
	if *v <= 0 {
		return 0, errdefs.Invalid("timeout must be a positive number of seconds")
	}
	if *v > int64(math.MaxInt64/time.Second) {
		return math.MaxInt64, nil
	}
	return time.Duration(*v) * time.Second, nil
}

// e2bCreate is E2B's create as berth's: REST's create request, which the
// gate validates with REST's rules (input.Request) and the engine takes
// through REST's one conversion, and the fields only E2B's create sets.
type e2bCreate struct {
	rest            api.CreateSandboxRequest
	allPortsPublic  bool
	maskRequestHost string
	keepCreateLease bool
}

// engine is the create as the engine takes it.
func (c *e2bCreate) engine() *engine.CreateRequest {
	req := convert.CreateRequest(&c.rest)
	req.AllPortsPublic, req.MaskRequestHost, req.KeepCreateLease = c.allPortsPublic, c.maskRequestHost, c.keepCreateLease
	return req
}

// createRequest maps E2B's create onto berth's: the template by name,
// the timeout onto the hard timeout (or, with autoPause, onto the idle
// policy pausing), metadata onto labels, envVars onto env, network
// allowOut and denyOut onto egress rules (egressAllow).
func createRequest(in *newSandbox) (*e2bCreate, error) {
	switch {
	case present(in.VolumeMounts):
		return nil, errdefs.Invalid("volumeMounts are not supported by berth's E2B door; use berth volumes")
	case in.Secure != nil && !*in.Secure:
		return nil, errdefs.Invalid("secure: false is not supported: envd always needs its access token on berth")
	}
	// E2B's default template answers as the daemon's default.
	tpl := in.TemplateID
	if tpl == templates.BuiltinTemplate {
		tpl = ""
	}
	if strings.Contains(tpl, ":") { // E2B's name:tag: its berth template
		n, err := refName(tpl)
		if err != nil {
			return nil, errdefs.NotFound("template %q not found", tpl)
		}
		tpl = n
	}
	d, err := seconds(in.Timeout, DefaultTimeout)
	if err != nil {
		return nil, err
	}
	c := &e2bCreate{rest: api.CreateSandboxRequest{Template: tpl, Labels: in.Metadata, Env: in.EnvVars}}
	req := &c.rest
	if in.AutoPause != nil && *in.AutoPause {
		req.IdleTimeoutSeconds, req.OnIdle = d.Seconds(), string(sandbox.ActionPause)
		if in.AutoResume != nil && in.AutoResume.Enabled {
			req.AutoResume = true
		}
		if in.AutoPauseMemory != nil && !*in.AutoPauseMemory {
			if req.AutoResume {
				return nil, errdefs.Invalid("autoResume needs autoPauseMemory (a pause without memory is resumed by connect)")
			}
			// E2B's pause without memory keeps the files only: berth's
			// stop, which keeps them for a sandbox whose whole writable
			// root lives on its own volume.
			req.Persistent, req.PersistRoot = true, true
			// The SDK resumes with the token it had: the create-time
			// lease outlives this sandbox's stops (and nothing else).
			c.keepCreateLease = true
			req.OnIdle = string(sandbox.ActionStop)
		}
	} else {
		if in.AutoResume != nil && in.AutoResume.Enabled {
			return nil, errdefs.Invalid("autoResume needs autoPause")
		}
		if in.AutoPauseMemory != nil {
			return nil, errdefs.Invalid("autoPauseMemory needs autoPause")
		}
		req.TimeoutSeconds = d.Seconds()
	}
	// E2B serves a sandbox's ports to anyone unless it asked otherwise.
	c.allPortsPublic = in.Network == nil || in.Network.AllowPublicTraffic == nil || *in.Network.AllowPublicTraffic
	if n := in.Network; n != nil {
		if present(n.EgressProxy) || present(n.Rules) {
			return nil, errdefs.Invalid("network egressProxy and rules are not supported by berth's E2B door")
		}
		if n.MaskRequestHost != nil {
			if err := checkMaskHost(*n.MaskRequestHost); err != nil {
				return nil, err
			}
			c.maskRequestHost = *n.MaskRequestHost
		}
		if n.AllowOut != nil || n.DenyOut != nil {
			// E2B's deny list with exceptions, as berth's allow list
			// (network.go).
			allow, err := egressAllow(n.AllowOut, n.DenyOut)
			if err != nil {
				return nil, err
			}
			req.Network, req.Allow = "egress", allow
		}
	}
	if in.AllowInternetAccess != nil {
		switch {
		case !*in.AllowInternetAccess && req.Network == "":
			req.Network = "none"
		case !*in.AllowInternetAccess:
			// E2B's allTraffic denied: only allowOut stays.
			allow, err := egressAllow(in.Network.AllowOut, []string{all4.String()})
			if err != nil {
				return nil, err
			}
			req.Allow = allow
		case req.Network == "":
			req.Network, req.Allow = "egress", []string{"0.0.0.0/0", "::/0"}
		}
	}
	return c, nil
}

// sandboxOut is E2B's Sandbox answer (create, connect, resume).
type sandboxOut struct {
	TemplateID         string  `json:"templateID"`
	SandboxID          string  `json:"sandboxID"`
	Alias              string  `json:"alias,omitempty"`
	ClientID           string  `json:"clientID"`
	EnvdVersion        string  `json:"envdVersion"`
	EnvdAccessToken    string  `json:"envdAccessToken,omitempty"`
	TrafficAccessToken string  `json:"trafficAccessToken,omitempty"`
	Domain             *string `json:"domain"`
}

// listedOut is E2B's ListedSandbox and, with the token, SandboxDetail.
type listedOut struct {
	TemplateID      string            `json:"templateID"`
	Alias           string            `json:"alias,omitempty"`
	SandboxID       string            `json:"sandboxID"`
	ClientID        string            `json:"clientID"`
	StartedAt       time.Time         `json:"startedAt"`
	EndAt           time.Time         `json:"endAt"`
	CPUCount        int               `json:"cpuCount"`
	MemoryMB        int64             `json:"memoryMB"`
	DiskSizeMB      int64             `json:"diskSizeMB"`
	Metadata        map[string]string `json:"metadata"`
	State           string            `json:"state"`
	EnvdVersion     string            `json:"envdVersion"`
	EnvdAccessToken string            `json:"envdAccessToken,omitempty"`
	Domain          *string           `json:"domain"`
	VolumeMounts    []struct{}        `json:"volumeMounts"`
}

// clientID is what berth answers for E2B's legacy client id.
const clientID = "berth"

func (d *Door) domain() *string {
	if d.cfg.Domain == "" {
		return nil
	}
	s := d.cfg.Domain
	return &s
}

// e2bState is E2B's name of sb's berth state: running or paused (a
// stopped sandbox that kept its files is E2B's paused without memory);
// "" for a sandbox E2B would not list (stopped without its files,
// failed, deleted...).
func e2bState(sb *sandbox.Sandbox) string {
	switch sb.State {
	case sandbox.StateRunning, sandbox.StateCreating, sandbox.StateStarting:
		return "running"
	case sandbox.StatePaused:
		return "paused"
	case sandbox.StateStopping, sandbox.StateStopped:
		if keepsFiles(sb) {
			return "paused"
		}
	}
	return ""
}

// keepsFiles reports whether sb's files survive a berth stop: its whole
// writable root is on its own volume (persist_root). Only such a sandbox
// is stopped for E2B's pause without memory.
func keepsFiles(sb *sandbox.Sandbox) bool { return sb.Spec.Persistent && sb.Spec.PersistRoot }

func (d *Door) listed(sb *sandbox.Sandbox) listedOut {
	out := listedOut{TemplateID: sb.Spec.Template, Alias: sb.Spec.Template, SandboxID: sb.ID, ClientID: clientID,
		StartedAt: sb.StartedAt, Metadata: sb.Spec.Labels, State: e2bState(sb), EnvdVersion: EnvdVersion,
		Domain: d.domain(), VolumeMounts: []struct{}{}}
	if out.StartedAt.IsZero() {
		out.StartedAt = sb.CreatedAt
	}
	if end, ok := sb.Deadline(); ok {
		out.EndAt = end
	} else if p := sb.Spec.Policy; p.IdleTimeout > 0 {
		out.EndAt = d.cfg.Manager.LastActivity(sb).Add(p.IdleTimeout)
	} else {
		out.EndAt = out.StartedAt.Add(engine.MaxTimeout)
	}
	out.CPUCount = max(1, int(sb.Spec.Resources.CPUs+0.5))
	out.MemoryMB = sb.Spec.Resources.MemoryBytes >> 20
	out.DiskSizeMB = sb.Spec.Resources.DiskBytes >> 20
	if out.Metadata == nil {
		out.Metadata = map[string]string{}
	}
	return out
}

// envdToken is the access token p is shown for sb: a lease derived from
// p (Server.SandboxLease), holding the data-plane scopes p holds (exec,
// files, ports) and no others, and dying with p's key. A caller holding
// none of them — a viewer — gets none, so reading a sandbox never hands
// out more than the reader may do, and a key without exec still reaches
// the files it may read, as through REST.
func (d *Door) envdToken(ctx context.Context, sb *sandbox.Sandbox, p auth.Principal) (string, error) {
	if !access.DataPlane(p) {
		return "", nil
	}
	return d.cfg.Server.SandboxLease(ctx, sb, p)
}

func (d *Door) sandboxOut(ctx context.Context, sb *sandbox.Sandbox, p auth.Principal) (sandboxOut, error) {
	tok, err := d.envdToken(ctx, sb, p)
	if err != nil {
		return sandboxOut{}, err
	}
	return sandboxOut{TemplateID: sb.Spec.Template, SandboxID: sb.ID, Alias: sb.Spec.Template, ClientID: clientID,
		EnvdVersion: EnvdVersion, EnvdAccessToken: tok, TrafficAccessToken: tok, Domain: d.domain()}, nil
}

// create is E2B's create, translated into REST's (createRequest) inside
// the gate, which validates it with REST's rules before anything is
// looked up: a create REST refuses is refused here with the same code
// and record.
func (d *Door) create(r *http.Request) (access.Translate, handler) {
	var in newSandbox
	var c *e2bCreate
	tr := func() (access.Validator, error) {
		if err := decode(r, &in); err != nil {
			return nil, err
		}
		var err error
		if c, err = createRequest(&in); err != nil {
			return nil, err
		}
		return input.Request(&c.rest), nil
	}
	return tr, func(ctx context.Context, w http.ResponseWriter, r *http.Request, p auth.Principal) error {
		req := c.engine()
		if req.Template != "" {
			// E2B creates from a snapshot by naming it as the template.
			if sn, err := d.cfg.Manager.GetSnapshot(ctx, req.Template); err == nil {
				req.Template, req.Snapshot = "", sn.ID
			}
		}
		if req.Snapshot == "" {
			name := req.Template
			if name == "" {
				name = d.cfg.Manager.Config().DefaultTemplate
			}
			if t, err := d.cfg.Manager.ResolveTemplate(ctx, p.Tenant, name); err == nil && t.Builtin {
				// E2B's convention on berth's own templates (which have the
				// account): commands run as "user" in /home/user.
				req.User, req.Workdir = E2BUser, homeOf(E2BUser)
				if svc := t.Config.Service; svc != nil && svc.ReadyPort == interp.Port {
					// The code interpreter's kernels start in the user's
					// home, as E2B's do (docs/code-interpreter.md).
					req.Env = maps.Clone(req.Env)
					if req.Env == nil {
						req.Env = map[string]string{}
					}
					if _, ok := req.Env["BERTH_INTERP_CWD"]; !ok {
						req.Env["BERTH_INTERP_CWD"] = homeOf(E2BUser)
					}
				}
			}
		}
		// E2B's templates give their user passwordless sudo: berth's sudo
		// where the runtime class has it (internal/agent/sudo).
		req.SudoWhereOffered = true
		sb, err := d.cfg.Manager.Create(ctx, req, engine.CreateOptions{Actor: p.Actor, Tenant: p.Tenant})
		if err != nil {
			if errors.Is(err, errdefs.ErrNotFound) {
				// The SDK's answer for an unknown template.
				return errdefs.NotFound("template %q not found", in.TemplateID)
			}
			return err
		}
		out, err := d.sandboxOut(ctx, sb, p)
		if err != nil {
			return err
		}
		writeJSON(w, http.StatusCreated, out)
		return nil
	}
}

// listQuery is the SDK's list query as berth's store filter: states,
// metadata pairs, startedAfter, template, order. Every part is a
// condition of the store's query, so a page holds limit matches.
func listQuery(q url.Values) (store.SandboxFilter, bool, error) {
	f := store.SandboxFilter{NoPool: true, Newest: true}
	var running, paused bool
	for _, v := range q["state"] {
		for _, s := range strings.Split(v, ",") {
			switch s {
			case "running":
				running = true
			case "paused":
				paused = true
			case "":
			default:
				return f, false, errdefs.Invalid("state %q: want running or paused", s)
			}
		}
	}
	if !running && !paused {
		running, paused = true, true
	}
	if running {
		f.States = append(f.States, sandbox.StateRunning, sandbox.StateCreating, sandbox.StateStarting)
	}
	if paused {
		// A stopped sandbox that kept its files is E2B's paused without
		// memory (e2bState).
		f.States = append(f.States, sandbox.StatePaused)
		f.KeptRootStates = []sandbox.State{sandbox.StateStopping, sandbox.StateStopped}
	}
	none := false
	if m := q.Get("metadata"); m != "" {
		pairs, err := url.ParseQuery(m)
		if err != nil {
			return f, false, errdefs.Invalid("metadata: %v", err)
		}
		f.Labels = map[string]string{}
		for k, vs := range pairs {
			key, err1 := url.QueryUnescape(k)
			val, err2 := url.QueryUnescape(vs[len(vs)-1])
			if err1 != nil || err2 != nil {
				return f, false, errdefs.Invalid("metadata: bad encoding")
			}
			f.Labels[key] = val
		}
		// No sandbox has labels berth would refuse.
		none = sandbox.CheckLabels(f.Labels) != nil
	}
	if v := q.Get("startedAfter"); v != "" {
		t, err := time.Parse(time.RFC3339Nano, v)
		if err != nil {
			return f, false, errdefs.Invalid("startedAfter: want an RFC 3339 time")
		}
		f.StartedAfter = t
	}
	f.Template = q.Get("template")
	switch q.Get("order") {
	case "", "desc":
	case "asc":
		f.Newest = false
	default:
		return f, false, errdefs.Invalid("order must be asc or desc")
	}
	return f, none, nil
}

func (d *Door) list(ctx context.Context, q url.Values, page store.Page) ([]listedOut, string, error) {
	f, none, err := listQuery(q)
	if err != nil || none {
		return []listedOut{}, "", err
	}
	if f.Template == templates.BuiltinTemplate {
		// E2B's default template is the daemon's default.
		f.Template = d.cfg.Manager.Config().DefaultTemplate
	}
	sbs, next, err := d.cfg.Manager.ListFiltered(ctx, f, page)
	if err != nil {
		return nil, "", err
	}
	out := make([]listedOut, 0, len(sbs))
	for _, sb := range sbs {
		out = append(out, d.listed(sb))
	}
	return out, next, nil
}

func (d *Door) listV1(ctx context.Context, w http.ResponseWriter, r *http.Request, _ auth.Principal) error {
	q := r.URL.Query()
	q.Set("state", "running")
	out, _, err := d.list(ctx, q, store.Page{})
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

func (d *Door) listV2(ctx context.Context, w http.ResponseWriter, r *http.Request, _ auth.Principal) error {
	q := r.URL.Query()
	page := store.Page{Limit: 100, Cursor: q.Get("nextToken")}
	if l := q.Get("limit"); l != "" {
		n, err := strconv.Atoi(l)
		if err != nil || n < 1 || n > 100 {
			return errdefs.Invalid("limit must be 1..100")
		}
		page.Limit = n
	}
	out, next, err := d.list(ctx, q, page)
	if err != nil {
		return err
	}
	if next != "" {
		w.Header().Set("X-Next-Token", next)
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// live returns sandbox id if E2B would show it (running or paused), else
// 404.
func (d *Door) live(ctx context.Context, id string) (*sandbox.Sandbox, error) {
	sb, err := d.cfg.Manager.Get(ctx, id)
	if err != nil {
		return nil, err
	}
	if e2bState(sb) == "" || sb.Spec.Pool != "" {
		return nil, errdefs.NotFound("sandbox %q not found", id)
	}
	return sb, nil
}

func (d *Door) get(ctx context.Context, w http.ResponseWriter, r *http.Request, p auth.Principal) error {
	sb, err := d.live(ctx, r.PathValue("sandboxID"))
	if err != nil {
		return err
	}
	out := d.listed(sb)
	if out.EnvdAccessToken, err = d.envdToken(ctx, sb, p); err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

func (d *Door) kill(ctx context.Context, w http.ResponseWriter, r *http.Request, p auth.Principal) error {
	if _, err := d.live(ctx, r.PathValue("sandboxID")); err != nil {
		return err
	}
	if _, err := d.cfg.Manager.Delete(ctx, r.PathValue("sandboxID"), p.Actor, sandbox.CauseUser, "killed through the E2B API"); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// timeoutRequest translates a body's timeout (E2B's default when it
// names none, or required) into the engine's request, which the gate
// validates (engine.TimeoutRequest).
func timeoutRequest(r *http.Request, in any, timeout **int64, required bool) (*engine.TimeoutRequest, error) {
	if err := decode(r, in); err != nil {
		return nil, err
	}
	if required && *timeout == nil {
		return nil, errdefs.Invalid("timeout is required")
	}
	t, err := seconds(*timeout, DefaultTimeout)
	if err != nil {
		return nil, err
	}
	return &engine.TimeoutRequest{Timeout: t}, nil
}

func (d *Door) setTimeout(r *http.Request) (access.Translate, handler) {
	var in struct {
		Timeout *int64 `json:"timeout"`
	}
	var req *engine.TimeoutRequest
	tr := func() (access.Validator, error) {
		var err error
		req, err = timeoutRequest(r, &in, &in.Timeout, true)
		return req, err
	}
	return tr, func(ctx context.Context, w http.ResponseWriter, r *http.Request, p auth.Principal) error {
		sb, err := d.live(ctx, r.PathValue("sandboxID"))
		if err != nil {
			return err
		}
		if sb.Spec.Policy.IdleTimeout > 0 && sb.Spec.Timeout == 0 {
			// autoPause: E2B's timeout is the idle policy's.
			return errdefs.Conflict("sandbox %s pauses on its idle policy (autoPause); berth cannot change that policy after create", sb.ID)
		}
		if _, err := d.cfg.Manager.SetTimeout(ctx, sb.ID, req.Timeout, p.Actor); err != nil {
			return err
		}
		w.WriteHeader(http.StatusNoContent)
		return nil
	}
}

// pause is E2B's pause: with memory (the default), berth's pause —
// processes and memory frozen; without (`keepMemory: false`), berth's
// stop when the sandbox keeps its files across one (made with
// autoPauseMemory false: its root on its own volume), else berth's pause
// too, since a stop would discard the files E2B keeps. Either way the
// timeout is lifted: a paused E2B sandbox waits for a connect.
func (d *Door) pause(ctx context.Context, w http.ResponseWriter, r *http.Request, p auth.Principal) error {
	var in struct {
		Memory *bool `json:"memory"`
	}
	if err := decode(r, &in); err != nil {
		return err
	}
	sb, err := d.live(ctx, r.PathValue("sandboxID"))
	if err != nil {
		return err
	}
	if sb.State != sandbox.StateRunning {
		return errdefs.Conflict("sandbox %s is already paused", sb.ID)
	}
	if in.Memory != nil && !*in.Memory && keepsFiles(sb) {
		// A stopped sandbox has no timeout to lift: lift it first.
		if sb.Spec.Timeout > 0 {
			if _, err := d.cfg.Manager.SetTimeout(ctx, sb.ID, 0, p.Actor); err != nil {
				return err
			}
		}
		if _, err := d.cfg.Manager.Stop(ctx, sb.ID, p.Actor); err != nil {
			return err
		}
		w.WriteHeader(http.StatusNoContent)
		return nil
	}
	if _, err := d.cfg.Manager.Pause(ctx, sb.ID, p.Actor); err != nil {
		return err
	}
	if sb.Spec.Timeout > 0 {
		if _, err := d.cfg.Manager.SetTimeout(ctx, sb.ID, 0, p.Actor); err != nil {
			return err
		}
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// wake brings sandbox id back to running and gives it timeout t from
// now: a paused one resumed (memory false — the SDK's onResume 'reboot'
// — stops and starts one that keeps its files, so its processes start
// afresh), a stopped one started. It reports whether the sandbox was
// paused (in E2B's sense); mustBePaused refuses one that was not.
func (d *Door) wake(ctx context.Context, id string, t time.Duration, memory *bool, mustBePaused bool, p auth.Principal) (*sandbox.Sandbox, bool, error) {
	sb, err := d.live(ctx, id)
	if err != nil {
		return nil, false, err
	}
	paused := e2bState(sb) == "paused"
	if mustBePaused && !paused {
		return nil, false, errdefs.Conflict("sandbox %s is not paused", sb.ID)
	}
	switch {
	case sb.State == sandbox.StatePaused && memory != nil && !*memory && keepsFiles(sb):
		if _, err = d.cfg.Manager.Stop(ctx, sb.ID, p.Actor); err == nil {
			sb, err = d.cfg.Manager.Start(ctx, sb.ID, p.Actor)
		}
	case sb.State == sandbox.StatePaused:
		sb, err = d.cfg.Manager.Resume(ctx, sb.ID, p.Actor)
	case sb.State == sandbox.StateStopped:
		sb, err = d.cfg.Manager.Start(ctx, sb.ID, p.Actor)
	}
	if err != nil {
		return nil, false, err
	}
	if sb.Spec.Policy.IdleTimeout == 0 || sb.Spec.Timeout > 0 {
		// E2B's connect only extends: a running sandbox whose deadline
		// is later than t from now keeps it.
		if end, ok := sb.Deadline(); paused || ok && end.Before(time.Now().Add(t)) {
			if sb, err = d.cfg.Manager.SetTimeout(ctx, sb.ID, t, p.Actor); err != nil {
				return nil, false, err
			}
		}
	}
	return sb, paused, nil
}

// wakeCall is connect (mustBePaused false: a running sandbox is answered
// 200 with its timeout moved) and resume (a sandbox that is not paused is
// a conflict): the body's timeout (E2B's default when it names none) and
// memory, the sandbox woken, its answer with a new lease (the old one
// ended if it was stopped).
func (d *Door) wakeCall(r *http.Request, mustBePaused bool) (access.Translate, handler) {
	var in struct {
		Timeout *int64 `json:"timeout"`
		Memory  *bool  `json:"memory"`
	}
	var req *engine.TimeoutRequest
	tr := func() (access.Validator, error) {
		var err error
		req, err = timeoutRequest(r, &in, &in.Timeout, false)
		return req, err
	}
	return tr, func(ctx context.Context, w http.ResponseWriter, r *http.Request, p auth.Principal) error {
		sb, paused, err := d.wake(ctx, r.PathValue("sandboxID"), req.Timeout, in.Memory, mustBePaused, p)
		if err != nil {
			return err
		}
		out, err := d.sandboxOut(ctx, sb, p)
		if err != nil {
			return err
		}
		status := http.StatusOK
		if paused {
			status = http.StatusCreated
		}
		writeJSON(w, status, out)
		return nil
	}
}

func (d *Door) connect(r *http.Request) (access.Translate, handler) { return d.wakeCall(r, false) }

func (d *Door) resume(r *http.Request) (access.Translate, handler) { return d.wakeCall(r, true) }

// refresh is the old SDKs' keep-alive: activity, as berth's touch.
func (d *Door) refresh(ctx context.Context, w http.ResponseWriter, r *http.Request, p auth.Principal) error {
	if _, err := d.cfg.Manager.Touch(ctx, r.PathValue("sandboxID"), p.Actor); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// forkResult is one child of E2B's fork answer: the sandbox, or why it
// was not made.
type forkResult struct {
	Sandbox *sandboxOut `json:"sandbox,omitempty"`
	Error   *errorBody  `json:"error,omitempty"`
}

// fork makes count children of the sandbox with berth's fork (each a
// copy-on-write view of the parent's files, its own processes), each with
// E2B's timeout from now and the parent's metadata.
// The fork's wire request is translated into REST's (api.ForkRequest),
// which the gate validates with REST's rules; the parent's metadata is
// added as the engine takes it.
func (d *Door) fork(r *http.Request) (access.Translate, handler) {
	var req api.ForkRequest
	tr := func() (access.Validator, error) {
		var in struct {
			Timeout *int64 `json:"timeout"`
			Count   *int   `json:"count"`
		}
		if err := decode(r, &in); err != nil {
			return nil, err
		}
		t, err := seconds(in.Timeout, DefaultTimeout)
		if err != nil {
			return nil, err
		}
		req.TimeoutSeconds, req.Count = t.Seconds(), 1
		if in.Count != nil {
			req.Count = *in.Count
		}
		return input.Request(&req), nil
	}
	return tr, func(ctx context.Context, w http.ResponseWriter, r *http.Request, p auth.Principal) error {
		return d.forkOf(ctx, w, r, p, &req)
	}
}

func (d *Door) forkOf(ctx context.Context, w http.ResponseWriter, r *http.Request, p auth.Principal, req *api.ForkRequest) error {
	count := max(req.Count, 1) // REST's: 0 is one child
	parent, err := d.live(ctx, r.PathValue("sandboxID"))
	if err != nil {
		return err
	}
	fr := convert.ForkRequest(req)
	fr.Labels = parent.Spec.Labels
	kids, _, err := d.cfg.Manager.Fork(ctx, parent.ID, fr, p.Actor)
	if err != nil && len(kids) == 0 {
		return err
	}
	out := make([]forkResult, 0, count)
	for _, k := range kids {
		so, lerr := d.sandboxOut(ctx, k, p)
		if lerr != nil {
			st := statusOf(lerr)
			out = append(out, forkResult{Error: &errorBody{Code: st, Message: http.StatusText(st)}})
			continue
		}
		out = append(out, forkResult{Sandbox: &so})
	}
	if err != nil {
		// Some children were not made: each missing one says why.
		st := statusOf(err)
		msg := err.Error()
		if st >= 500 {
			d.cfg.Log.Error("e2b fork partly failed", "sandbox", parent.ID, "err", err)
			msg = "internal error"
		}
		for len(out) < count {
			out = append(out, forkResult{Error: &errorBody{Code: st, Message: msg}})
		}
	}
	writeJSON(w, http.StatusCreated, out)
	return nil
}

// snapshotOut is E2B's snapshot: its id and the names it answers to.
type snapshotOut struct {
	SnapshotID string   `json:"snapshotID"`
	Names      []string `json:"names"`
}

func snapshotOf(sn *store.Snapshot) snapshotOut {
	out := snapshotOut{SnapshotID: sn.ID, Names: []string{}}
	if sn.Name != "" {
		out.Names = append(out.Names, sn.Name)
	}
	return out
}

// createSnapshot takes a berth snapshot of the sandbox (crash-consistent,
// the sandbox frozen for the capture); a create naming it as its template
// starts from it.
// The snapshot's name is REST's request (api.CreateSnapshotRequest),
// which the gate validates with REST's rules.
func (d *Door) createSnapshot(r *http.Request) (access.Translate, handler) {
	var req api.CreateSnapshotRequest
	tr := func() (access.Validator, error) {
		var in struct {
			Name string `json:"name"`
		}
		if err := decode(r, &in); err != nil {
			return nil, err
		}
		req.Name = in.Name
		return input.Request(&req), nil
	}
	return tr, func(ctx context.Context, w http.ResponseWriter, r *http.Request, p auth.Principal) error {
		sb, err := d.live(ctx, r.PathValue("sandboxID"))
		if err != nil {
			return err
		}
		sn, err := d.cfg.Manager.CreateSnapshot(ctx, sb.ID, convert.SnapshotRequest(&req), p.Actor)
		if err != nil {
			return err
		}
		writeJSON(w, http.StatusCreated, snapshotOf(sn))
		return nil
	}
}

func (d *Door) listSnapshots(ctx context.Context, w http.ResponseWriter, r *http.Request, _ auth.Principal) error {
	q := r.URL.Query()
	page := store.Page{Limit: 100, Cursor: q.Get("nextToken")}
	if l := q.Get("limit"); l != "" {
		n, err := strconv.Atoi(l)
		if err != nil || n < 1 || n > 100 {
			return errdefs.Invalid("limit must be 1..100")
		}
		page.Limit = n
	}
	sbID := q.Get("sandboxID")
	if sbID != "" && !validID(sbID) {
		return errdefs.NotFound("sandbox %q not found", sbID)
	}
	sns, next, err := d.cfg.Manager.ListSnapshots(ctx, sbID, page)
	if err != nil {
		return err
	}
	out := []snapshotOut{}
	for _, sn := range sns {
		if name := q.Get("name"); name != "" && sn.Name != name {
			continue
		}
		out = append(out, snapshotOf(sn))
	}
	if next != "" {
		w.Header().Set("X-Next-Token", next)
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// deleteSnapshot is E2B's template delete, for snapshots only: berth's
// templates are the host's (berth template rm).
func (d *Door) deleteSnapshot(ctx context.Context, w http.ResponseWriter, r *http.Request, _ auth.Principal) error {
	id := r.PathValue("templateID")
	if !validID(id) {
		return errdefs.NotFound("snapshot %q not found", id)
	}
	if err := d.cfg.Manager.DeleteSnapshot(ctx, id); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// metricOut is one of E2B's SandboxMetric points.
type metricOut struct {
	Timestamp  time.Time `json:"timestamp"`
	CPUUsedPct float64   `json:"cpuUsedPct"`
	CPUCount   int       `json:"cpuCount"`
	MemUsed    int64     `json:"memUsed"`
	MemTotal   int64     `json:"memTotal"`
	MemCache   int64     `json:"memCache"`
	DiskUsed   int64     `json:"diskUsed"`
	DiskTotal  int64     `json:"diskTotal"`
}

// metrics is E2B's sandbox metrics from berth's accounting: one point,
// now (berth keeps no history per sandbox; its /metrics are Prometheus'),
// when it falls within the query's start..end (Unix seconds); none for a
// sandbox that is not running. Memory is what its cgroup holds, page
// cache included (memCache 0: not told apart); disk is its writable root
// layer against its cap (0 when the root is on its volume).
func (d *Door) metrics(ctx context.Context, w http.ResponseWriter, r *http.Request, _ auth.Principal) error {
	var bounds [2]int64
	for i, k := range []string{"start", "end"} {
		if v := r.URL.Query().Get(k); v != "" {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil || n < 0 {
				return errdefs.Invalid("%s must be Unix seconds", k)
			}
			bounds[i] = n
		}
	}
	sb, err := d.live(ctx, r.PathValue("sandboxID"))
	if err != nil {
		return err
	}
	out := []metricOut{}
	if sb.State == sandbox.StateRunning {
		u, err := d.cfg.Manager.ResourceUse(ctx, sb.ID)
		if err != nil {
			return err
		}
		now := u.At.Unix()
		if (bounds[0] == 0 || now >= bounds[0]) && (bounds[1] == 0 || now <= bounds[1]) {
			out = append(out, metricOut{Timestamp: u.At.UTC(), CPUUsedPct: u.CPUPercent, CPUCount: max(1, int(u.CPUs+0.5)),
				MemUsed: u.MemoryBytes, MemTotal: u.MemoryLimit, DiskUsed: u.DiskBytes, DiskTotal: u.DiskLimit})
		}
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}
