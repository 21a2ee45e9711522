package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/client"
	"github.com/berth-sh/berth/internal/auth"
)

// The door-conformance suite (#30): every operation through every door
// (REST with the Go client, the E2B door as its SDK speaks it, MCP over
// HTTP with the Go MCP SDK, `berth mcp` over stdio), for every principal
// that matters, must get the same decision and leave the same audit row.
// A door may only translate. A new door is one doorDriver; a new
// operation one name in doorOps and a case in each driver's do; a new
// principal one doorPrincipal. What a door still decides differently is
// in doorOverrides, each marked "divergence:" with why.

// Decision classes.
const (
	dOK        = "ok"
	dUnauth    = "unauthenticated"
	dForbidden = "forbidden"
	dNotFound  = "not found"
	dInvalid   = "invalid"
)

// doorOps, in the order each principal runs them on each door: kill last,
// pause before resume (the shared sandbox ends running). bad-exec and
// bad-process carry an ESC in an env name, which every door refuses as
// invalid with REST's validator, once the caller may run commands;
// empty-exec and empty-process name no command, which a door refuses as
// it translates (E2B's empty cmd, MCP's "give cmd or shell"); MCP's
// base64-write's content is not base64. The control calls' bad-* carry
// what REST's edge rules refuse (an ESC in a template, snapshot name or
// egress rule; 65 children; a timeout past 30 days), which the E2B door
// translates into REST's (or the engine's) request type for the gate to
// validate; bad-connect's timeout is not positive, which the E2B door
// refuses as it translates. timeout and connect are the E2B door's alone.
// schema-create, schema-exec and schema-process carry a body no decoder
// of the door takes (a string for a boolean, a number for a string, a
// string for a list): REST's strict decoder, the E2B door's JSON decode
// and connect-go's refuse them, the MCP SDK's schema check refuses the
// tool's arguments before the tool runs; the refusal is the gate's
// (mcp.Options.Refuse, the E2B door's rpcRefusals), with its record.
// Every invalid call leaves REST's record of its refusal ("error 400").
var doorOps = []string{"create", "get", "list", "exec", "bad-exec", "empty-exec", "write", "bad-write", "base64-write", "read",
	"process", "bad-process", "empty-process", "port", "bad-create", "schema-create", "schema-exec", "schema-process", "bad-fork", "bad-snapshot", "bad-network",
	"timeout", "bad-timeout", "connect", "bad-connect", "pause", "resume", "kill"}

// invalidOp is the operation an invalid call (bad-*, empty-*) is a call
// of, and whether op is one.
func invalidOp(op string) (string, bool) {
	for _, pre := range []string{"bad-", "empty-", "base64-", "schema-"} {
		if base, ok := strings.CutPrefix(op, pre); ok {
			return base, true
		}
	}
	return op, false
}

// doorPrincipal is a caller: a key of a tenant with scopes, or a token of
// the shared sandbox (its lease, a port token of its port 8000).
type doorPrincipal struct {
	name   string
	tenant string
	scopes []auth.Scope // nil: a token of the shared sandbox (doorFixture.keys)
	// want is REST's decision of each operation (absent: ok).
	want map[string]string
}

func memberWithout(s auth.Scope) []auth.Scope {
	m, _ := auth.RoleScopes(auth.RoleMember)
	return slices.DeleteFunc(slices.Clone(m), func(x auth.Scope) bool { return x == s })
}

var (
	memberScopes, _ = auth.RoleScopes(auth.RoleMember)
	viewerScopes, _ = auth.RoleScopes(auth.RoleViewer)
)

func allBut(class string, except ...string) map[string]string {
	m := map[string]string{}
	for _, op := range doorOps {
		if !slices.Contains(except, op) {
			m[op] = class
		}
	}
	return m
}

func with(m map[string]string, class string, ops ...string) map[string]string {
	for _, op := range ops {
		m[op] = class
	}
	return m
}

var doorPrincipals = []doorPrincipal{
	{name: "admin", tenant: "acme", scopes: []auth.Scope{auth.ScopeAdmin}},
	{name: "member", tenant: "acme", scopes: memberScopes},
	{name: "viewer", tenant: "acme", scopes: viewerScopes, want: allBut(dForbidden, "get", "list")},
	{name: "no-exec", tenant: "acme", scopes: memberWithout(auth.ScopeExec),
		want: map[string]string{"exec": dForbidden, "process": dForbidden}},
	{name: "no-files", tenant: "acme", scopes: memberWithout(auth.ScopeFiles),
		want: map[string]string{"write": dForbidden, "read": dForbidden}},
	// Another tenant's member: its own create and list pass (the list
	// without acme's sandbox); acme's sandbox does not exist for it.
	// Input is validated before the sandbox is looked up, so it hears
	// invalid for a bad call whatever the id (no oracle: the same answer
	// for an id that names nothing).
	{name: "stranger", tenant: "other", scopes: memberScopes, want: with(allBut(dNotFound, "create", "list"), dInvalid,
		"bad-exec", "bad-process", "bad-write", "empty-exec", "empty-process", "base64-write",
		"bad-create", "bad-fork", "bad-snapshot", "bad-network", "bad-timeout", "bad-connect", "schema-create", "schema-exec", "schema-process")},
	// The shared sandbox's create-time lease: its own sandbox's data
	// plane, nothing of the control plane.
	{name: "lease", tenant: "acme", want: map[string]string{"create": dForbidden, "list": dForbidden,
		"pause": dForbidden, "resume": dForbidden, "kill": dForbidden, "fork": dForbidden, "snapshot": dForbidden,
		"network": dForbidden, "timeout": dForbidden, "connect": dForbidden}},
	// The lease of another tenant's sandbox, naming acme's: no right on
	// it.
	{name: "other-lease", tenant: "other", want: allBut(dForbidden)},
	// A port token of the shared sandbox's port 8000: that port, and it
	// is no credential for anything else.
	{name: "port-token", tenant: "acme", want: allBut(dUnauth, "port")},
}

// doorOverrides are the decisions a door makes that differ from REST's,
// each with why; "door/principal/op". Every decision is the access
// layer's (internal/access): what differs here is which operation a door's
// call is, or the order its protocol forces, never a rule of the door's.
// (A port token opens its port through the E2B door too, as through
// berth's proxy: one port-access operation.)
var doorOverrides = map[string]string{
	// E2B's get is not REST's: its answer carries an envdAccessToken
	// derived from the caller (access.SandboxCredentials), and a lease
	// mints no credential, so a lease reading its own sandbox there is
	// refused where REST's plain read lets it.
	// divergence: a different operation (one that hands out a token).
	"e2b/lease/get": dForbidden,
	// Another tenant's key cannot send a bad call to envd at all: the
	// control API refuses it the sandbox (404) before any envd token,
	// where REST validates the input first (invalid).
	// divergence: the order of checks, not the decision (both refuse).
	"e2b/stranger/bad-exec": dNotFound, "e2b/stranger/bad-process": dNotFound, "e2b/stranger/bad-write": dNotFound,
	"e2b/stranger/empty-exec": dNotFound, "e2b/stranger/empty-process": dNotFound, "e2b/stranger/schema-process": dNotFound,
}

// doorNA: operations a door does not have.
func doorNA(door, principal, op string) bool {
	base, _ := invalidOp(op)
	if door != "e2b" && (base == "timeout" || base == "connect") {
		// E2B's timeout and connect are no operation of REST's or MCP's.
		return true
	}
	if strings.HasPrefix(op, "schema-") {
		// A refusal by the MCP SDK's schema check: the daemon's /v1/mcp
		// puts it through the gate; `berth mcp` is a client of REST,
		// whose refusals of what it never sends stay its own. The E2B
		// door runs a command as a process start only.
		return door == "mcp-stdio" || door == "e2b" && op == "schema-exec"
	}
	switch door {
	case "mcp", "mcp-stdio":
		// MCP has no pause, resume, network update or port read
		// (expose_port only names the URL).
		return op == "pause" || op == "resume" || op == "port" || op == "bad-network"
	}
	// Only MCP's file_write takes base64 content.
	return op == "base64-write"
}

// auditAction is the audit row's action of a mutating operation through a
// door ("" for reads: no row): the operation's (internal/access), REST's
// route for every operation REST has. The E2B door's pause and resume are
// operations of their own (a pause lifts the timeout too; a resume wakes
// and extends it), recorded under its routes; its only way to run a
// command is a process start.
func auditAction(door, op string) string {
	rest := map[string]string{
		"create": "POST /v1/sandboxes", "exec": "POST /v1/sandboxes/{id}/exec",
		"write": "PUT /v1/sandboxes/{id}/files", "process": "POST /v1/sandboxes/{id}/processes",
		"pause": "POST /v1/sandboxes/{id}/pause", "resume": "POST /v1/sandboxes/{id}/resume",
		"kill": "DELETE /v1/sandboxes/{id}", "fork": "POST /v1/sandboxes/{id}/fork",
		"snapshot": "POST /v1/sandboxes/{id}/snapshots", "network": "POST /v1/sandboxes/{id}/network",
		"timeout": "e2b POST /sandboxes/{sandboxID}/timeout", "connect": "e2b POST /sandboxes/{sandboxID}/connect",
	}
	if door == "e2b" {
		switch op {
		case "exec":
			return rest["process"]
		case "pause":
			return "e2b POST /sandboxes/{sandboxID}/pause"
		case "resume":
			return "e2b POST /sandboxes/{sandboxID}/resume"
		}
	}
	return rest[op]
}

// doorFixture is what every driver works on.
type doorFixture struct {
	t      *testing.T
	d      *daemon
	addr   string // --insecure-listen
	e2b    string // the E2B door's URL
	shared string // acme's sandbox every principal reaches for
	lease  string // its create-time lease token
	keys   map[string]string
	actors map[string]string
	// created: sandboxes the rows made, with the tenant admin key that
	// removes them at the end.
	created map[string]string
}

// callResult is one call's decision, and the sandbox a create made.
type callResult struct {
	class   string
	detail  string
	created string
}

// doorSession is one principal on one door.
type doorSession interface {
	do(op, target string) callResult
	close()
}

type doorDriver struct {
	name string
	open func(f *doorFixture, p doorPrincipal) doorSession
}

var doorDrivers = []doorDriver{
	{"rest", openREST},
	{"e2b", openE2B},
	{"mcp", openMCP},
	{"mcp-stdio", openMCPStdio},
}

// TestDoorConformance runs the table.
func TestDoorConformance(t *testing.T) {
	parallel(t)
	f := newDoorFixture(t)
	for _, drv := range doorDrivers {
		for _, p := range doorPrincipals {
			t.Run(drv.name+"/"+p.name, func(t *testing.T) {
				f.run(t, drv, p)
			})
		}
	}
	t.Run("e2b/revoked-reader", f.revokedReader)
}

// revokedReader: the envd token the E2B door shows a key that did not
// create the sandbox is that key's own, and ends with it. (It used to be
// the creator's create-time lease, which ran commands after the reader's
// key was revoked.)
func (f *doorFixture) revokedReader(t *testing.T) {
	key, actor := doorKey(t, f.d, "acme", memberScopes...)
	s := openE2B(f, doorPrincipal{name: "reader", tenant: "acme", scopes: memberScopes}).(*e2bSession)
	s.key = key
	st, body := s.raw("GET", "/sandboxes/"+f.shared, "", map[string]string{"X-API-Key": key})
	var out struct{ EnvdAccessToken string }
	if st != 200 || json.Unmarshal([]byte(body), &out) != nil || out.EnvdAccessToken == "" {
		t.Fatalf("the reader's get: %d %s", st, body)
	}
	if out.EnvdAccessToken == f.lease {
		t.Errorf("the reader was shown the creator's create-time lease")
	}
	s.envd = out.EnvdAccessToken
	if r := s.do("exec", f.shared); r.class != dOK {
		t.Fatalf("exec with the reader's token: %+v", r)
	}
	c := f.restClient(f.keys["admin@acme"])
	defer c.Close()
	if _, err := c.RevokeAPIKey(context.Background(), auth.PrefixOf(strings.TrimPrefix(actor, "key:"))); err != nil {
		t.Fatal(err)
	}
	if r := s.do("exec", f.shared); r.class != dUnauth {
		t.Errorf("exec with the revoked reader's token: %+v, want %s", r, dUnauth)
	}
}

func newDoorFixture(t *testing.T) *doorFixture {
	t.Helper()
	addr := freeAddr(t)
	d, e2bURL, _ := e2bDaemon(t, "--insecure-listen", addr)
	f := &doorFixture{t: t, d: d, addr: addr, e2b: e2bURL, keys: map[string]string{}, actors: map[string]string{},
		created: map[string]string{}}
	for _, tn := range []string{"acme", "other"} {
		f.keys["admin@"+tn], f.actors["admin@"+tn] = doorKey(t, d, tn, auth.ScopeAdmin)
	}
	for _, p := range doorPrincipals {
		if p.scopes != nil {
			f.keys[p.name], f.actors[p.name] = doorKey(t, d, p.tenant, p.scopes...)
		}
	}
	admin := f.restClient(f.keys["admin@acme"])
	sb, err := admin.CreateSandbox(context.Background(), api.CreateSandboxRequest{})
	if err != nil {
		t.Fatal(err)
	}
	f.shared, f.lease = sb.ID, sb.LeaseToken
	f.created[sb.ID] = f.keys["admin@acme"]
	f.actors["lease"] = "lease:" + sb.ID
	f.keys["lease"] = sb.LeaseToken
	if f.lease == "" {
		t.Fatal("the create answered no lease token")
	}
	pt, err := admin.CreatePortToken(context.Background(), sb.ID, 8000, api.CreatePortTokenRequest{})
	if err != nil {
		t.Fatal(err)
	}
	f.keys["port-token"] = pt.Token
	oc := f.restClient(f.keys["admin@other"])
	defer oc.Close()
	osb, err := oc.CreateSandbox(context.Background(), api.CreateSandboxRequest{})
	if err != nil {
		t.Fatal(err)
	}
	f.created[osb.ID] = f.keys["admin@other"]
	f.keys["other-lease"], f.actors["other-lease"] = osb.LeaseToken, "lease:"+osb.ID
	// A web server on port 8000 for the port reads.
	if _, err := admin.StartProcess(context.Background(), sb.ID, api.StartProcessRequest{ExecRequest: api.ExecRequest{Cmd: []string{"sh", "-c",
		"mkdir -p /tmp/www && cd /tmp/www && echo served > index.html && exec python3 -m http.server 8000"}}}); err != nil {
		t.Fatal(err)
	}
	if err := waitPort(admin, sb.ID); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for id, key := range f.created {
			c := f.restClient(key)
			if _, err := c.DeleteSandbox(context.Background(), id, true); err != nil && !client.IsNotFound(err) {
				t.Errorf("cleanup: deleting %s: %v", id, err)
			}
			c.Close()
		}
	})
	return f
}

// waitPort waits until the shared sandbox's web server answers inside it.
func waitPort(c *client.Client, id string) error {
	deadline := time.Now().Add(30 * time.Second)
	for {
		var out strings.Builder
		ex, err := c.Exec(context.Background(), id, api.ExecRequest{Cmd: []string{"python3", "-c",
			"import urllib.request;print(urllib.request.urlopen('http://127.0.0.1:8000/').read().decode())"}}, &out, io.Discard)
		if err == nil && ex.Code == 0 && strings.Contains(out.String(), "served") {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the web server in %s does not answer: %v %+v", id, err, ex)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// doorKey adds a key of tenant with scopes to the store; it returns the
// key and its audit actor.
func doorKey(t *testing.T, d *daemon, tenant string, scopes ...auth.Scope) (string, string) {
	t.Helper()
	key, id := tenantKeyID(t, d, tenant, scopes...)
	return key, "key:" + id
}

func (f *doorFixture) restClient(key string) *client.Client {
	c, err := client.New("http://"+f.addr, key)
	if err != nil {
		f.t.Fatal(err)
	}
	return c
}

// auditSince returns tenant's audit rows after seq but the MCP
// transport's own (its JSON-RPC POSTs: not an operation), once each has
// its outcome, and the tenant's last seq.
func (f *doorFixture) auditSince(t *testing.T, tenant string, seq int64) ([]api.AuditEntry, int64) {
	t.Helper()
	c := f.restClient(f.keys["admin@"+tenant])
	defer c.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		es, err := c.ListAudit(context.Background(), client.AuditFilter{Since: time.Now().Add(-time.Hour)})
		if err != nil {
			t.Fatalf("reading the audit log: %v", err)
		}
		var out []api.AuditEntry
		last, pending := seq, false
		for _, e := range es {
			last = max(last, e.Seq)
			if e.Seq <= seq || strings.HasSuffix(e.Action, " /v1/mcp") {
				continue
			}
			pending = pending || e.CompletedAt.IsZero()
			out = append(out, e)
		}
		// An outcome is written as the handler returns, which may be
		// just after the caller read the answer.
		if !pending || time.Now().After(deadline) {
			return out, last
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (f *doorFixture) run(t *testing.T, drv doorDriver, p doorPrincipal) {
	s := drv.open(f, p)
	defer s.close()
	_, seq := f.auditSince(t, p.tenant, 0)
	var own string // the sandbox this row created, which its kill removes
	for _, op := range doorOps {
		want := dOK
		base, invalid := invalidOp(op)
		if invalid {
			// Input is validated after the decision: who may not run
			// commands hears that, not what is wrong with them.
			want = dInvalid
			if w, ok := p.want[base]; ok {
				want = w
			}
		}
		if w, ok := p.want[op]; ok {
			want = w
		}
		if w, ok := doorOverrides[drv.name+"/"+p.name+"/"+op]; ok {
			want = w
		}
		if drv.name == "mcp" && p.name == "lease" {
			// /v1/mcp takes API keys only: the lease is refused at the
			// session, before any tool.
			want = dForbidden
		}
		if doorNA(drv.name, p.name, op) {
			continue
		}
		target := f.shared
		if op == "kill" && own != "" && p.tenant == "acme" {
			target = own
		}
		r := s.do(op, target)
		if r.created != "" {
			f.created[r.created] = f.keys["admin@"+p.tenant]
			own = r.created
		}
		if r.class != want {
			t.Errorf("%s %s %s: %s (%s), want %s", drv.name, p.name, op, r.class, r.detail, want)
		}
		// The audit: one row for an allowed mutating call, of the
		// operation's action, the caller and its tenant; none that says
		// ok for any other call. An invalid call's row is REST's
		// refusal's ("error 400"), whichever door it came through and
		// whether the door refused it as it translated or as it
		// validated.
		rows, last := f.auditSince(t, p.tenant, seq)
		seq = max(seq, last)
		action := auditAction(drv.name, base)
		wantRows := 0
		if (r.class == dOK || r.class == dInvalid) && action != "" {
			wantRows = 1
		}
		result := "ok"
		if r.class == dInvalid {
			result = "error 400"
		}
		var oks []api.AuditEntry
		for _, e := range rows {
			if strings.HasPrefix(e.Result, result) {
				oks = append(oks, e)
			}
		}
		actor := s.(actorer).auditActor(base)
		if len(oks) != wantRows {
			t.Errorf("%s %s %s: audit rows %+v, want %d of %q", drv.name, p.name, op, oks, wantRows, action)
			continue
		}
		for _, e := range oks {
			if e.Action != action || e.Tenant != p.tenant || e.Actor != actor {
				t.Errorf("%s %s %s: audit row %+v, want action %q tenant %q actor %q", drv.name, p.name, op, e,
					action, p.tenant, actor)
			}
		}
	}
}

// actorer names the actor a door's calls are recorded under.
type actorer interface{ auditActor(op string) string }

// classOf is the decision of an HTTP status.
func classOf(status int) string {
	switch {
	case status >= 200 && status < 300:
		return dOK
	case status == 401:
		return dUnauth
	case status == 403:
		return dForbidden
	case status == 404:
		return dNotFound
	case status == 400:
		return dInvalid
	}
	return fmt.Sprintf("status %d", status)
}

// ---- REST (the Go client) ----

type restSession struct {
	f     *doorFixture
	p     doorPrincipal
	c     *client.Client
	actor string
}

func openREST(f *doorFixture, p doorPrincipal) doorSession {
	return &restSession{f: f, p: p, c: f.restClient(f.keys[p.name]), actor: f.actors[p.name]}
}

func (s *restSession) close()                   { s.c.Close() }
func (s *restSession) auditActor(string) string { return s.actor }

func restClass(err error) callResult {
	if err == nil {
		return callResult{class: dOK}
	}
	var e *client.Error
	if errors.As(err, &e) {
		return callResult{class: classOf(e.Status), detail: e.Message}
	}
	return callResult{class: "error", detail: err.Error()}
}

func (s *restSession) do(op, id string) callResult {
	ctx := context.Background()
	switch op {
	case "create":
		sb, err := s.c.CreateSandbox(ctx, api.CreateSandboxRequest{})
		r := restClass(err)
		if err == nil {
			r.created = sb.ID
		}
		return r
	case "get":
		_, err := s.c.GetSandbox(ctx, id)
		return restClass(err)
	case "list":
		sbs, err := s.c.ListSandboxes(ctx, false)
		r := restClass(err)
		if err == nil && slices.ContainsFunc(sbs, func(sb api.Sandbox) bool { return sb.ID == id }) != (s.p.tenant == "acme") {
			r = callResult{class: "wrong list", detail: fmt.Sprint(sbs)}
		}
		return r
	case "exec":
		ex, err := s.c.Exec(ctx, id, api.ExecRequest{Cmd: []string{"true"}}, io.Discard, io.Discard)
		if err == nil && ex.Code != 0 {
			return callResult{class: "exit", detail: fmt.Sprint(ex)}
		}
		return restClass(err)
	case "bad-exec":
		_, err := s.c.Exec(ctx, id, api.ExecRequest{Cmd: []string{"true"}, Env: badEnv}, io.Discard, io.Discard)
		return restClass(err)
	case "bad-process":
		_, err := s.c.StartProcess(ctx, id, api.StartProcessRequest{ExecRequest: api.ExecRequest{Cmd: []string{"true"}, Env: badEnv}})
		return restClass(err)
	case "empty-exec":
		_, err := s.c.Exec(ctx, id, api.ExecRequest{}, io.Discard, io.Discard)
		return restClass(err)
	case "empty-process":
		_, err := s.c.StartProcess(ctx, id, api.StartProcessRequest{})
		return restClass(err)
	case "write":
		_, err := s.c.WriteFile(ctx, id, "/tmp/doors.txt", 0o644, strings.NewReader("doors"))
		return restClass(err)
	case "bad-write":
		_, err := s.c.WriteFile(ctx, id, badPath, 0o644, strings.NewReader("doors"))
		return restClass(err)
	case "read":
		_, _, err := s.c.ReadFile(ctx, id, "/tmp/www/index.html", io.Discard)
		return restClass(err)
	case "process":
		_, err := s.c.StartProcess(ctx, id, api.StartProcessRequest{ExecRequest: api.ExecRequest{Cmd: []string{"true"}}})
		return restClass(err)
	case "port":
		req, _ := http.NewRequest("GET", "http://"+s.f.addr+"/v1/sandboxes/"+id+"/ports/8000/", nil)
		if s.p.name == "port-token" {
			// The path-routed proxy takes a port token in its header.
			req.Header.Set("X-Berth-Port-Token", s.f.keys[s.p.name])
		} else {
			req.Header.Set("Authorization", "Bearer "+s.f.keys[s.p.name])
		}
		return httpClass(req, "served")
	case "bad-create":
		sb, err := s.c.CreateSandbox(ctx, api.CreateSandboxRequest{Template: badText})
		r := restClass(err)
		if err == nil {
			r.created = sb.ID
		}
		return r
	case "schema-create":
		return s.raw("POST", "/v1/sandboxes", `{"persistent":"yes"}`)
	case "schema-exec":
		return s.raw("POST", "/v1/sandboxes/"+id+"/exec", `{"cmd":5}`)
	case "schema-process":
		return s.raw("POST", "/v1/sandboxes/"+id+"/processes", `{"cmd":5}`)
	case "bad-fork":
		_, err := s.c.Fork(ctx, id, api.ForkRequest{Count: 65})
		return restClass(err)
	case "bad-snapshot":
		_, err := s.c.CreateSnapshot(ctx, id, api.CreateSnapshotRequest{Name: badText})
		return restClass(err)
	case "bad-network":
		_, err := s.c.UpdateNetwork(ctx, id, api.NetworkRulesRequest{Allow: []string{badText}})
		return restClass(err)
	case "pause":
		_, err := s.c.Pause(ctx, id)
		return restClass(err)
	case "resume":
		_, err := s.c.Resume(ctx, id)
		return restClass(err)
	case "kill":
		_, err := s.c.DeleteSandbox(ctx, id, true)
		return restClass(err)
	}
	panic("no operation " + op)
}

// raw sends a JSON body as it is, with the principal's credential.
func (s *restSession) raw(method, path, body string) callResult {
	req, err := http.NewRequest(method, "http://"+s.f.addr+path, strings.NewReader(body))
	if err != nil {
		s.f.t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+s.f.keys[s.p.name])
	req.Header.Set("Content-Type", "application/json")
	return httpClass(req, "")
}

// badEnv is an environment every door must refuse: an ESC in a name;
// badPath a file path (a NUL in it); badText a name or rule (an ESC).
var (
	badEnv  = map[string]string{"A\x1bB": "1"}
	badPath = "/tmp/a\x00b"
	badText = "a\x1bb"
)

// httpClass sends req and classes its answer; a 2xx must contain want.
func httpClass(req *http.Request, want string) callResult {
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return callResult{class: "error", detail: err.Error()}
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	r := callResult{class: classOf(resp.StatusCode), detail: string(b)}
	if r.class == dOK && !strings.Contains(string(b), want) {
		r.class = "unexpected body"
	}
	return r
}

// ---- the E2B door (its control API and envd, as the SDK sends them) ----

type e2bSession struct {
	f     *doorFixture
	p     doorPrincipal
	key   string // X-API-Key
	envd  string // the envd access token of the shared sandbox
	actor string
	// noToken is the data plane's decision when the control API handed
	// no envd token: the door refused it there.
	noToken callResult
}

func openE2B(f *doorFixture, p doorPrincipal) doorSession {
	s := &e2bSession{f: f, p: p, actor: f.actors[p.name], key: f.keys[p.name]}
	if p.scopes == nil {
		// A token of the sandbox: it is what the data plane carries, and
		// what the control API is tried with (the SDK never sends it
		// there).
		s.envd = s.key
		return s
	}
	// The SDK's connect: the sandbox's envd token comes from the control
	// API, with what the key may have of it.
	st, body := s.raw("GET", "/sandboxes/"+f.shared, `{}`, map[string]string{"X-API-Key": s.key})
	var out struct{ EnvdAccessToken string }
	if st == 200 && json.Unmarshal([]byte(body), &out) == nil {
		s.envd = out.EnvdAccessToken
	}
	s.noToken = callResult{class: dForbidden, detail: "the control API handed no envd access token"}
	if st != 200 {
		// The door refused the sandbox itself (another tenant's: 404).
		s.noToken = callResult{class: classOf(st), detail: body}
	}
	return s
}

func (s *e2bSession) close() {}

// auditActor: control calls are the key's; envd's are the lease's.
// divergence: the E2B door's data plane is recorded under the envd
// token's lease ("lease:<id>"), not the key that obtained it.
func (s *e2bSession) auditActor(op string) string {
	switch op {
	case "exec", "write", "read", "process", "port":
		return "lease:" + s.f.shared
	}
	return s.actor
}

func (s *e2bSession) raw(method, path, body string, hdr map[string]string) (int, string) {
	req, err := http.NewRequest(method, s.f.e2b+path, strings.NewReader(body))
	if err != nil {
		s.f.t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	return resp.StatusCode, string(b)
}

func (s *e2bSession) control(method, path, body string) callResult {
	st, b := s.raw(method, path, body, map[string]string{"X-API-Key": s.key})
	return callResult{class: classOf(st), detail: b}
}

// envd calls carry the sandbox's envd token; a key that was handed none
// was refused the data plane by the door.
func (s *e2bSession) envdHdr(id string, port string) (map[string]string, bool) {
	if s.envd == "" {
		return nil, false
	}
	return map[string]string{"E2b-Sandbox-Id": id, "E2b-Sandbox-Port": port, "X-Access-Token": s.envd}, true
}

// connectClass classes a Connect streaming answer: its end-of-stream
// message's error code, if any.
func connectClass(st int, body string) callResult {
	if st != 200 {
		return callResult{class: classOf(st), detail: body}
	}
	for code, class := range map[string]string{`"unauthenticated"`: dUnauth, `"permission_denied"`: dForbidden,
		`"not_found"`: dNotFound, `"invalid_argument"`: dInvalid} {
		if strings.Contains(body, `"code":`+code) {
			return callResult{class: class, detail: body}
		}
	}
	if strings.Contains(body, `"error"`) {
		return callResult{class: "error", detail: body}
	}
	return callResult{class: dOK, detail: body}
}

func (s *e2bSession) do(op, id string) callResult {
	switch op {
	case "create":
		r := s.control("POST", "/v2/sandboxes", `{"templateID":"base","timeout":300}`)
		var out struct{ SandboxID string }
		if r.class == dOK && json.Unmarshal([]byte(r.detail), &out) == nil {
			r.created = out.SandboxID
		}
		return r
	case "get":
		return s.control("GET", "/sandboxes/"+id, "")
	case "list":
		r := s.control("GET", "/v2/sandboxes", "")
		if r.class == dOK && strings.Contains(r.detail, id) != (s.p.tenant == "acme") {
			r.class = "wrong list"
		}
		return r
	case "pause":
		return s.control("POST", "/sandboxes/"+id+"/pause", "{}")
	case "resume":
		return s.control("POST", "/sandboxes/"+id+"/resume", `{"timeout":300}`)
	case "kill":
		return s.control("DELETE", "/sandboxes/"+id, "")
	case "bad-create":
		r := s.control("POST", "/v2/sandboxes", `{"templateID":"a\u001bb","timeout":300}`)
		var out struct{ SandboxID string }
		if r.class == dOK && json.Unmarshal([]byte(r.detail), &out) == nil {
			r.created = out.SandboxID
		}
		return r
	case "schema-create":
		return s.control("POST", "/v2/sandboxes", `{"templateID":"base","timeout":"x"}`)
	case "bad-fork":
		return s.control("POST", "/sandboxes/"+id+"/fork", `{"count":65}`)
	case "bad-snapshot":
		return s.control("POST", "/sandboxes/"+id+"/snapshots", `{"name":"a\u001bb"}`)
	case "bad-network":
		return s.control("PUT", "/sandboxes/"+id+"/network", `{"allowOut":["a\u001bb"]}`)
	case "timeout":
		// A day: the shared sandbox outlives the suite.
		return s.control("POST", "/sandboxes/"+id+"/timeout", `{"timeout":86400}`)
	case "bad-timeout":
		return s.control("POST", "/sandboxes/"+id+"/timeout", `{"timeout":100000000}`)
	case "connect":
		return s.control("POST", "/sandboxes/"+id+"/connect", `{"timeout":600}`)
	case "bad-connect":
		return s.control("POST", "/sandboxes/"+id+"/connect", `{"timeout":-1}`)
	}
	hdr, ok := s.envdHdr(id, "49983")
	if !ok {
		return s.noToken
	}
	switch op {
	case "exec", "process", "bad-exec", "bad-process", "empty-exec", "empty-process", "schema-process":
		hdr["Content-Type"] = "application/connect+json"
		hdr["Connect-Protocol-Version"] = "1"
		proc := `{"process":{"cmd":"/bin/true"}}`
		switch {
		case strings.HasPrefix(op, "bad-"):
			proc = `{"process":{"cmd":"/bin/true","envs":{"A\u001bB":"1"}}}`
		case strings.HasPrefix(op, "empty-"):
			// Refused as the door translates it.
			proc = `{"process":{"cmd":""}}`
		case op == "schema-process":
			// Refused by connect-go's decoder, before the door.
			proc = `{"process":{"cmd":5}}`
		}
		st, body := s.raw("POST", "/process.Process/Start", connectEnvelope(proc), hdr)
		return connectClass(st, body)
	case "write", "bad-write":
		hdr["Content-Type"] = "application/octet-stream"
		path := "/tmp/doors.txt"
		if op == "bad-write" {
			path = badPath
		}
		st, body := s.raw("POST", "/files?path="+url.QueryEscape(path), "doors", hdr)
		return callResult{class: classOf(st), detail: body}
	case "read":
		st, body := s.raw("GET", "/files?path=/tmp/www/index.html", "", hdr)
		return callResult{class: classOf(st), detail: body}
	case "port":
		hdr["E2b-Sandbox-Port"] = "8000"
		req, _ := http.NewRequest("GET", s.f.e2b+"/", nil)
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		return httpClass(req, "served")
	}
	panic("no operation " + op)
}

// ---- MCP over HTTP (the Go MCP SDK) ----

type mcpSession struct {
	f       *doorFixture
	p       doorPrincipal
	cs      *mcp.ClientSession
	refused callResult // the session's own refusal, if any
	actor   string
}

// openMCPStdio is `berth mcp` over stdio, as an MCP client spawns it,
// reaching the daemon over TCP with the principal's token as its key.
// It is a REST client, so it takes what REST takes (a lease too).
func openMCPStdio(f *doorFixture, p doorPrincipal) doorSession {
	s := &mcpSession{f: f, p: p, actor: f.actors[p.name]}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.Command(berthBin, "mcp", "--host", "http://"+f.addr)
	cmd.Env = append(os.Environ(), "BERTH_API_KEY="+f.keys[p.name])
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "doors", Version: "1"}, nil).Connect(ctx,
		&mcp.CommandTransport{Command: cmd}, nil)
	if err != nil {
		s.refused = callResult{class: "error", detail: err.Error()}
		return s
	}
	s.cs = cs
	return s
}

func openMCP(f *doorFixture, p doorPrincipal) doorSession {
	s := &mcpSession{f: f, p: p, actor: f.actors[p.name]}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	hc := &http.Client{Transport: bearer{f.keys[p.name], http.DefaultTransport}}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "doors", Version: "1"}, nil).Connect(ctx,
		&mcp.StreamableClientTransport{Endpoint: "http://" + f.addr + "/v1/mcp", HTTPClient: hc, MaxRetries: -1}, nil)
	if err != nil {
		s.refused = mcpConnectClass(err)
		return s
	}
	s.cs = cs
	return s
}

// mcpConnectClass classes a refused session by the status the SDK quotes.
func mcpConnectClass(err error) callResult {
	msg := err.Error()
	switch {
	case strings.Contains(msg, "401") || strings.Contains(msg, "Unauthorized"):
		return callResult{class: dUnauth, detail: msg}
	case strings.Contains(msg, "403") || strings.Contains(msg, "Forbidden"):
		return callResult{class: dForbidden, detail: msg}
	}
	return callResult{class: "error", detail: msg}
}

func (s *mcpSession) close() {
	if s.cs != nil {
		s.cs.Close()
	}
}

func (s *mcpSession) auditActor(string) string { return s.actor }

func (s *mcpSession) call(name string, args map[string]any) (map[string]any, callResult) {
	if s.cs == nil {
		return nil, s.refused
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res, err := s.cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		return nil, callResult{class: "error", detail: err.Error()}
	}
	if res.IsError {
		var msg strings.Builder
		for _, c := range res.Content {
			if tc, ok := c.(*mcp.TextContent); ok {
				msg.WriteString(tc.Text)
			}
		}
		return nil, mcpToolClass(msg.String())
	}
	m, _ := res.StructuredContent.(map[string]any)
	return m, callResult{class: dOK}
}

// mcpToolClass classes a tool error by the API error code it starts with.
func mcpToolClass(msg string) callResult {
	for code, class := range map[string]string{"unauthenticated": dUnauth, "permission_denied": dForbidden,
		"not_found": dNotFound, "invalid_argument": dInvalid} {
		if strings.HasPrefix(msg, code+":") {
			return callResult{class: class, detail: msg}
		}
	}
	return callResult{class: "error", detail: msg}
}

func (s *mcpSession) do(op, id string) callResult {
	switch op {
	case "create":
		out, r := s.call("sandbox_create", map[string]any{"persistent": true})
		if r.class == dOK {
			sb, _ := out["sandbox"].(map[string]any)
			r.created, _ = sb["id"].(string)
		}
		return r
	case "get":
		_, r := s.call("sandbox_get", map[string]any{"id": id})
		return r
	case "list":
		out, r := s.call("sandbox_list", map[string]any{})
		if r.class == dOK {
			b, _ := json.Marshal(out)
			if strings.Contains(string(b), id) != (s.p.tenant == "acme") {
				r.class = "wrong list"
			}
		}
		return r
	case "exec":
		_, r := s.call("run_command", map[string]any{"id": id, "cmd": []string{"true"}})
		return r
	case "bad-exec":
		_, r := s.call("run_command", map[string]any{"id": id, "cmd": []string{"true"}, "env": badEnv})
		return r
	case "bad-process":
		_, r := s.call("process_start", map[string]any{"id": id, "cmd": []string{"true"}, "env": badEnv})
		return r
	case "empty-exec":
		_, r := s.call("run_command", map[string]any{"id": id})
		return r
	case "base64-write":
		_, r := s.call("file_write", map[string]any{"id": id, "path": "/tmp/doors.txt", "content": "!!", "encoding": "base64"})
		return r
	case "empty-process":
		_, r := s.call("process_start", map[string]any{"id": id})
		return r
	case "write":
		_, r := s.call("file_write", map[string]any{"id": id, "path": "/tmp/doors.txt", "content": "doors"})
		return r
	case "bad-write":
		_, r := s.call("file_write", map[string]any{"id": id, "path": badPath, "content": "doors"})
		return r
	case "read":
		_, r := s.call("file_read", map[string]any{"id": id, "path": "/tmp/www/index.html"})
		return r
	case "process":
		_, r := s.call("process_start", map[string]any{"id": id, "cmd": []string{"true"}})
		return r
	case "bad-create":
		out, r := s.call("sandbox_create", map[string]any{"template": badText})
		if r.class == dOK {
			sb, _ := out["sandbox"].(map[string]any)
			r.created, _ = sb["id"].(string)
		}
		return r
	case "schema-create":
		_, r := s.call("sandbox_create", map[string]any{"persistent": "yes"})
		return r
	case "schema-exec":
		_, r := s.call("run_command", map[string]any{"id": id, "cmd": "true"})
		return r
	case "schema-process":
		_, r := s.call("process_start", map[string]any{"id": id, "cmd": "true"})
		return r
	case "bad-fork":
		_, r := s.call("sandbox_fork", map[string]any{"id": id, "count": 65})
		return r
	case "bad-snapshot":
		_, r := s.call("snapshot_create", map[string]any{"id": id, "name": badText})
		return r
	case "kill":
		_, r := s.call("sandbox_delete", map[string]any{"id": id})
		return r
	}
	panic("no operation " + op)
}
