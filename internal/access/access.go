// Package access is the one layer below berth's doors that decides who
// may do what, validates what they ask, and records it: REST, the E2B
// door, MCP (which calls REST), the web console, the port proxy and the
// agent-sandbox door each translate a wire request into an Op of this
// catalogue and call it with their caller's principal. A door keeps no
// rule of its own: the scopes an operation needs, whether a sandbox's
// lease or port token may call it, whether it is the host's alone, and
// the action its audit record carries are written here, once, so every
// door makes the same decision and leaves the same audit row for the
// same operation.
//
// TestNoRulesOutsideCatalogue fails when a package outside this one and
// internal/auth builds an auth.Rule, calls auth.Authorize, or asks a
// principal for a scope (Principal.Has) to decide something.
package access

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strconv"

	"github.com/berth-sh/berth/internal/audit"
	"github.com/berth-sh/berth/internal/auth"
	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/internal/sandbox"
)

// Op is one operation a caller may ask of berth, whichever door it came
// through ("sandbox.create", "files.write").
type Op string

// entry is what the catalogue says of an Op.
type entry struct {
	rule auth.Rule
	// action is the audit record's action ("" for an operation that is
	// not recorded: reads, the port proxy); REST's route pattern for an
	// operation REST has, so a row says the same whichever door it came
	// through.
	action string
	// ok is the status the operation answers on success through REST,
	// which a door that answers in its own protocol records as its
	// outcome ("ok 201").
	ok int
}

// Rules, spelled once.
var (
	public   = auth.Rule{Public: true}
	hostOnly = auth.Rule{Scopes: []auth.Scope{auth.ScopeAdmin}, Host: true}
)

func need(scopes ...auth.Scope) auth.Rule  { return auth.Rule{Scopes: scopes} }
func lease(scopes ...auth.Scope) auth.Rule { return auth.Rule{Scopes: scopes, Lease: true} }

const (
	read  = auth.ScopeSandboxesRead
	write = auth.ScopeSandboxesWrite
)

// The operations. Reads that need the same rule share an Op (they are not
// recorded, so their action does not tell them apart); every recorded
// operation has its own.
const (
	// Public: no credential.
	Health         Op = "health"          // GET /healthz
	ConsoleAssets  Op = "console.assets"  // the console's files and redirects
	ConsoleSession Op = "console.session" // a sign-in code exchanged for a key

	// Reads of the caller's tenant: sandboxes, events, snapshots,
	// volumes, templates, pools, its quota, the API's own description.
	Read Op = "read"
	// SandboxGet reads one sandbox and its events; its lease may.
	SandboxGet Op = "sandbox.get"
	// SandboxInspect reads what a sandbox's record does not hold (diff,
	// egress rules, flows, usage, its snapshots); not its lease.
	SandboxInspect Op = "sandbox.inspect"
	// SandboxCredentials reads a sandbox and is handed a token derived
	// from the caller for it (E2B's get and list answers carry an
	// envdAccessToken): a credential mints none.
	SandboxCredentials Op = "sandbox.credentials"

	SandboxCreate     Op = "sandbox.create"
	SandboxDelete     Op = "sandbox.delete"
	SandboxRun        Op = "sandbox.run"
	SandboxTouch      Op = "sandbox.touch"
	SandboxPause      Op = "sandbox.pause"
	SandboxResume     Op = "sandbox.resume"
	SandboxStop       Op = "sandbox.stop"
	SandboxStart      Op = "sandbox.start"
	SandboxReset      Op = "sandbox.reset"
	SandboxHibernate  Op = "sandbox.hibernate"
	SandboxWake       Op = "sandbox.wake"
	SandboxQuarantine Op = "sandbox.quarantine"
	SandboxRelease    Op = "sandbox.release"
	SandboxFork       Op = "sandbox.fork"
	NetworkUpdate     Op = "network.update"

	SnapshotCreate  Op = "snapshot.create"
	SnapshotDelete  Op = "snapshot.delete"
	SnapshotRestore Op = "snapshot.restore"
	VolumeCreate    Op = "volume.create"
	VolumeDelete    Op = "volume.delete"

	Exec    Op = "exec"
	ExecPTY Op = "exec.pty"

	// FilesRead reads a sandbox's files: content, stat, list, watch.
	FilesRead   Op = "files.read"
	FilesWrite  Op = "files.write"
	FilesRemove Op = "files.remove"
	FilesMkdir  Op = "files.mkdir"
	FilesMove   Op = "files.move"
	FilesExport Op = "files.export"
	FilesCopy   Op = "files.copy"

	// ProcessRead lists a sandbox's processes, one, and its logs.
	ProcessRead   Op = "process.read"
	ProcessStart  Op = "process.start"
	ProcessAttach Op = "process.attach"
	ProcessStdin  Op = "process.stdin"
	ProcessSignal Op = "process.signal"
	ProcessKill   Op = "process.kill"
	ProcessWait   Op = "process.wait"

	// Ports reaches a sandbox's port through the proxy.
	Ports            Op = "ports"
	PortTokenCreate  Op = "porttoken.create"
	PortTokenList    Op = "porttoken.list"
	PortTokenRevoke  Op = "porttoken.revoke"
	LeaseCreate      Op = "lease.create"
	LeaseRevoke      Op = "lease.revoke"
	KeyCreate        Op = "key.create"
	KeyList          Op = "key.list"
	KeyRevoke        Op = "key.revoke"
	SecretPut        Op = "secret.put"
	SecretList       Op = "secret.list"
	SecretDelete     Op = "secret.delete"
	AuditRead        Op = "audit.read"
	AuditVerify      Op = "audit.verify"
	TemplateDelete   Op = "template.delete"
	TemplateImport   Op = "template.import"
	TemplateUpload   Op = "template.upload"
	TemplatePush     Op = "template.push"
	TemplateBuild    Op = "template.build"
	TemplateBuildDF  Op = "template.dockerfile"
	TemplatePool     Op = "template.pool"
	TemplateApply    Op = "template.apply"
	MCPCall          Op = "mcp.call"
	MCPStream        Op = "mcp.stream"
	MCPClose         Op = "mcp.close"
	HostRead         Op = "host.read"
	HostDoctorFix    Op = "host.doctor.fix"
	HostTenantCreate Op = "host.tenant.create"
	HostTenantDelete Op = "host.tenant.delete"
	HostQuotaSet     Op = "host.quota.set"
	HostSecretsKey   Op = "host.secrets.rotate"
	HostConsoleCode  Op = "host.console.code"

	// The E2B door's operations that are not one of the above: each is
	// several engine calls E2B's API names as one (a pause lifts the
	// timeout too; a connect wakes and extends), recorded under the E2B
	// route.
	E2BPause           Op = "e2b.pause"
	E2BResume          Op = "e2b.resume"
	E2BConnect         Op = "e2b.connect"
	E2BTimeout         Op = "e2b.timeout"
	E2BTemplateRequest Op = "e2b.template.request"
	E2BTemplateFiles   Op = "e2b.template.files"
	E2BTemplateUpload  Op = "e2b.template.upload"
	E2BTemplateBuild   Op = "e2b.template.build"
	E2BTemplateStatus  Op = "e2b.template.status"
	E2BTemplateTag     Op = "e2b.template.tag"
	E2BTemplateUntag   Op = "e2b.template.untag"
	// The agent-sandbox door's creates and deletes are REST's
	// (SandboxCreate, SandboxDelete); a claim's adoption of a warm
	// member is no call of REST's.
	AgentSandboxClaim   Op = "agentsandbox.claim"
	AgentSandboxAccount Op = "agentsandbox.account"
)

// catalogue is every operation with its rule, its audit action and its
// success status.
var catalogue = map[Op]entry{
	Health:         {rule: public},
	ConsoleAssets:  {rule: public},
	ConsoleSession: {rule: public, action: "POST /v1/console/session", ok: http.StatusCreated},

	Read:               {rule: need(read)},
	SandboxGet:         {rule: lease(read)},
	SandboxInspect:     {rule: need(read)},
	SandboxCredentials: {rule: need(read)},

	SandboxCreate:    {rule: need(write), action: "POST /v1/sandboxes", ok: http.StatusCreated},
	SandboxDelete:    {rule: need(write), action: "DELETE /v1/sandboxes/{id}", ok: http.StatusOK},
	SandboxRun:       {rule: need(write, auth.ScopeExec), action: "POST /v1/run", ok: http.StatusOK},
	SandboxTouch:     {rule: lease(write), action: "POST /v1/sandboxes/{id}/touch", ok: http.StatusOK},
	SandboxPause:     {rule: need(write), action: "POST /v1/sandboxes/{id}/pause", ok: http.StatusOK},
	SandboxResume:    {rule: need(write), action: "POST /v1/sandboxes/{id}/resume", ok: http.StatusOK},
	SandboxStop:      {rule: need(write), action: "POST /v1/sandboxes/{id}/stop", ok: http.StatusOK},
	SandboxStart:     {rule: need(write), action: "POST /v1/sandboxes/{id}/start", ok: http.StatusOK},
	SandboxReset:     {rule: need(write), action: "POST /v1/sandboxes/{id}/reset", ok: http.StatusOK},
	SandboxHibernate: {rule: need(write), action: "POST /v1/sandboxes/{id}/hibernate", ok: http.StatusOK},
	SandboxWake:      {rule: need(write), action: "POST /v1/sandboxes/{id}/wake", ok: http.StatusOK},
	// Containment, like the egress rules: a sandbox's own lease never
	// lifts it.
	SandboxQuarantine: {rule: need(auth.ScopeNetwork), action: "POST /v1/sandboxes/{id}/quarantine", ok: http.StatusOK},
	SandboxRelease:    {rule: need(auth.ScopeNetwork), action: "POST /v1/sandboxes/{id}/release", ok: http.StatusOK},
	SandboxFork:       {rule: need(write), action: "POST /v1/sandboxes/{id}/fork", ok: http.StatusCreated},
	NetworkUpdate:     {rule: need(auth.ScopeNetwork), action: "POST /v1/sandboxes/{id}/network", ok: http.StatusOK},

	SnapshotCreate:  {rule: need(write), action: "POST /v1/sandboxes/{id}/snapshots", ok: http.StatusCreated},
	SnapshotDelete:  {rule: need(write), action: "DELETE /v1/snapshots/{id}", ok: http.StatusNoContent},
	SnapshotRestore: {rule: need(write), action: "POST /v1/snapshots/{id}/restore", ok: http.StatusOK},
	VolumeCreate:    {rule: need(write), action: "POST /v1/volumes", ok: http.StatusCreated},
	VolumeDelete:    {rule: need(write), action: "DELETE /v1/volumes/{name}", ok: http.StatusNoContent},

	Exec:    {rule: lease(auth.ScopeExec), action: "POST /v1/sandboxes/{id}/exec", ok: http.StatusOK},
	ExecPTY: {rule: lease(auth.ScopeExec), action: "GET /v1/sandboxes/{id}/exec/ws", ok: http.StatusSwitchingProtocols},

	FilesRead:   {rule: lease(auth.ScopeFiles)},
	FilesWrite:  {rule: lease(auth.ScopeFiles), action: "PUT /v1/sandboxes/{id}/files", ok: http.StatusOK},
	FilesRemove: {rule: lease(auth.ScopeFiles), action: "DELETE /v1/sandboxes/{id}/files", ok: http.StatusNoContent},
	FilesMkdir:  {rule: lease(auth.ScopeFiles), action: "POST /v1/sandboxes/{id}/files/mkdir", ok: http.StatusNoContent},
	FilesMove:   {rule: lease(auth.ScopeFiles), action: "POST /v1/sandboxes/{id}/files/move", ok: http.StatusNoContent},
	FilesExport: {rule: lease(auth.ScopeFiles), action: "POST /v1/sandboxes/{id}/export", ok: http.StatusOK},
	FilesCopy:   {rule: need(auth.ScopeFiles), action: "POST /v1/copy", ok: http.StatusNoContent},

	ProcessRead:   {rule: lease(auth.ScopeExec)},
	ProcessStart:  {rule: lease(auth.ScopeExec), action: "POST /v1/sandboxes/{id}/processes", ok: http.StatusCreated},
	ProcessAttach: {rule: lease(auth.ScopeExec), action: "GET /v1/sandboxes/{id}/processes/{pid}/ws", ok: http.StatusSwitchingProtocols},
	ProcessStdin:  {rule: lease(auth.ScopeExec), action: "POST /v1/sandboxes/{id}/processes/{pid}/stdin", ok: http.StatusNoContent},
	ProcessSignal: {rule: lease(auth.ScopeExec), action: "POST /v1/sandboxes/{id}/processes/{pid}/signal", ok: http.StatusNoContent},
	ProcessKill:   {rule: lease(auth.ScopeExec), action: "POST /v1/sandboxes/{id}/processes/{pid}/kill", ok: http.StatusNoContent},
	ProcessWait:   {rule: lease(auth.ScopeExec), action: "POST /v1/sandboxes/{id}/processes/{pid}/wait", ok: http.StatusOK},

	Ports:           {rule: lease(auth.ScopePorts)},
	PortTokenCreate: {rule: need(auth.ScopePorts), action: "POST /v1/sandboxes/{id}/ports/{port}/token", ok: http.StatusCreated},
	PortTokenList:   {rule: need(auth.ScopePorts)},
	PortTokenRevoke: {rule: need(auth.ScopePorts), action: "DELETE /v1/sandboxes/{id}/port-tokens/{token}", ok: http.StatusOK},
	LeaseCreate:     {rule: need(write), action: "POST /v1/sandboxes/{id}/leases", ok: http.StatusCreated},
	LeaseRevoke:     {rule: need(write), action: "DELETE /v1/sandboxes/{id}/leases/{lease}", ok: http.StatusNoContent},
	KeyCreate:       {rule: need(auth.ScopeKeys), action: "POST /v1/keys", ok: http.StatusCreated},
	KeyList:         {rule: need(auth.ScopeKeys)},
	KeyRevoke:       {rule: need(auth.ScopeKeys), action: "DELETE /v1/keys/{id}", ok: http.StatusOK},
	SecretPut:       {rule: need(auth.ScopeSecrets), action: "PUT /v1/secrets/{name}", ok: http.StatusOK},
	SecretList:      {rule: need(auth.ScopeSecrets)},
	SecretDelete:    {rule: need(auth.ScopeSecrets), action: "DELETE /v1/secrets/{name}", ok: http.StatusNoContent},
	AuditRead:       {rule: need(auth.ScopeAudit)},
	AuditVerify:     {rule: need(auth.ScopeAudit), action: "POST /v1/audit/verify", ok: http.StatusOK},
	TemplateDelete:  {rule: need(auth.ScopeTemplates), action: "DELETE /v1/templates/{name}", ok: http.StatusNoContent},
	TemplateImport:  {rule: need(auth.ScopeTemplates), action: "POST /v1/templates/import", ok: http.StatusCreated},
	TemplateUpload:  {rule: need(auth.ScopeTemplates), action: "PUT /v1/templates/{name}/archive", ok: http.StatusCreated},
	TemplatePush:    {rule: need(auth.ScopeTemplates), action: "POST /v1/templates/{name}/push", ok: http.StatusOK},
	TemplateBuild:   {rule: need(auth.ScopeTemplates), action: "POST /v1/templates/build", ok: http.StatusOK},
	TemplateBuildDF: {rule: need(auth.ScopeTemplates), action: "POST /v1/templates/{name}/dockerfile", ok: http.StatusOK},
	TemplatePool:    {rule: need(auth.ScopeTemplates), action: "PUT /v1/templates/{name}/pool", ok: http.StatusOK},
	TemplateApply:   {rule: need(auth.ScopeTemplates), action: "POST /v1/apply", ok: http.StatusOK},
	// MCP: a session needs the read every tool starts from; each tool's
	// own right is its REST call's, decided here when the tool's loopback
	// call passes REST's guard with the caller's credential. Leases may
	// not open one.
	MCPCall:   {rule: need(read), action: "POST /v1/mcp", ok: http.StatusOK},
	MCPStream: {rule: need(read)},
	MCPClose:  {rule: need(read), action: "DELETE /v1/mcp", ok: http.StatusNoContent},
	// The host's administrator alone: metrics, doctor, webhooks, tenants
	// and their quotas, the secrets' master key, console sign-in codes.
	HostRead:         {rule: hostOnly},
	HostDoctorFix:    {rule: hostOnly, action: "POST /v1/doctor/fix", ok: http.StatusOK},
	HostTenantCreate: {rule: hostOnly, action: "POST /v1/tenants", ok: http.StatusCreated},
	HostTenantDelete: {rule: hostOnly, action: "DELETE /v1/tenants/{name}", ok: http.StatusNoContent},
	HostQuotaSet:     {rule: hostOnly, action: "PUT /v1/tenants/{tenant}/quota", ok: http.StatusOK},
	HostSecretsKey:   {rule: hostOnly, action: "POST /v1/secrets/rotate-key", ok: http.StatusOK},
	HostConsoleCode:  {rule: hostOnly, action: "POST /v1/console/codes", ok: http.StatusCreated},

	E2BPause:           {rule: need(write), action: "e2b POST /sandboxes/{sandboxID}/pause"},
	E2BResume:          {rule: need(write), action: "e2b POST /sandboxes/{sandboxID}/resume"},
	E2BConnect:         {rule: need(write), action: "e2b POST /sandboxes/{sandboxID}/connect"},
	E2BTimeout:         {rule: need(write), action: "e2b POST /sandboxes/{sandboxID}/timeout"},
	E2BTemplateRequest: {rule: need(auth.ScopeTemplates), action: "e2b POST /v3/templates"},
	E2BTemplateFiles:   {rule: need(auth.ScopeTemplates)},
	E2BTemplateUpload:  {rule: need(auth.ScopeTemplates), action: "e2b PUT /templates/{templateID}/files/{hash}"},
	E2BTemplateBuild:   {rule: need(auth.ScopeTemplates), action: "e2b POST /v2/templates/{templateID}/builds/{buildID}"},
	E2BTemplateStatus:  {rule: need(auth.ScopeTemplates)},
	E2BTemplateTag:     {rule: need(auth.ScopeTemplates), action: "e2b POST /templates/tags"},
	E2BTemplateUntag:   {rule: need(auth.ScopeTemplates), action: "e2b DELETE /templates/tags"},

	// The agent-sandbox door acts for a namespace with the key its
	// Secret holds: that key must be able to create and delete
	// sandboxes, as REST's create is. Its creates and deletes are
	// REST's operations, recorded as REST's; a claim adopting a warm
	// member is recorded under the door's name.
	AgentSandboxAccount: {rule: need(write)},
	AgentSandboxClaim:   {rule: need(write), action: "agent-sandbox.claim"},
}

// Ops lists every operation, sorted.
func Ops() []Op {
	out := make([]Op, 0, len(catalogue))
	for op := range catalogue {
		out = append(out, op)
	}
	slices.Sort(out)
	return out
}

// Known reports whether op is in the catalogue.
func (op Op) Known() bool { _, ok := catalogue[op]; return ok }

// Rule is what op requires of its caller (the zero, invalid Rule for an
// unknown op), for the documents generated from it and for tests.
func (op Op) Rule() auth.Rule {
	r := catalogue[op].rule
	r.Scopes = slices.Clone(r.Scopes)
	return r
}

// Action is op's audit action, "" when op is not recorded.
func (op Op) Action() string { return catalogue[op].action }

// Audited reports whether op is recorded in the audit log.
func (op Op) Audited() bool { return catalogue[op].action != "" }

// Authorize decides whether p may do op on sandbox ("" when op names
// none): the one decision every door asks for. A lease or port token also
// needs its sandbox to be live, which the door's authentication checks
// against the store (server.Credential).
func Authorize(p auth.Principal, op Op, sandbox string) error {
	e, ok := catalogue[op]
	if !ok {
		return errdefs.Permission("operation %q is not in the catalogue", op)
	}
	return auth.Authorize(p, e.rule, sandbox)
}

// Allowed reports whether p may do op at all (on its own sandbox, for a
// lease): what a door asks before it hands out something that would let
// p do it, such as a token.
func Allowed(p auth.Principal, op Op) bool { return Authorize(p, op, p.Sandbox) == nil }

// DataPlane reports whether p may reach any of a sandbox's data plane
// (commands, files, ports): the E2B door hands a reader without any of
// them no envd token.
func DataPlane(p auth.Principal) bool {
	return Allowed(p, Exec) || Allowed(p, FilesRead) || Allowed(p, Ports)
}

// MaxFileWriteBytes is the most one file write carries, whichever door
// it came through (REST's PUT of a file, each file of the E2B door's
// upload, MCP's file_write, which is REST's): past it the write is
// refused with 413 too_large (FileWriteBody), never cut short or judged
// by a door's own bound. It is the agent's own cap of one file too.
const MaxFileWriteBytes = 1 << 30

// FileWriteBody is the body of one file write as the gate bounds it:
// declared (its Content-Length, -1 when unknown) past MaxFileWriteBytes
// is refused at once; otherwise the reader fails with 413 too_large at
// the first byte past it, so the write ends refused and the file is not
// kept (a write is atomic: the agent renames it into place at its end).
func FileWriteBody(r io.Reader, declared int64) (io.Reader, error) {
	if declared > MaxFileWriteBytes {
		return nil, errTooLarge(declared)
	}
	return &boundedBody{r: r, left: MaxFileWriteBytes}, nil
}

func errTooLarge(n int64) error {
	if n < 0 {
		return errdefs.TooLarge("a file write carries at most %d bytes", MaxFileWriteBytes)
	}
	return errdefs.TooLarge("a file write carries at most %d bytes, got %d", MaxFileWriteBytes, n)
}

// boundedBody reads r, failing once more than left bytes came.
type boundedBody struct {
	r    io.Reader
	left int64
}

func (b *boundedBody) Read(p []byte) (int, error) {
	if b.left < 0 {
		return 0, errTooLarge(-1)
	}
	if int64(len(p)) > b.left+1 {
		p = p[:b.left+1]
	}
	n, err := b.r.Read(p)
	b.left -= int64(n)
	if b.left < 0 {
		return 0, errTooLarge(-1)
	}
	return n, err
}

// Target is what a door's call names: a sandbox, and a port of it for
// access.Ports.
type Target struct {
	Sandbox string
	Port    int
}

// Port access without a credential: a door asks PublicPort, never the
// sandbox's spec itself.

// Door names a door whose port access differs in what a sandbox made
// public (the E2B door also serves E2B's public traffic).
type Door int

// The doors PublicPort knows.
const (
	DoorREST Door = iota
	DoorE2B
)

// PublicPort reports whether port of sb is open to a caller without a
// credential through door: a port the sandbox lists as public
// (Spec.PublicPorts) while it exists, through every door; and, through
// the E2B door, every port of a sandbox made with E2B's public traffic
// (Spec.AllPortsPublic) while it runs or waits paused for its traffic to
// wake it (auto-resume). berth's own proxy keeps to PublicPorts.
func PublicPort(sb *sandbox.Sandbox, port int, door Door) bool {
	if sb == nil {
		return false
	}
	if sb.State.Live() && slices.Contains(sb.Spec.PublicPorts, port) {
		return true
	}
	return door == DoorE2B && sb.Spec.AllPortsPublic &&
		(sb.State == sandbox.StateRunning || sb.State == sandbox.StatePaused && sb.Spec.Policy.AutoResume)
}

// Call is one operation asked by a caller: who, what, on which target
// (the sandbox id, or the name of the object acted on), from where.
type Call struct {
	P         auth.Principal
	Op        Op
	Sandbox   string // the sandbox the decision is about ("" for none)
	Target    string // the audit record's target (defaults to Sandbox)
	Source    string // the caller's address
	RequestID string
}

// Validator is a request type with one rule set, which every door's
// request of that type meets (engine.ExecRequest, procs.StartRequest).
type Validator interface{ Validate() error }

// Check is the gate's validation of an operation's request (nil: the
// operation has none): its type's one Validate. It is the only place any
// door's request is validated: Gate.Begin calls it on what a door hands
// the gate, REST's strict decoding (internal/server/input.Decode) hands
// every body it decodes to it. TestNoValidationOutsideGate fails when a
// door calls a Validate itself.
func Check(req Validator) error {
	if req == nil {
		return nil
	}
	return req.Validate()
}

// Gate is the entry point every door calls: decision, validation, audit.
type Gate struct {
	Audit *audit.Log // nil: nothing is recorded
	Log   *slog.Logger
}

// Record is a begun call: its outcome completes the audit record (if the
// operation is recorded). The zero Record completes nothing.
type Record struct {
	op  Op
	rec *audit.Op
}

// Begin authorizes c, validates req (nil: the operation has no request,
// or the door's handler decodes it and calls the same Validate), and
// begins the audit record before the call takes effect: a call whose
// record cannot be written is refused (503), so nothing happens
// unrecorded. A refusal leaves no record; invalid input is recorded as
// an error ("error 400") once the record is begun, as REST's handlers
// record it.
func (g *Gate) Begin(ctx context.Context, c Call, req Validator) (*Record, error) {
	return g.BeginTranslated(ctx, c, func() (Validator, error) { return req, nil })
}

// Translate is a door's translation of its wire request into the
// operation's request type (a nil Validator: the operation has none).
// The gate runs it once the call is decided and its record begun, so a
// request the door cannot translate (an empty command, a bad user name
// or working directory) is refused with the same record as REST's
// refusal of the same request ("error 400"), never before the gate.
type Translate func() (Validator, error)

// BeginTranslated is Begin with the request translated by tr inside the
// gate: decision, record, translation, validation.
func (g *Gate) BeginTranslated(ctx context.Context, c Call, tr Translate) (*Record, error) {
	if err := Authorize(c.P, c.Op, c.Sandbox); err != nil {
		return nil, err
	}
	r := &Record{op: c.Op}
	if g != nil && g.Audit != nil && c.Op.Audited() {
		target := c.Target
		if target == "" {
			target = c.Sandbox
		}
		op, err := g.Audit.Begin(ctx, audit.Entry{Tenant: c.P.Tenant, Actor: c.P.Actor, Action: c.Op.Action(),
			Target: target, Source: c.Source, RequestID: c.RequestID})
		if err != nil {
			if g.Log != nil {
				g.Log.Error("audit: refusing a call that cannot be recorded", "op", c.Op, "err", err)
			}
			return nil, errdefs.Unavailable("the audit log cannot be written; nothing was done")
		}
		r.rec = op
	}
	req, err := tr()
	if err == nil {
		err = Check(req)
	}
	if err != nil {
		r.Done(err)
		return nil, err
	}
	return r, nil
}

// Do is Begin, fn, and the outcome of fn's error.
func (g *Gate) Do(ctx context.Context, c Call, req Validator, fn func() error) error {
	r, err := g.Begin(ctx, c, req)
	if err != nil {
		return err
	}
	err = fn()
	r.Done(err)
	return err
}

// DoTranslated is BeginTranslated, fn, and the outcome of fn's error.
func (g *Gate) DoTranslated(ctx context.Context, c Call, tr Translate, fn func() error) error {
	r, err := g.BeginTranslated(ctx, c, tr)
	if err != nil {
		return err
	}
	err = fn()
	r.Done(err)
	return err
}

// Done completes the record with err's outcome: "ok" and the status the
// operation answers through REST, or "error" and err's status.
func (r *Record) Done(err error) {
	if r == nil {
		return
	}
	if err != nil {
		_, status := errdefs.Code(err)
		if status == 0 {
			status = http.StatusInternalServerError
		}
		r.Complete("error " + strconv.Itoa(status))
		return
	}
	if ok := catalogue[r.op].ok; ok != 0 {
		r.Complete("ok " + strconv.Itoa(ok))
		return
	}
	r.Complete("ok")
}

// Status completes the record with the status the door answered (REST's
// own: "ok 201", "error 404"; 0: "unknown").
func (r *Record) Status(status int) {
	switch {
	case status == 0:
		r.Complete("unknown")
	case status < 400:
		r.Complete("ok " + strconv.Itoa(status))
	default:
		r.Complete("error " + strconv.Itoa(status))
	}
}

// Complete completes the record with result as it is.
func (r *Record) Complete(result string) {
	if r == nil || r.rec == nil {
		return
	}
	r.rec.Complete(result)
}
