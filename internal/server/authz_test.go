package server

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/internal/access"
	"github.com/berth-sh/berth/internal/auth"
	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/internal/sandbox"
	"github.com/berth-sh/berth/internal/store"
	"github.com/berth-sh/berth/internal/store/sqlite"
)

// leaseRoutes is the fixed scope of a lease token, written out here on
// its own: every other route must refuse a lease.
var leaseRoutes = []string{
	"GET /v1/sandboxes/{id}",
	"GET /v1/sandboxes/{id}/events",
	"POST /v1/sandboxes/{id}/exec",
	"GET /v1/sandboxes/{id}/exec/ws",
	"GET /v1/sandboxes/{id}/files",
	"PUT /v1/sandboxes/{id}/files",
	"DELETE /v1/sandboxes/{id}/files",
	"GET /v1/sandboxes/{id}/files/stat",
	"GET /v1/sandboxes/{id}/files/list",
	"POST /v1/sandboxes/{id}/files/mkdir",
	"POST /v1/sandboxes/{id}/files/move",
	"GET /v1/sandboxes/{id}/files/watch",
	"POST /v1/sandboxes/{id}/export",
	"POST /v1/sandboxes/{id}/touch",
	// Background processes: exec's scope, so a lease's like exec.
	"POST /v1/sandboxes/{id}/processes",
	"GET /v1/sandboxes/{id}/processes",
	"GET /v1/sandboxes/{id}/processes/{pid}",
	"GET /v1/sandboxes/{id}/processes/{pid}/logs",
	"GET /v1/sandboxes/{id}/processes/{pid}/ws",
	"POST /v1/sandboxes/{id}/processes/{pid}/stdin",
	"POST /v1/sandboxes/{id}/processes/{pid}/signal",
	"POST /v1/sandboxes/{id}/processes/{pid}/kill",
	"POST /v1/sandboxes/{id}/processes/{pid}/wait",
	"/v1/sandboxes/{id}/ports/{port}/{path...}",
	"/v1/sandboxes/{id}/ports/{port}",
	HostPortPattern,
}

// anonymousRoutes need no credential at all; the port routes also when
// their port is public.
var anonymousRoutes = []string{"GET /healthz",
	// The web console's files and redirects, and its sign-in exchange,
	// whose code is the credential (console.go).
	"GET /{$}", "GET /console", "GET /console/{path...}", "POST /v1/console/session"}

// portRoutes are the port proxy: public when the sandbox made the port so.
var portRoutes = []string{"/v1/sandboxes/{id}/ports/{port}/{path...}", "/v1/sandboxes/{id}/ports/{port}", HostPortPattern}

// hit is what a recording handler saw: the route that ran, the principal
// it ran as and the path values it would act on.
type hit struct {
	pattern, id, port string
	p                 auth.Principal
}

// fixture is the real server's table, guard and Handler, with every
// handler replaced by a recorder and the manager by a fixed set of
// sandboxes: sb1 (named "named", port 8080 public), sb2 and a deleted one.
type fixture struct {
	s     *Server
	st    store.Store
	h     http.Handler
	creds map[string]string
	mu    sync.Mutex
	hits  []hit
}

const testDomain = "sb.test"

// keyScopes are the scopes of the test's non-admin keys.
var keyScopes = map[string][]auth.Scope{
	"reader":  {auth.ScopeSandboxesRead},
	"builder": {auth.ScopeSandboxesRead, auth.ScopeSandboxesWrite, auth.ScopeExec, auth.ScopeFiles, auth.ScopePorts},
}

func newFixture(t testing.TB) *fixture {
	t.Helper()
	dir := t.TempDir()
	ctx := context.Background()
	st, err := sqlite.Open(ctx, filepath.Join(dir, "berth.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	if _, err := auth.Bootstrap(ctx, st, dir, time.Now()); err != nil {
		t.Fatal(err)
	}
	adminKey, err := os.ReadFile(filepath.Join(dir, auth.AdminKeyFile))
	if err != nil {
		t.Fatal(err)
	}
	keys := map[string]string{"admin": strings.TrimSpace(string(adminKey))}
	for name, scopes := range keyScopes {
		id, key := auth.NewKey()
		var ss []string
		for _, s := range scopes {
			ss = append(ss, string(s))
		}
		if err := st.CreateAPIKey(ctx, &store.APIKey{ID: id, Name: name, Hash: auth.Hash(key), Scopes: ss, CreatedAt: time.Now()}); err != nil {
			t.Fatal(err)
		}
		keys[name] = key
	}
	leases, err := auth.OpenLeases(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"sb1", "sb2", "gone"} {
		var ss []string
		for _, sc := range auth.LeaseScopes {
			ss = append(ss, string(sc))
		}
		if err := st.CreateLease(ctx, &store.Lease{ID: auth.CreateLeaseID(id), SandboxID: id, Scopes: ss}); err != nil {
			t.Fatal(err)
		}
	}
	sbs := map[string]*sandbox.Sandbox{
		"sb1":  {ID: "sb1", Name: "named", State: sandbox.StateRunning, Spec: sandbox.Spec{PublicPorts: []int{8080}}},
		"sb2":  {ID: "sb2", Name: "other", State: sandbox.StateRunning},
		"gone": {ID: "gone", State: sandbox.StateDeleted},
	}
	f := &fixture{st: st, creds: map[string]string{
		"none": "", "garbage": "berth_nope", "forged": "berth_lease_sb1_" + strings.Repeat("0", 40),
		"lease-sb1": leases.Token("sb1"), "lease-sb2": leases.Token("sb2"), "lease-gone": leases.Token("gone"),
		"admin": keys["admin"], "reader": keys["reader"], "builder": keys["builder"],
	}}
	f.s = &Server{
		Domain: testDomain, authn: auth.New(st, leases), log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		metrics: newMetrics(),
		lookup: func(_ context.Context, ref string) (*sandbox.Sandbox, error) {
			if sb, ok := sbs[ref]; ok {
				return sb, nil
			}
			for _, sb := range sbs {
				if sb.Name != "" && sb.Name == ref {
					return sb, nil
				}
			}
			return nil, errdefs.NotFound("no sandbox %q", ref)
		},
	}
	table := f.s.routeTable()
	for i := range table {
		pattern := table[i].Pattern
		table[i].h = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			p, _ := auth.From(r.Context())
			if r.Pattern != pattern {
				t.Errorf("handler of %q ran for pattern %q", pattern, r.Pattern)
			}
			f.mu.Lock()
			f.hits = append(f.hits, hit{pattern: pattern, id: r.PathValue("id"), port: r.PathValue("port"), p: p})
			f.mu.Unlock()
			w.WriteHeader(299)
		})
	}
	f.s.mount(table)
	f.h = f.s.Handler(false)
	return f
}

// do sends one request, parsed from its wire form as the HTTP server
// does, and returns the response and the handler it reached, if any.
func (f *fixture) do(t testing.TB, method, target, host, cred string) (*httptest.ResponseRecorder, *hit, bool) {
	t.Helper()
	if host == "" {
		host = "berth.local"
	}
	raw := method + " " + target + " HTTP/1.1\r\nHost: " + host + "\r\n"
	if tok := f.creds[cred]; tok != "" {
		raw += "Authorization: Bearer " + tok + "\r\n"
	}
	r, err := http.ReadRequest(bufio.NewReader(strings.NewReader(raw + "\r\n")))
	if err != nil {
		return nil, nil, false
	}
	f.mu.Lock()
	f.hits = nil
	f.mu.Unlock()
	w := httptest.NewRecorder()
	f.h.ServeHTTP(w, r)
	f.mu.Lock()
	defer f.mu.Unlock()
	switch len(f.hits) {
	case 0:
		return w, nil, true
	case 1:
		h := f.hits[0]
		return w, &h, true
	}
	t.Fatalf("%s %s: %d handlers ran", method, target, len(f.hits))
	return nil, nil, false
}

func routeByPattern(f *fixture, pattern string) Route {
	for _, rt := range f.s.Routes() {
		if rt.Pattern == pattern {
			return rt
		}
	}
	return Route{}
}

// target turns a route pattern into a concrete request.
func target(rt Route, id, port string) (method, path, host string) {
	if rt.Pattern == HostPortPattern {
		return "GET", "/anything", port + "-" + id + "." + testDomain
	}
	method, path, ok := strings.Cut(rt.Pattern, " ")
	if !ok {
		method, path = "GET", rt.Pattern
	}
	if path == "/" {
		path = "/no/such/route"
	}
	path = strings.ReplaceAll(path, "{$}", "")
	path = strings.NewReplacer("{id}", id, "{name}", "base", "{port}", port, "{path...}", "x").Replace(path)
	return method, path, ""
}

// TestRouteTableAuthorization sends every route of the real table each
// credential, and checks the exact set each reaches: anonymous callers
// the health check (and public ports), a lease its own sandbox's fixed
// routes, keys what their scopes name.
func TestRouteTableAuthorization(t *testing.T) {
	f := newFixture(t)
	routes := f.s.Routes()
	if len(routes) < 60 {
		t.Fatalf("only %d routes in the table", len(routes))
	}
	for _, rt := range routes {
		if !rt.Op.Rule().Valid() {
			t.Errorf("%s: no valid rule", rt.Pattern)
		}
		if rt.PublicPort != slices.Contains(portRoutes, rt.Pattern) {
			t.Errorf("%s: public-port = %v; only the port proxy may be public (portRoutes)", rt.Pattern, rt.PublicPort)
		}
		if rt.Op.Rule().Lease != slices.Contains(leaseRoutes, rt.Pattern) {
			t.Errorf("%s: lease = %v; the lease scope is fixed (leaseRoutes)", rt.Pattern, rt.Op.Rule().Lease)
		}
		for _, cred := range []string{"none", "garbage", "forged", "lease-sb1", "lease-sb2", "lease-gone", "admin", "reader", "builder"} {
			method, path, host := target(rt, "sb1", "9090")
			w, h, _ := f.do(t, method, path, host, cred)
			var want bool
			switch cred {
			case "none", "garbage", "forged", "lease-gone":
				want = slices.Contains(anonymousRoutes, rt.Pattern)
			case "lease-sb2":
				want = slices.Contains(anonymousRoutes, rt.Pattern)
			case "lease-sb1":
				want = slices.Contains(anonymousRoutes, rt.Pattern) || slices.Contains(leaseRoutes, rt.Pattern)
			case "admin":
				want = true
			case "reader":
				want = rt.Op.Rule().Public || slices.Equal(rt.Op.Rule().Scopes, []auth.Scope{auth.ScopeSandboxesRead})
			case "builder":
				// Exactly the routes whose every scope the key holds.
				want = rt.Op.Rule().Public || !slices.ContainsFunc(rt.Op.Rule().Scopes, func(s auth.Scope) bool {
					return !slices.Contains(keyScopes["builder"], s)
				})
			}
			if got := h != nil; got != want {
				t.Errorf("%s %s (%s) as %s: reached=%v (status %d %s), want %v", method, path, rt.Pattern, cred, got, w.Code, strings.TrimSpace(w.Body.String()), want)
				continue
			}
			if h == nil {
				wantStatus := 403
				switch cred {
				case "none", "garbage", "forged", "lease-gone":
					wantStatus = 401
				}
				if w.Code != wantStatus {
					t.Errorf("%s %s as %s: status %d, want %d", method, path, cred, w.Code, wantStatus)
				}
				var eb api.ErrorBody
				json.Unmarshal(w.Body.Bytes(), &eb)
				if code, _ := errdefs.Code(map[int]error{401: errdefs.ErrUnauthenticated, 403: errdefs.ErrPermission}[wantStatus]); eb.Error.Code != code {
					t.Errorf("%s %s as %s: error code %q, want %q", method, path, cred, eb.Error.Code, code)
				}
				continue
			}
			if h.pattern != rt.Pattern {
				t.Errorf("%s %s: reached %q, want %q", method, path, h.pattern, rt.Pattern)
			}
			if strings.HasPrefix(cred, "lease-") && (h.p.Sandbox != "sb1" || h.id != "sb1") && !slices.Contains(anonymousRoutes, rt.Pattern) {
				t.Errorf("%s %s as %s: ran as %+v on %q", method, path, cred, h.p, h.id)
			}
		}
		if rt.PublicPort {
			// Port 8080 of sb1 is public: anyone reaches it, as no one.
			for _, cred := range []string{"none", "garbage", "lease-sb2", "admin"} {
				method, path, host := target(rt, "sb1", "8080")
				_, h, _ := f.do(t, method, path, host, cred)
				if h == nil || h.id != "sb1" || h.port != "8080" || h.p.Actor != auth.Anonymous.Actor {
					t.Errorf("public port %s %s as %s: %+v", path, host, cred, h)
				}
			}
		}
	}
	for _, p := range append(slices.Clone(leaseRoutes), anonymousRoutes...) {
		if routeByPattern(f, p).Pattern == "" {
			t.Errorf("%s is not a route", p)
		}
	}
}

// TestRoutesDocumented checks api/openapi.json against the route table
// the server registers (Routes()), both ways: every route is documented
// with its method and path and the rule the table gives it
// (x-berth-scopes, x-berth-lease, x-berth-public-port, security), with an
// operationId and the error answers every /v1 route can give; and every
// documented operation is a registered route. There is no hand-written
// list of routes to fall behind the table.
func TestRoutesDocumented(t *testing.T) {
	var doc struct {
		Paths map[string]map[string]json.RawMessage `json:"paths"`
	}
	if err := json.Unmarshal(api.OpenAPI, &doc); err != nil {
		t.Fatal(err)
	}
	// op is a documented operation as "METHOD /path"; a route without a
	// method (the port proxy, any method) is documented as GET.
	op := func(pattern string) string {
		method, path, ok := strings.Cut(pattern, " ")
		if !ok {
			method, path = "GET", pattern
		}
		return method + " " + strings.ReplaceAll(path, "...}", "}")
	}
	registered := map[string]bool{}
	for _, rt := range Routes() {
		if !Documented(rt.Pattern) {
			continue
		}
		key := op(rt.Pattern)
		registered[key] = true
		method, path, _ := strings.Cut(key, " ")
		raw, ok := doc.Paths[path][strings.ToLower(method)]
		if !ok {
			t.Errorf("route %s is not in api/openapi.json (as %s)", rt.Pattern, key)
			continue
		}
		var op struct {
			OperationID string                     `json:"operationId"`
			Responses   map[string]json.RawMessage `json:"responses"`
			Scopes      []auth.Scope               `json:"x-berth-scopes"`
			Lease       bool                       `json:"x-berth-lease"`
			PublicPort  bool                       `json:"x-berth-public-port"`
			Host        bool                       `json:"x-berth-host"`
			Security    *[]any                     `json:"security"`
		}
		if err := json.Unmarshal(raw, &op); err != nil {
			t.Fatal(err)
		}
		if op.OperationID == "" || len(op.Responses) == 0 {
			t.Errorf("%s: no operationId or responses", rt.Pattern)
		}
		if strings.HasPrefix(path, "/v1/") && !rt.Op.Rule().Public {
			for _, code := range []string{"400", "401", "403", "429", "default"} {
				if _, ok := op.Responses[code]; !ok {
					t.Errorf("%s: no %s response", rt.Pattern, code)
				}
			}
		}
		if op.Scopes == nil {
			op.Scopes = []auth.Scope{}
		}
		want := rt.Op.Rule().Scopes
		if want == nil {
			want = []auth.Scope{}
		}
		if !slices.Equal(op.Scopes, want) || op.Lease != rt.Op.Rule().Lease || op.PublicPort != rt.PublicPort {
			t.Errorf("%s: documented scopes %v lease %v public-port %v, the table says %v %v %v", rt.Pattern,
				op.Scopes, op.Lease, op.PublicPort, want, rt.Op.Rule().Lease, rt.PublicPort)
		}
		if op.Host != rt.Op.Rule().Host {
			t.Errorf("%s: documented host-only %v, the table says %v", rt.Pattern, op.Host, rt.Op.Rule().Host)
		}
		if rt.Op.Rule().Public != (op.Security != nil && len(*op.Security) == 0) {
			t.Errorf("%s: public=%v but documented security %v", rt.Pattern, rt.Op.Rule().Public, op.Security)
		}
	}
	if len(registered) < 50 {
		t.Fatalf("only %d documented routes registered: is Routes() the table?", len(registered))
	}
	methods := []string{"get", "put", "post", "delete", "patch", "head", "options", "trace"}
	for path, ops := range doc.Paths {
		for method := range ops {
			if !slices.Contains(methods, method) {
				continue // path-level parameters, not an operation
			}
			if key := strings.ToUpper(method) + " " + path; !registered[key] {
				t.Errorf("api/openapi.json documents %s, which the server does not register", key)
			}
		}
	}
}

// TestMountRefusesUnsafeRules: a route without an operation or with one
// the catalogue does not have, a lease route whose {id} is not a
// sandbox's, and a public-port route without {id}/{port} stop the server
// from starting.
func TestMountRefusesUnsafeRules(t *testing.T) {
	ok := http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})
	for _, rt := range []Route{
		{Pattern: "GET /v1/new", h: ok},
		{Pattern: "GET /v1/new", Op: "sandbox.everything", h: ok},
		{Pattern: "GET /v1/snapshots/{id}/x", Op: access.SandboxGet, h: ok},
		{Pattern: "GET /v1/volumes/{id}", Op: access.SandboxGet, h: ok},
		{Pattern: "GET /v1/sandboxes/{id}/x", Op: access.Read, PublicPort: true, h: ok},
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("route %+v was mounted", rt)
				}
			}()
			s := New(nil, nil, nil)
			s.mount(append(s.routeTable(), rt))
		}()
	}
}

// encodedCases are requests whose paths try to make one route look like
// another: encoded slashes and dots, double encoding, dot segments,
// doubled and trailing slashes, case. want is the route that may run
// ("" for none) and the sandbox id it acts on.
var encodedCases = []struct {
	method, target, host, cred string
	want, id                   string
}{
	{"GET", "/v1/sandboxes/sb1%2Fports%2F8080/events", "", "none", "", ""},
	{"POST", "/v1/sandboxes/sb1%2Fports%2F8080/exec", "", "none", "", ""},
	{"GET", "/v1/sandboxes/sb1%2fports%2f8080", "", "none", "", ""},
	{"DELETE", "/v1/sandboxes/sb1%2Fports%2F8080/events", "", "none", "", ""},
	{"GET", "/v1/sandboxes/sb1%2Fports%2F8080/events", "", "lease-sb1", "", ""},
	{"GET", "/v1/sandboxes/sb1%2Fports%2F8080/events", "", "admin", "GET /v1/sandboxes/{id}/events", "sb1/ports/8080"},
	{"GET", "/v1/sandboxes/sb1%252Fports%252F8080/events", "", "none", "", ""},
	{"GET", "/v1/sandboxes/sb1/ports%2F8080/events", "", "none", "", ""},
	{"GET", "/v1/sandboxes/sb1/ports/8080%2F..%2F..%2Fevents", "", "none", "", ""},
	{"GET", "/v1/sandboxes/sb1/ports/8080/../../events", "", "none", "", ""},
	{"GET", "/v1/sandboxes/sb1/ports/8080/../../events", "", "admin", "", ""},
	{"GET", "/v1/sandboxes/sb1/events?p=/ports/8080/", "", "none", "", ""},
	{"GET", "/v1/sandboxes/sb1/ports/8080/x", "", "none", "/v1/sandboxes/{id}/ports/{port}/{path...}", "sb1"},
	{"GET", "/v1/sandboxes/sb1/ports/8080", "", "none", "/v1/sandboxes/{id}/ports/{port}", "sb1"},
	{"GET", "/v1/sandboxes/sb1/ports/8080/%2e%2e/%2e%2e/events", "", "none", "/v1/sandboxes/{id}/ports/{port}/{path...}", "sb1"},
	{"GET", "/v1/sandboxes/sb1/ports/%38%30%38%30/x", "", "none", "/v1/sandboxes/{id}/ports/{port}/{path...}", "sb1"},
	{"GET", "/v1/sandboxes/named/ports/8080/x", "", "none", "/v1/sandboxes/{id}/ports/{port}/{path...}", "named"},
	{"GET", "/v1/sandboxes/sb2/ports/8080/x", "", "none", "", ""},
	{"GET", "/v1/sandboxes/sb1/ports/9090/x", "", "none", "", ""},
	{"GET", "/v1/sandboxes/sb1/ports/+8080/x", "", "none", "/v1/sandboxes/{id}/ports/{port}/{path...}", "sb1"},
	{"GET", "/v1/sandboxes/gone/ports/8080/x", "", "none", "", ""},
	{"GET", "/v1/sandboxes/%2e%2e/sandboxes", "", "none", "", ""},
	{"GET", "/v1/sandboxes/%2e%2e", "", "lease-sb1", "", ""},
	{"GET", "/v1/sandboxes/sb1/%2e%2e/sb2/events", "", "lease-sb1", "", ""},
	{"GET", "/v1/sandboxes/sb1/../sb2/events", "", "lease-sb1", "", ""},
	{"GET", "/v1/sandboxes/sb1%2F..%2Fsb2/events", "", "lease-sb1", "", ""},
	{"GET", "//v1/sandboxes", "", "none", "", ""},
	{"GET", "//v1/sandboxes", "", "lease-sb1", "", ""},
	{"GET", "/v1//sandboxes/sb1", "", "lease-sb1", "", ""},
	{"GET", "/v1/sandboxes/", "", "lease-sb1", "", ""},
	{"GET", "/v1/sandboxes/sb1/", "", "lease-sb1", "", ""},
	{"GET", "/v1/sandboxes/sb1/events/", "", "lease-sb1", "", ""},
	{"GET", "/v1/sandboxes/sb1/events", "", "lease-sb1", "GET /v1/sandboxes/{id}/events", "sb1"},
	{"GET", "/v1/sandboxes/%73%62%31/events", "", "lease-sb1", "GET /v1/sandboxes/{id}/events", "sb1"},
	{"GET", "/V1/SANDBOXES/sb1", "", "lease-sb1", "", ""},
	{"GET", "/v1/sandboxes/SB1", "", "lease-sb1", "", ""},
	{"GET", "/v1/sandboxes/named", "", "lease-sb1", "", ""},
	{"GET", "/v1/sandboxes/sb1", "", "lease-sb2", "", ""},
	{"GET", "/v1/sandboxes/sb1", "", "forged", "", ""},
	{"GET", "/v1/sandboxes/gone", "", "lease-gone", "", ""},
	{"POST", "/v1/sandboxes/sb1/release", "", "lease-sb1", "", ""},
	{"POST", "/v1/sandboxes/sb1/quarantine", "", "lease-sb1", "", ""},
	{"POST", "/v1/sandboxes/sb1/network", "", "lease-sb1", "", ""},
	{"POST", "/v1/sandboxes/sb1/fork", "", "lease-sb1", "", ""},
	{"POST", "/v1/sandboxes/sb1/snapshots", "", "lease-sb1", "", ""},
	{"DELETE", "/v1/sandboxes/sb1", "", "lease-sb1", "", ""},
	{"POST", "/v1/sandboxes", "", "lease-sb1", "", ""},
	{"GET", "/v1/sandboxes", "", "lease-sb1", "", ""},
	{"POST", "/v1/sandboxes/sb1/release", "", "builder", "", ""},
	{"POST", "/v1/sandboxes/sb1/network", "", "builder", "", ""},
	{"POST", "/v1/doctor/fix", "", "builder", "", ""},
	{"POST", "/v1/sandboxes/sb1/release", "", "reader", "", ""},
	{"GET", "/metrics", "", "reader", "", ""},
	{"GET", "/metrics", "", "none", "", ""},
	{"GET", "/healthz", "", "none", "GET /healthz", ""},
	{"GET", "/healthz/", "", "none", "", ""},
	{"GET", "/no/such/route", "", "none", "", ""},
	{"GET", "/x", "8080-sb1." + testDomain, "none", HostPortPattern, "sb1"},
	{"GET", "/v1/sandboxes", "8080-sb1." + testDomain + ":443", "none", HostPortPattern, "sb1"},
	{"GET", "/x", "8080-SB1.SB.TEST", "none", HostPortPattern, "sb1"},
	{"GET", "/x", "9090-sb1." + testDomain, "none", "", ""},
	{"GET", "/x", "9090-sb1." + testDomain, "lease-sb1", HostPortPattern, "sb1"},
	{"GET", "/x", "9090-sb1." + testDomain, "lease-sb2", "", ""},
	{"GET", "/x", "9090-named." + testDomain, "lease-sb1", "", ""},
	{"GET", "/x", "8080-sb2." + testDomain, "none", "", ""},
	{"GET", "/v1/sandboxes", "8080-sb1.evil." + testDomain, "none", "", ""},
	{"GET", "/v1/sandboxes", "8080-sb1.evil." + testDomain, "admin", "GET /v1/sandboxes", ""},
}

func TestEncodedPaths(t *testing.T) {
	f := newFixture(t)
	for _, c := range encodedCases {
		w, h, ok := f.do(t, c.method, c.target, c.host, c.cred)
		if !ok {
			t.Errorf("%s %s: not a valid request", c.method, c.target)
			continue
		}
		got, id := "", ""
		if h != nil {
			got, id = h.pattern, h.id
		}
		if got != c.want || id != c.id {
			t.Errorf("%s %s host %q as %s: reached %q on %q (status %d %s), want %q on %q",
				c.method, c.target, c.host, c.cred, got, id, w.Code, strings.TrimSpace(w.Body.String()), c.want, c.id)
		}
		if h == nil && w.Code != 401 && w.Code != 403 && w.Code/100 != 3 {
			t.Errorf("%s %s as %s: refused with %d, want 401, 403 or a redirect", c.method, c.target, c.cred, w.Code)
		}
	}
}

// FuzzRouteAuthorization: whatever the method, path, host and
// credential, the handler that runs and the principal it runs as agree
// with the route's rule — anonymous callers reach only public routes
// and public ports, leases only their fixed routes on their own sandbox,
// keys only what their scopes allow, and never an admin route without
// admin.
func FuzzRouteAuthorization(f *testing.F) {
	creds := []string{"none", "garbage", "forged", "lease-sb1", "lease-sb2", "lease-gone", "admin", "reader", "builder"}
	for _, c := range encodedCases {
		f.Add(c.method, c.target, c.host, uint8(slices.Index(creds, c.cred)))
	}
	f.Add("OPTIONS", "*", "", uint8(0))
	f.Add("GET", "http://8080-sb1."+testDomain+"/v1/sandboxes", "berth.local", uint8(3))
	fx := newFixture(f)
	f.Fuzz(func(t *testing.T, method, target, host string, credIdx uint8) {
		cred := creds[int(credIdx)%len(creds)]
		if strings.ContainsAny(method+target+host, "\r\n") {
			return
		}
		w, h, ok := fx.do(t, method, target, host, cred)
		if !ok {
			return
		}
		if h == nil {
			// The mux's own answers (a redirect to the clean path, 400
			// for "*") run no handler.
			if w.Code != 401 && w.Code != 403 && w.Code/100 != 3 && w.Code != 400 {
				t.Fatalf("%s %s as %s: refused with %d", method, target, cred, w.Code)
			}
			return
		}
		rt := routeByPattern(fx, h.pattern)
		if rt.Pattern == "" {
			t.Fatalf("reached unknown pattern %q", h.pattern)
		}
		if h.p.Actor == auth.Anonymous.Actor {
			n, err := strconv.Atoi(h.port)
			sb, lerr := fx.s.lookup(context.Background(), h.id)
			public := rt.PublicPort && err == nil && lerr == nil && sb.State.Live() && slices.Contains(sb.Spec.PublicPorts, n)
			if !slices.Contains(anonymousRoutes, rt.Pattern) && !public {
				t.Fatalf("%s %s host %q as %s: anonymous reached %s on %q port %q", method, target, host, cred, rt.Pattern, h.id, h.port)
			}
			return
		}
		switch cred {
		case "none", "garbage", "forged", "lease-gone":
			t.Fatalf("%s %s as %s: ran as %+v", method, target, cred, h.p)
		case "lease-sb1", "lease-sb2":
			want := strings.TrimPrefix(cred, "lease-")
			if h.p.Sandbox != want || h.id != want || !slices.Contains(leaseRoutes, rt.Pattern) {
				t.Fatalf("%s %s host %q as %s: %s ran as %+v on %q", method, target, host, cred, rt.Pattern, h.p, h.id)
			}
			return
		}
		if h.p.IsLease() {
			t.Fatalf("%s %s as %s: ran as a lease %+v", method, target, cred, h.p)
		}
		for _, s := range rt.Op.Rule().Scopes {
			if !h.p.Has(s) {
				t.Fatalf("%s %s as %s: %s needs %s, principal %+v", method, target, cred, rt.Pattern, s, h.p)
			}
		}
		if slices.Contains(rt.Op.Rule().Scopes, auth.ScopeAdmin) && cred != "admin" {
			t.Fatalf("%s %s as %s: admin route %s", method, target, cred, rt.Pattern)
		}
	})
}
