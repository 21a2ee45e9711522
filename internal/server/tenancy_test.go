package server

// Tenancy, keys, leases and port tokens over the real server, engine and
// SQLite store, with the engine's in-memory node backend (memnode: real
// agent, in-process ports) so the tests run without root or a runtime.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/internal/auth"
	"github.com/berth-sh/berth/internal/engine"
	"github.com/berth-sh/berth/internal/engine/enginetest"
	"github.com/berth-sh/berth/internal/image"
	"github.com/berth-sh/berth/internal/node/memnode"
	"github.com/berth-sh/berth/internal/secrets"
	"github.com/berth-sh/berth/internal/secrets/vault"
	"github.com/berth-sh/berth/internal/server/admin"
	"github.com/berth-sh/berth/internal/store"
	"github.com/berth-sh/berth/internal/store/sqlite"
)

type tclock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *tclock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *tclock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// tenv is a daemon in a test: the real server over a real engine.
type tenv struct {
	t     *testing.T
	st    store.Store
	node  *memnode.Node
	srv   *Server
	tcp   *httptest.Server // keys and tokens
	local *httptest.Server // the unix socket's trust: the host admin
	clock *tclock
}

func newTenv(t *testing.T) *tenv {
	t.Helper()
	ctx := context.Background()
	dir := t.TempDir()
	st, err := sqlite.Open(ctx, filepath.Join(dir, "berth.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	if err := st.PutTemplate(ctx, &store.Template{Name: "base", Source: "test",
		Layers: []string{"sha256:0000000000000000000000000000000000000000000000000000000000000001"}}); err != nil {
		t.Fatal(err)
	}
	e := &tenv{t: t, st: st, node: memnode.New(t), clock: &tclock{t: time.Now().UTC()}}
	log := slog.New(slog.DiscardHandler)
	// A real layer store, so template uploads are read as they are in
	// the daemon (and bad ones refused as they are there).
	images, err := image.Open(filepath.Join(dir, "layers"), image.IDMap{HostUID: 100000, HostGID: 100000, Size: 65536})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { images.Close() })
	m, err := enginetest.New(engine.Config{Node: "node-a", ReconcileInterval: time.Hour, Logger: log, WarmPool: -1,
		UploadDir: filepath.Join(dir, "layers", "uploads"), OnState: LeaseRevoker(st, log)}, st, images, e.node)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Recover(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Close)
	leases, err := auth.OpenLeases(dir)
	if err != nil {
		t.Fatal(err)
	}
	authn := auth.New(st, leases)
	authn.Now = e.clock.Now
	e.srv = New(m, authn, log)
	e.srv.Leases, e.srv.Domain = leases, testDomain
	key, err := secrets.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	kr, err := secrets.NewKeyring(key)
	if err != nil {
		t.Fatal(err)
	}
	e.srv.Secrets = SecretsConfig{Vault: vault.New(st, kr)}
	m.SetSecrets(e.srv.Secrets.Vault)
	e.tcp = httptest.NewServer(e.srv.Handler(false))
	e.local = httptest.NewServer(e.srv.Handler(true))
	t.Cleanup(e.tcp.Close)
	t.Cleanup(e.local.Close)
	return e
}

// do sends a request with cred ("" none, "local" the host socket) and
// returns the status and body.
func (e *tenv) do(cred, method, path, body string) (int, string) {
	e.t.Helper()
	return e.doHost(cred, method, path, "", body)
}

func (e *tenv) doHost(cred, method, path, host, body string) (int, string) {
	e.t.Helper()
	base := e.tcp.URL
	if cred == "local" {
		base = e.local.URL
	}
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, base+path, rd)
	if err != nil {
		e.t.Fatal(err)
	}
	if host != "" {
		req.Host = host
	}
	if cred != "" && cred != "local" {
		req.Header.Set("Authorization", "Bearer "+cred)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := noRedirect.Do(req)
	if err != nil {
		e.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

var noRedirect = &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	Timeout: 30 * time.Second}

// must sends a request that must answer want (0: any 2xx), and decodes the answer into out.
func (e *tenv) must(cred, method, path, body string, want int, out any) {
	e.t.Helper()
	code, b := e.do(cred, method, path, body)
	if code != want && !(want == 0 && code >= 200 && code < 300) {
		e.t.Fatalf("%s %s: %d %s, want %d", method, path, code, b, want)
	}
	if out != nil {
		if err := json.Unmarshal([]byte(b), out); err != nil {
			e.t.Fatalf("%s %s: %v in %s", method, path, err, b)
		}
	}
}

func (e *tenv) tenant(name string) {
	e.t.Helper()
	e.must("local", "POST", "/v1/tenants", `{"name":"`+name+`"}`, 201, nil)
}

func (e *tenv) key(cred, tenant, role string, scopes ...string) api.CreatedAPIKey {
	e.t.Helper()
	req, _ := json.Marshal(api.CreateAPIKeyRequest{Tenant: tenant, Role: role, Scopes: scopes})
	var k api.CreatedAPIKey
	e.must(cred, "POST", "/v1/keys", string(req), 201, &k)
	return k
}

func (e *tenv) sandbox(cred, body string) api.Sandbox {
	e.t.Helper()
	var sb api.Sandbox
	e.must(cred, "POST", "/v1/sandboxes", body, 201, &sb)
	return sb
}

// world is tenant b's objects, which tenant a's key must not reach.
type world struct {
	sb, named api.Sandbox
	vol       api.Volume
	snap      api.Snapshot
	key       api.CreatedAPIKey
	lease     string
}

// state is everything of b a request could change, as stored.
func (e *tenv) state(w *world) string {
	e.t.Helper()
	ctx := context.Background()
	var parts []any
	for _, id := range []string{w.sb.ID, w.named.ID} {
		sb, err := e.st.GetSandbox(ctx, store.AnyOwner, id)
		if err != nil {
			e.t.Fatal(err)
		}
		parts = append(parts, sb.State, sb.Generation, sb.Spec.Allow, sb.Spec.Labels)
		evs, _, _ := e.st.ListEvents(ctx, store.AnyOwner, id, 0, store.Page{})
		parts = append(parts, len(evs))
	}
	v, err := e.st.GetVolume(ctx, store.AnyOwner, w.vol.ID)
	if err != nil {
		e.t.Fatal(err)
	}
	sn, err := e.st.GetSnapshot(ctx, store.AnyOwner, w.snap.ID)
	if err != nil {
		e.t.Fatal(err)
	}
	ks, _, _ := e.st.ListAPIKeys(ctx, store.OwnedBy("b"), store.Page{})
	for _, k := range ks {
		parts = append(parts, k.ID, k.RevokedAt)
	}
	snaps, _, _ := e.st.ListSnapshots(ctx, store.SnapshotFilter{Owner: store.OwnedBy("b")}, store.Page{})
	vols, _, _ := e.st.ListVolumes(ctx, store.VolumeFilter{Owner: store.OwnedBy("b")}, store.Page{})
	sbs, _, _ := e.st.ListSandboxes(ctx, store.SandboxFilter{Owner: store.OwnedBy("b")}, store.Page{})
	sec, err := e.st.GetSecret(ctx, store.OwnedBy("b"), "bsec")
	if err != nil {
		e.t.Fatal(err)
	}
	tpls, _, _ := e.st.ListTenantTemplates(ctx, "b", store.Page{})
	for _, t := range tpls {
		parts = append(parts, t.Tenant, t.Name, t.Layers, t.Source)
	}
	pools, _ := e.st.ListPools(ctx)
	for k, n := range pools {
		if k.Tenant == "b" {
			parts = append(parts, k.Template, n)
		}
	}
	parts = append(parts, v.State, v.Generation, sn.Name, len(snaps), len(vols), len(sbs), sec.Sealed, sec.UpdatedAt)
	b, _ := json.Marshal(parts)
	return string(b)
}

// TestCrossTenantRoutes iterates the registered routes: tenant a's admin
// key, naming tenant b's objects by id and by name, gets 404 on every
// route with an object in its path (403 on the host's routes), and
// changes nothing of b; routes without one see nothing of b. A route
// added later is covered by being in Routes(): its {id} and {name} are
// b's.
func TestCrossTenantRoutes(t *testing.T) {
	e := newTenv(t)
	e.tenant("a")
	e.tenant("b")
	ka := e.key("local", "a", "admin").Key
	kb := e.key("local", "b", "admin")
	w := &world{key: e.key(kb.Key, "", "member")}
	e.must(kb.Key, "POST", "/v1/volumes", `{"name":"bvol"}`, 201, &w.vol)
	w.sb = e.sandbox(kb.Key, `{"template":"base"}`)
	w.named = e.sandbox(kb.Key, `{"template":"base","name":"bsb"}`)
	e.must(kb.Key, "PUT", "/v1/sandboxes/"+w.sb.ID+"/files?path=/hello", "b's", 0, nil)
	e.must(kb.Key, "POST", "/v1/sandboxes/"+w.sb.ID+"/snapshots", `{"name":"bsnap"}`, 201, &w.snap)
	w.lease = w.sb.LeaseToken
	e.must(kb.Key, "PUT", "/v1/secrets/bsec", `{"value":"b-secret-value"}`, 201, nil)
	mine := e.sandbox(ka, `{"template":"base","name":"asb"}`)
	// b's own template (put in the store as an import would, so its
	// layers need not exist).
	if err := e.st.PutTemplate(context.Background(), &store.Template{Tenant: "b", Name: "btpl", Source: "b-own-source",
		Layers: []string{"sha256:00000000000000000000000000000000000000000000000000000000000000b1"}}); err != nil {
		t.Fatal(err)
	}
	before := e.state(w)
	bnames := []string{w.sb.ID, w.named.ID, w.vol.ID, w.snap.ID, w.key.ID, "bsb", "bsnap", "bvol", "bsec", "b-secret-value", "btpl", "b-own-source"}

	// Bodies that would be valid, naming b's objects where a route takes
	// them in its body.
	bodies := map[string][]string{
		"POST /v1/sandboxes": {`{"template":"base","volumes":[{"name":"bvol","path":"/data"}]}`,
			`{"snapshot":"` + w.snap.ID + `"}`, `{"snapshot":"bsnap"}`, `{"template":"btpl"}`},
		"POST /v1/run": {`{"sandbox":{"template":"base","volumes":[{"name":"bvol","path":"/data"}]},"exec":{"cmd":["true"]}}`,
			`{"sandbox":{"template":"btpl"},"exec":{"cmd":["true"]}}`},
		"POST /v1/copy":                                  {`{"from":"` + w.sb.ID + `","from_path":"/hello","to":"asb","to_path":"/tmp"}`, `{"from":"asb","from_path":"/","to":"bsb","to_path":"/tmp"}`},
		"POST /v1/keys":                                  {`{"tenant":"b","role":"viewer"}`},
		"POST /v1/sandboxes/{id}/exec":                   {`{"cmd":["true"]}`},
		"POST /v1/sandboxes/{id}/processes":              {`{"cmd":["true"]}`},
		"POST /v1/sandboxes/{id}/processes/{pid}/signal": {`{"signal":"SIGTERM"}`},
		"POST /v1/sandboxes/{id}/files/mkdir":            {`{"path":"/x"}`},
		"POST /v1/sandboxes/{id}/export":                 {`{"paths":["/hello"]}`},
		"POST /v1/sandboxes/{id}/network":                {`{"allow":["example.com"]}`},
		"POST /v1/sandboxes/{id}/leases":                 {`{"scopes":["exec"]}`},
		"POST /v1/sandboxes/{id}/ports/{port}/token":     {`{}`},
		"PUT /v1/templates/{name}/pool":                  {`{"min":1}`},
		"POST /v1/templates/{name}/push":                 {`{"ref":"127.0.0.1:1/x:1"}`},
	}
	wantOK := map[string]int{ // routes of no one's object: what a's key gets
		"GET /healthz": 200, "GET /v1/version": 200, "GET /v1/openapi.json": 200,
		"GET /v1/sandboxes": 200, "GET /v1/snapshots": 200, "GET /v1/volumes": 200, "GET /v1/keys": 200,
		"GET /v1/templates": 200, "GET /v1/pools": 200, "POST /v1/volumes": 201,
		// The templates are the host's catalogue, readable by every tenant.
		"GET /v1/templates/{name}": 200, "GET /v1/templates/{name}/pool": 200,
		// The redirect to the trailing slash answers alike for any id,
		// existing or not: it reads no object.
		"/v1/sandboxes/{id}/ports/{port}": 308,
		// Secret names are per tenant: a's put of b's name makes a's own.
		"GET /v1/secrets": 200,
	}
	routes := e.srv.Routes()
	if len(routes) < 60 {
		t.Fatalf("only %d routes", len(routes))
	}
	for _, rt := range routes {
		method, path, ok := strings.Cut(rt.Pattern, " ")
		if !ok {
			method, path = "GET", rt.Pattern
		}
		var targets []struct{ path, host string }
		switch {
		case rt.Pattern == HostPortPattern:
			targets = append(targets, struct{ path, host string }{"/", "8080-" + w.sb.ID + "." + testDomain})
		case path == "/":
			targets = append(targets, struct{ path, host string }{"/v1/nothing", ""})
		default:
			ids := []string{w.sb.ID, "bsb"}
			names := []string{"bvol"}
			switch {
			case strings.HasPrefix(path, "/v1/snapshots/"):
				ids = []string{w.snap.ID, "bsnap"}
			case strings.HasPrefix(path, "/v1/keys/"):
				ids = []string{w.key.ID, w.key.Prefix}
			case strings.HasPrefix(path, "/v1/templates/"):
				names = []string{"base", "btpl"} // the shared one, b's own
			case strings.HasPrefix(path, "/v1/tenants/"):
				names = []string{"b"}
			case rt.Pattern == "PUT /v1/secrets/{name}":
				// A put makes the caller's own secret of that name (names
				// are per tenant): a's own, leaving b's "bsec" (state) be.
				names = []string{"asec"}
			case strings.HasPrefix(path, "/v1/secrets/"):
				names = []string{"bsec"}
			}
			n := 1
			if strings.Contains(path, "{id}") || strings.Contains(path, "{name}") {
				n = max(len(ids), len(names))
			}
			for i := range n {
				p := strings.NewReplacer("{id}", ids[min(i, len(ids)-1)], "{name}", names[min(i, len(names)-1)],
					"{port}", "8080", "{path...}", "x", "{pid}", "abcdef-1").Replace(path)
				if strings.Contains(p, "/files") {
					p += "?path=/hello"
				}
				if strings.HasSuffix(path, "/files/move") {
					p += "&to=/moved"
				}
				targets = append(targets, struct{ path, host string }{p, ""})
			}
		}
		bs := bodies[method+" "+path]
		if len(bs) == 0 {
			bs = []string{""}
			if method == "POST" || method == "PUT" {
				bs = []string{"{}"}
			}
		}
		if rt.Pattern == "POST /v1/volumes" {
			bs = []string{`{"name":"a-own"}`}
		}
		if rt.Pattern == "PUT /v1/secrets/{name}" {
			bs = []string{`{"value":"a's"}`}
		}
		if method == "PUT" && strings.HasSuffix(path, "/files") {
			bs = []string{"a's"}
		}
		named := strings.Contains(path, "{id}") || strings.Contains(path, "{name}") || rt.Pattern == HostPortPattern
		for _, tg := range targets {
			for _, body := range bs {
				code, got := e.doHost(ka, method, tg.path, tg.host, body)
				want := 404
				switch {
				case rt.Op.Rule().Host:
					want = 403
				case rt.Pattern == "PUT /v1/templates/{name}/archive", rt.Pattern == "POST /v1/templates/{name}/dockerfile":
					// An upload (an archive, a Dockerfile build's context)
					// makes a's own template of that name (names are per
					// tenant); "{}" is no archive.
					want = 400
				case strings.Contains(tg.path, "/btpl"):
					want = 404 // b's own template: a reads the shared catalogue only
				case strings.Contains(tg.path, "/base") && (method == "DELETE" || method == "PUT"):
					want = 403 // the host's shared template: a cannot remove or pool it
				case strings.Contains(tg.path, "/base") && rt.Pattern == "POST /v1/templates/{name}/push":
					want = 403 // the shared template a sees, but tenant pushes are off
				case wantOK[rt.Pattern] != 0:
					want = wantOK[rt.Pattern]
				case rt.Pattern == "PUT /v1/secrets/{name}" && code == 200:
					want = 200 // a's own secret, replaced on the second target
				case rt.Pattern == "PUT /v1/secrets/{name}":
					want = 201
				case !named && bodies[rt.Pattern] == nil:
					want = code // a route of no object, unknown here: it must see nothing of b (below)
				}
				if code != want {
					t.Errorf("%s %s %s as a: %d %s, want %d", method, tg.path, body, code, strings.TrimSpace(got), want)
				}
				for _, s := range bnames {
					if code < 300 && strings.Contains(got, s) && !(rt.Pattern == "GET /v1/openapi.json") {
						t.Errorf("%s %s as a: the answer names b's %q: %s", method, tg.path, s, got)
					}
				}
				if now := e.state(w); now != before {
					t.Fatalf("%s %s %s as a changed b's objects:\n%s\n%s", method, tg.path, body, before, now)
				}
			}
		}
	}
	// b's objects all still work for b; a's names are its own.
	var got api.Sandbox
	e.must(kb.Key, "GET", "/v1/sandboxes/bsb", "", 200, &got)
	if code, body := e.do(kb.Key, "GET", "/v1/sandboxes/"+w.sb.ID+"/files?path=/hello", ""); code != 200 || body != "b's" {
		t.Errorf("b's file: %d %q", code, body)
	}
	e.must(w.lease, "GET", "/v1/sandboxes/"+w.sb.ID, "", 200, nil)
	// Names are unique per tenant: a may take b's names.
	e.must(ka, "POST", "/v1/volumes", `{"name":"bvol"}`, 201, nil)
	e.sandbox(ka, `{"template":"base","name":"bsb"}`)
	e.must(ka, "GET", "/v1/sandboxes/"+mine.ID, "", 200, nil)
	// The host sees both tenants.
	var all []api.Sandbox
	e.must("local", "GET", "/v1/sandboxes", "", 200, &all)
	if len(all) < 4 {
		t.Errorf("the host lists %d sandboxes, want every tenant's", len(all))
	}
}

// TestScopesAndRoles: a key of each single scope and of each role
// reaches exactly the routes its scopes name (never the host's), using
// the route table's rules against real requests.
func TestScopesAndRoles(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	creds := map[string][]string{}
	for _, sc := range auth.Scopes {
		creds["scope "+string(sc)] = []string{string(sc)}
	}
	for _, r := range auth.Roles {
		ss, _ := auth.RoleScopes(r)
		var names []string
		for _, s := range ss {
			names = append(names, string(s))
		}
		creds["role "+string(r)] = names
	}
	keys := map[string]string{}
	for name, scopes := range creds {
		id, key := auth.NewKey()
		if err := f.st.CreateAPIKey(ctx, &store.APIKey{ID: id, Tenant: "acme", Hash: auth.Hash(key), Scopes: scopes,
			CreatedAt: time.Now()}); err != nil {
			t.Fatal(err)
		}
		keys[name] = key
		f.creds[name] = key
	}
	for _, rt := range f.s.Routes() {
		for name, scopes := range creds {
			method, path, host := target(rt, "sb1", "9090")
			w, h, _ := f.do(t, method, path, host, name)
			p := auth.Principal{Tenant: "acme", Scopes: scopes}
			want := rt.Op.Rule().Public || !rt.Op.Rule().Host && !slices.ContainsFunc(rt.Op.Rule().Scopes, func(s auth.Scope) bool { return !p.Has(s) })
			if (h != nil) != want {
				t.Errorf("%s as %s: reached=%v (%d), want %v", rt.Pattern, name, h != nil, w.Code, want)
			}
			if h == nil && w.Code != 403 {
				t.Errorf("%s as %s: status %d, want 403", rt.Pattern, name, w.Code)
			}
		}
	}
}

// TestKeyLifecycle: a key is shown once, listed by prefix and never its
// secret; an expired key and a revoked one get 401 on their next request;
// a tenant's key manager cannot make a stronger key nor one of another
// tenant; deleting a tenant refuses while it owns sandboxes and revokes
// its keys.
func TestKeyLifecycle(t *testing.T) {
	e := newTenv(t)
	e.tenant("a")
	e.tenant("b")
	admin := e.key("local", "a", "admin")
	if !strings.HasPrefix(admin.Key, admin.Prefix) || admin.Prefix != auth.KeyPrefix+admin.ID || admin.Tenant != "a" {
		t.Fatalf("key %+v", admin)
	}
	var exp api.CreatedAPIKey
	e.must(admin.Key, "POST", "/v1/keys", `{"role":"viewer","expires_in_seconds":60}`, 201, &exp)
	if exp.ExpiresAt == nil || exp.Tenant != "a" || !slices.Equal(exp.Scopes, []string{"sandboxes:read"}) {
		t.Fatalf("viewer key %+v", exp)
	}
	e.must(exp.Key, "GET", "/v1/sandboxes", "", 200, nil)
	e.must(exp.Key, "POST", "/v1/sandboxes", `{"template":"base"}`, 403, nil)
	e.clock.Advance(61 * time.Second)
	e.must(exp.Key, "GET", "/v1/sandboxes", "", 401, nil)

	code, list := e.do(admin.Key, "GET", "/v1/keys", "")
	if code != 200 || !strings.Contains(list, admin.Prefix) || strings.Contains(list, admin.Key) {
		t.Errorf("list: %d %s", code, list)
	}
	mgr := e.key(admin.Key, "", "admin", "keys", "sandboxes:read")
	e.must(mgr.Key, "POST", "/v1/keys", `{"role":"member"}`, 403, nil)
	e.must(mgr.Key, "POST", "/v1/keys", `{"role":"viewer","tenant":"b"}`, 404, nil)
	e.must(mgr.Key, "POST", "/v1/keys", `{"role":"viewer"}`, 201, nil)
	e.must(admin.Key, "POST", "/v1/tenants", `{"name":"c"}`, 403, nil)
	e.must(admin.Key, "POST", "/v1/keys", `{"role":"owner"}`, 400, nil)
	e.must(admin.Key, "POST", "/v1/keys", `{"role":"viewer","expires_in_seconds":-1}`, 400, nil)
	e.must("local", "POST", "/v1/keys", `{"role":"viewer"}`, 400, nil)
	e.must("local", "POST", "/v1/keys", `{"role":"viewer","tenant":"nope"}`, 404, nil)
	e.must("local", "POST", "/v1/tenants", `{"name":"Bad Name"}`, 400, nil)
	e.must("local", "POST", "/v1/tenants", `{"name":"a"}`, 409, nil)

	victim := e.key(admin.Key, "", "member")
	e.must(victim.Key, "GET", "/v1/sandboxes", "", 200, nil)
	kb := e.key("local", "b", "admin")
	e.must(kb.Key, "DELETE", "/v1/keys/"+victim.Prefix, "", 404, nil)
	e.must(victim.Key, "GET", "/v1/sandboxes", "", 200, nil)
	e.must(admin.Key, "DELETE", "/v1/keys/"+victim.Prefix, "", 200, nil)
	e.must(victim.Key, "GET", "/v1/sandboxes", "", 401, nil)

	sb := e.sandbox(admin.Key, `{"template":"base"}`)
	e.must("local", "DELETE", "/v1/tenants/a", "", 409, nil)
	e.must(admin.Key, "GET", "/v1/sandboxes", "", 200, nil)
	e.must(admin.Key, "DELETE", "/v1/sandboxes/"+sb.ID, "", 200, nil)
	e.must("local", "DELETE", "/v1/tenants/a", "", 204, nil)
	e.must(admin.Key, "GET", "/v1/sandboxes", "", 401, nil)
	e.must(sb.LeaseToken, "GET", "/v1/sandboxes/"+sb.ID, "", 401, nil)
}

// TestLeaseTokens: a minted lease holds what it was given on its own
// sandbox only; it never lists, creates, forks, changes network rules,
// quarantines or releases, or mints; it dies with its sandbox's stop,
// quarantine and delete, and with its minting key.
func TestLeaseTokens(t *testing.T) {
	e := newTenv(t)
	e.tenant("a")
	ka := e.key("local", "a", "member")
	sb := e.sandbox(ka.Key, `{"template":"base"}`)
	other := e.sandbox(ka.Key, `{"template":"base"}`)
	var l api.Lease
	e.must(ka.Key, "POST", "/v1/sandboxes/"+sb.ID+"/leases", `{"scopes":["files"],"ttl_seconds":600}`, 201, &l)
	if !slices.Equal(l.Scopes, []string{"sandboxes:read", "files"}) || l.SandboxID != sb.ID {
		t.Fatalf("lease %+v", l)
	}
	e.must(ka.Key, "POST", "/v1/sandboxes/"+sb.ID+"/leases", `{"scopes":["network"]}`, 400, nil)
	e.must(ka.Key, "POST", "/v1/sandboxes/"+sb.ID+"/leases", `{"ttl_seconds":99999999}`, 400, nil)
	tok := l.Token
	e.must(tok, "GET", "/v1/sandboxes/"+sb.ID, "", 200, nil)
	e.must(tok, "PUT", "/v1/sandboxes/"+sb.ID+"/files?path=/f", "x", 0, nil)
	for _, c := range []struct{ method, path, body string }{
		{"POST", "/v1/sandboxes/" + sb.ID + "/exec", `{"cmd":["true"]}`}, // not granted
		{"GET", "/v1/sandboxes/" + other.ID, ""},
		{"GET", "/v1/sandboxes/" + other.ID + "/files?path=/f", ""},
		{"GET", "/v1/sandboxes", ""},
		{"POST", "/v1/sandboxes", `{"template":"base"}`},
		{"POST", "/v1/sandboxes/" + sb.ID + "/fork", `{}`},
		{"POST", "/v1/sandboxes/" + sb.ID + "/network", `{"allow":["example.com"]}`},
		{"POST", "/v1/sandboxes/" + sb.ID + "/quarantine", ``},
		{"POST", "/v1/sandboxes/" + sb.ID + "/release", ``},
		{"POST", "/v1/sandboxes/" + sb.ID + "/leases", `{"scopes":["files"]}`},
		{"POST", "/v1/sandboxes/" + sb.ID + "/ports/80/token", `{}`},
		{"POST", "/v1/keys", `{"role":"viewer"}`},
	} {
		if code, body := e.do(tok, c.method, c.path, c.body); code != 403 {
			t.Errorf("lease: %s %s: %d %s, want 403", c.method, c.path, code, body)
		}
	}
	// The create-time lease: the fixed lease scopes, not network.
	e.must(sb.LeaseToken, "POST", "/v1/sandboxes/"+sb.ID+"/exec", `{"cmd":["true"]}`, 200, nil)
	e.must(sb.LeaseToken, "POST", "/v1/sandboxes/"+sb.ID+"/network", `{"allow":["example.com"]}`, 403, nil)
	e.must(sb.LeaseToken, "POST", "/v1/sandboxes/"+sb.ID+"/fork", `{}`, 403, nil)

	// Expiry.
	var short api.Lease
	e.must(ka.Key, "POST", "/v1/sandboxes/"+other.ID+"/leases", `{"ttl_seconds":5}`, 201, &short)
	e.must(short.Token, "GET", "/v1/sandboxes/"+other.ID, "", 200, nil)
	e.clock.Advance(6 * time.Second)
	e.must(short.Token, "GET", "/v1/sandboxes/"+other.ID, "", 401, nil)

	// Stop, then start: the leases stay dead.
	e.must(ka.Key, "POST", "/v1/sandboxes/"+sb.ID+"/stop", "", 200, nil)
	e.must(tok, "GET", "/v1/sandboxes/"+sb.ID, "", 401, nil)
	e.must(ka.Key, "POST", "/v1/sandboxes/"+sb.ID+"/start", "", 200, nil)
	e.must(tok, "GET", "/v1/sandboxes/"+sb.ID, "", 401, nil)
	e.must(sb.LeaseToken, "GET", "/v1/sandboxes/"+sb.ID, "", 401, nil)

	// Quarantine, then release.
	e.must(ka.Key, "POST", "/v1/sandboxes/"+other.ID+"/leases", `{}`, 201, &l)
	e.must(l.Token, "GET", "/v1/sandboxes/"+other.ID, "", 200, nil)
	e.must(ka.Key, "POST", "/v1/sandboxes/"+other.ID+"/quarantine", "", 200, nil)
	e.must(l.Token, "GET", "/v1/sandboxes/"+other.ID, "", 401, nil)
	e.must(ka.Key, "POST", "/v1/sandboxes/"+other.ID+"/release", "", 200, nil)
	e.must(l.Token, "GET", "/v1/sandboxes/"+other.ID, "", 401, nil)

	// The minting key's revocation.
	minter := e.key("local", "a", "member")
	e.must(minter.Key, "POST", "/v1/sandboxes/"+other.ID+"/leases", `{}`, 201, &l)
	e.must(l.Token, "GET", "/v1/sandboxes/"+other.ID, "", 200, nil)
	e.must("local", "DELETE", "/v1/keys/"+minter.ID, "", 200, nil)
	e.must(l.Token, "GET", "/v1/sandboxes/"+other.ID, "", 401, nil)

	// Delete.
	e.must(ka.Key, "POST", "/v1/sandboxes/"+other.ID+"/leases", `{}`, 201, &l)
	e.must(ka.Key, "DELETE", "/v1/sandboxes/"+other.ID, "", 200, nil)
	e.must(l.Token, "GET", "/v1/sandboxes/"+other.ID, "", 401, nil)
	e.must(other.LeaseToken, "GET", "/v1/sandboxes/"+other.ID, "", 401, nil)
	// A forged one.
	e.must(strings.TrimSuffix(l.Token, l.Token[len(l.Token)-4:])+"0000", "GET", "/v1/sandboxes/"+other.ID, "", 401, nil)
}

// serveHTTP answers HTTP on a memnode port with what it received.
func serveHTTP(n *memnode.Node, id string, port int) {
	n.Listen(id, port, func(c net.Conn) {
		defer c.Close()
		req, err := http.ReadRequest(bufio.NewReader(c))
		if err != nil {
			return
		}
		var cookies []string
		for _, ck := range req.Cookies() {
			cookies = append(cookies, ck.Name)
		}
		body := fmt.Sprintf("port %d path %s query %q cookies %v auth %q", port, req.URL.Path, req.URL.RawQuery, cookies,
			req.Header.Get("Authorization"))
		resp := &http.Response{StatusCode: 200, ProtoMajor: 1, ProtoMinor: 1, Header: http.Header{},
			Body: io.NopCloser(strings.NewReader(body)), ContentLength: int64(len(body)), Close: true}
		var buf bytes.Buffer
		resp.Write(&buf)
		c.Write(buf.Bytes())
	})
}

// TestPortTokens: on a port's own host name ({port}-{id}.{domain}) a port
// token in the query becomes a cookie of that host alone and leaves the
// URL; a browser-like client (cookie jar) then opens that port of that
// sandbox, and no other port nor another sandbox. On the path-routed proxy
// (the daemon's own origin) the token goes in a header only: no query, no
// cookie, and the answer is sandboxed. The token never reaches the sandbox;
// it expires; it is no API credential.
func TestPortTokens(t *testing.T) {
	e := newTenv(t)
	e.tenant("a")
	ka := e.key("local", "a", "member")
	sb := e.sandbox(ka.Key, `{"template":"base"}`)
	other := e.sandbox(ka.Key, `{"template":"base"}`)
	for _, id := range []string{sb.ID, other.ID} {
		serveHTTP(e.node, id, 8080)
		serveHTTP(e.node, id, 9090)
	}
	var pt api.PortToken
	e.must(ka.Key, "POST", "/v1/sandboxes/"+sb.ID+"/ports/8080/token", `{"ttl_seconds":600}`, 201, &pt)
	e.must(ka.Key, "POST", "/v1/sandboxes/"+sb.ID+"/ports/0/token", `{}`, 400, nil)
	viewer := e.key("local", "a", "viewer")
	e.must(viewer.Key, "POST", "/v1/sandboxes/"+sb.ID+"/ports/8080/token", `{}`, 403, nil)
	host := "8080-" + sb.ID + "." + testDomain
	if pt.URL != admin.PortPath(sb.ID, 8080) || !strings.Contains(pt.BrowserURL, "://"+host+":") ||
		!strings.Contains(pt.BrowserURL, auth.PortTokenParam+"=") {
		t.Fatalf("token URLs: %+v", pt)
	}

	// The host-routed name, as a browser meets it: a client whose every
	// request goes to the test server but carries the port's host name.
	jar, _ := cookiejar.New(nil)
	tcpAddr := strings.TrimPrefix(e.tcp.URL, "http://")
	browser := &http.Client{Jar: jar, Timeout: 30 * time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "tcp", tcpAddr)
		}}}
	resp, err := browser.Get(pt.BrowserURL + "&q=1")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(body), "port 8080 path / query \"q=1\" cookies [] auth \"\"") {
		t.Fatalf("through the token URL: %d %s", resp.StatusCode, body)
	}
	if strings.Contains(resp.Request.URL.RawQuery, auth.PortTokenParam) {
		t.Errorf("the token stayed in the URL: %s", resp.Request.URL)
	}
	u, _ := url.Parse(pt.BrowserURL)
	if cs := jar.Cookies(u); len(cs) != 1 || cs[0].Name != auth.PortTokenParam {
		t.Fatalf("cookies of the port's host: %v", cs)
	}
	// The Set-Cookie attributes: this host's alone.
	code, _ := e.doHost("", "GET", "/?"+auth.PortTokenParam+"="+url.QueryEscape(pt.Token), host, "")
	if code != http.StatusSeeOther {
		t.Errorf("token URL: %d, want 303", code)
	}
	req, _ := http.NewRequest("GET", e.tcp.URL+"/?"+auth.PortTokenParam+"="+url.QueryEscape(pt.Token), nil)
	req.Host = host
	r2, err := noRedirect.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	r2.Body.Close()
	sc := r2.Header.Get("Set-Cookie")
	for _, want := range []string{"HttpOnly", "SameSite=Lax", "Path=/"} {
		if !strings.Contains(sc, want) {
			t.Errorf("Set-Cookie %q lacks %s", sc, want)
		}
	}
	if strings.Contains(strings.ToLower(sc), "domain=") {
		t.Errorf("Set-Cookie %q names a Domain: the cookie must be the port's host's alone", sc)
	}
	u.Path = "/deep"
	u.RawQuery = ""
	if resp, err := browser.Get(u.String()); err != nil {
		t.Fatal(err)
	} else {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || !strings.Contains(string(b), "path /deep") {
			t.Errorf("cookie on its host: %d %s", resp.StatusCode, b)
		}
	}
	for _, h := range []string{"9090-" + sb.ID + "." + testDomain, "8080-" + other.ID + "." + testDomain} {
		if code, _ := e.doHost("", "GET", "/?"+auth.PortTokenParam+"="+url.QueryEscape(pt.Token), h, ""); code != 401 {
			t.Errorf("the port token on %s: %d, want 401", h, code)
		}
	}

	// The path-routed proxy: the header opens the port, the query and the
	// cookie do not, and the answer is sandboxed in a browser.
	get := func(path string, hdr map[string]string) (int, string, http.Header) {
		req, _ := http.NewRequest("GET", e.tcp.URL+path, nil)
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		resp, err := noRedirect.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b), resp.Header
	}
	code, b, h := get(admin.PortPath(sb.ID, 8080)+"deep", map[string]string{PortTokenHeader: pt.Token, "Cookie": "other=1"})
	if code != 200 || !strings.Contains(b, "path /deep") || !strings.Contains(b, "cookies []") {
		t.Errorf("the header on the path route: %d %s", code, b)
	}
	if h.Get("Content-Security-Policy") != "sandbox" {
		t.Errorf("a path-routed answer without CSP sandbox: %v", h)
	}
	if code, b, _ := get(admin.PortPath(sb.ID, 8080)+"?"+auth.PortTokenParam+"="+url.QueryEscape(pt.Token), nil); code != 401 {
		t.Errorf("the query token on the path route: %d %s, want 401", code, b)
	}
	if code, b, _ := get(admin.PortPath(sb.ID, 8080), map[string]string{"Cookie": auth.PortTokenParam + "=" + pt.Token}); code != 401 {
		t.Errorf("the cookie on the path route: %d %s, want 401", code, b)
	}
	for _, path := range []string{admin.PortPath(sb.ID, 9090), admin.PortPath(other.ID, 8080), "/v1/sandboxes/" + sb.ID, "/v1/sandboxes"} {
		if code, b, _ := get(path, map[string]string{PortTokenHeader: pt.Token}); code != 401 {
			t.Errorf("the port token on %s: %d %s, want 401", path, code, b)
		}
	}
	if code, _ := e.do(pt.Token, "GET", admin.PortPath(sb.ID, 8080), ""); code != 401 {
		t.Errorf("the port token as a bearer: %d, want 401", code)
	}
	// Expiry, the sandbox's stop and start, revocation.
	var short api.PortToken
	e.must(ka.Key, "POST", "/v1/sandboxes/"+other.ID+"/ports/8080/token", `{"ttl_seconds":600}`, 201, &short)
	hdr := map[string]string{PortTokenHeader: short.Token}
	if code, _, _ := get(admin.PortPath(other.ID, 8080), hdr); code != 200 {
		t.Errorf("second token: %d", code)
	}
	e.must(ka.Key, "POST", "/v1/sandboxes/"+other.ID+"/stop", "", 200, nil)
	if code, _, _ := get(admin.PortPath(other.ID, 8080), hdr); code != 401 {
		t.Errorf("a port token of a stopped sandbox: %d, want 401", code)
	}
	e.must(ka.Key, "POST", "/v1/sandboxes/"+other.ID+"/start", "", 200, nil)
	serveHTTP(e.node, other.ID, 8080)
	if code, b, _ := get(admin.PortPath(other.ID, 8080), hdr); code != 200 {
		t.Errorf("a port token after its sandbox's start: %d %s, want 200 (valid until expiry or revocation)", code, b)
	}
	var list []api.PortTokenInfo
	e.must(ka.Key, "GET", "/v1/sandboxes/"+other.ID+"/port-tokens", "", 200, &list)
	if len(list) != 1 || list[0].ID != short.ID || list[0].RevokedAt != nil || list[0].CreatedBy != "key:"+ka.ID {
		t.Fatalf("port tokens listed: %+v", list)
	}
	kb := func() string { e.tenant("b"); return e.key("local", "b", "admin").Key }()
	e.must(kb, "DELETE", "/v1/sandboxes/"+other.ID+"/port-tokens/"+short.ID, "", 404, nil)
	e.must(ka.Key, "DELETE", "/v1/sandboxes/"+sb.ID+"/port-tokens/"+short.ID, "", 404, nil)
	e.must(ka.Key, "DELETE", "/v1/sandboxes/"+other.ID+"/port-tokens/"+short.ID, "", 200, nil)
	if code, _, _ := get(admin.PortPath(other.ID, 8080), hdr); code != 401 {
		t.Errorf("a revoked port token: %d, want 401", code)
	}
	// Its minting key's revocation ends a port token.
	minter := e.key("local", "a", "member")
	var mt api.PortToken
	e.must(minter.Key, "POST", "/v1/sandboxes/"+sb.ID+"/ports/8080/token", `{}`, 201, &mt)
	if code, _, _ := get(admin.PortPath(sb.ID, 8080), map[string]string{PortTokenHeader: mt.Token}); code != 200 {
		t.Errorf("a fresh token: %d", code)
	}
	e.must("local", "DELETE", "/v1/keys/"+minter.ID, "", 200, nil)
	if code, _, _ := get(admin.PortPath(sb.ID, 8080), map[string]string{PortTokenHeader: mt.Token}); code != 401 {
		t.Errorf("a port token of a revoked key: %d, want 401", code)
	}
	e.clock.Advance(601 * time.Second)
	if resp, err := browser.Get(u.String()); err != nil || resp.StatusCode != 401 {
		t.Errorf("an expired port token: %v %v, want 401", resp.StatusCode, err)
	}
}
