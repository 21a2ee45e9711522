package server

// The rights of issue #30: every token is derived from its caller, key
// management never acts above the caller's own rights, tenant parameters
// name tenants that exist.

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	mcpsdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/berth-sh/berth/api"
)

// TestCreateLeaseScopedToCreator: the lease_token a create hands out
// holds no right its creator lacks. A key without exec and files creates
// a sandbox; its lease token may read it, but neither exec nor touch
// files in it (before the fix, the create-time lease held every lease
// scope whoever made it).
func TestCreateLeaseScopedToCreator(t *testing.T) {
	e := newTenv(t)
	e.tenant("a")
	k := e.key("local", "a", "member", "sandboxes:read", "sandboxes:write")
	sb := e.sandbox(k.Key, `{"template":"base"}`)
	if sb.LeaseToken == "" {
		t.Fatal("create returned no lease token")
	}
	e.must(sb.LeaseToken, "GET", "/v1/sandboxes/"+sb.ID, "", 200, nil)
	e.must(sb.LeaseToken, "POST", "/v1/sandboxes/"+sb.ID+"/touch", "", 0, nil)
	for _, c := range []struct{ method, path, body string }{
		{"POST", "/v1/sandboxes/" + sb.ID + "/exec", `{"cmd":["true"]}`},
		{"POST", "/v1/sandboxes/" + sb.ID + "/processes", `{"cmd":["true"]}`},
		{"PUT", "/v1/sandboxes/" + sb.ID + "/files?path=/f", "x"},
		{"GET", "/v1/sandboxes/" + sb.ID + "/files?path=/etc/hostname", ""},
		{"POST", "/v1/sandboxes/" + sb.ID + "/ports/80/token", `{}`},
	} {
		if code, body := e.do(sb.LeaseToken, c.method, c.path, c.body); code != 403 {
			t.Errorf("creator without exec/files: %s %s with the create's lease: %d %s, want 403", c.method, c.path, code, body)
		}
	}
	// A full member's create lease still holds exec and files.
	m := e.key("local", "a", "member")
	full := e.sandbox(m.Key, `{"template":"base"}`)
	e.must(full.LeaseToken, "POST", "/v1/sandboxes/"+full.ID+"/exec", `{"cmd":["true"]}`, 200, nil)
	// The create lease dies with its creator's key.
	e.must("local", "DELETE", "/v1/keys/"+m.ID, "", 200, nil)
	e.must(full.LeaseToken, "GET", "/v1/sandboxes/"+full.ID, "", 401, nil)
}

// TestRevokeKeyWithinOwnRights: a key holding keys (and not admin) makes
// and revokes only keys within its own scopes; its tenant's admin keys,
// and members holding exec, are out of its reach.
func TestRevokeKeyWithinOwnRights(t *testing.T) {
	e := newTenv(t)
	e.tenant("a")
	admin := e.key("local", "a", "admin")
	member := e.key("local", "a", "member")
	mgr := e.key(admin.Key, "", "admin", "keys", "sandboxes:read")
	viewer := e.key(mgr.Key, "", "viewer")
	for _, k := range []string{admin.ID, member.Prefix} {
		if code, body := e.do(mgr.Key, "DELETE", "/v1/keys/"+k, ""); code != 403 {
			t.Errorf("keys-only key revoking %s: %d %s, want 403", k, code, body)
		}
	}
	e.must(admin.Key, "GET", "/v1/sandboxes", "", 200, nil)
	e.must(member.Key, "GET", "/v1/sandboxes", "", 200, nil)
	// Within its own rights: a viewer key, and itself.
	e.must(mgr.Key, "DELETE", "/v1/keys/"+viewer.ID, "", 200, nil)
	e.must(viewer.Key, "GET", "/v1/sandboxes", "", 401, nil)
	e.must(admin.Key, "DELETE", "/v1/keys/"+member.ID, "", 200, nil)
	e.must(mgr.Key, "DELETE", "/v1/keys/"+mgr.ID, "", 200, nil)
}

// TestTenantParameters: quotas are set and read only for tenants that
// exist, by names tenants may have.
func TestTenantParameters(t *testing.T) {
	e := newTenv(t)
	e.tenant("a")
	e.must("local", "PUT", "/v1/tenants/a/quota", `{"max_sandboxes":3}`, 200, nil)
	for _, c := range []struct {
		method, path string
		want         int
	}{
		{"PUT", "/v1/tenants/nope/quota", 404},
		{"GET", "/v1/tenants/nope/quota", 404},
		{"PUT", "/v1/tenants/..%2Fx/quota", 400},
		{"PUT", "/v1/tenants/Bad%20Name/quota", 400},
		{"DELETE", "/v1/tenants/..%2Fx", 400},
	} {
		code, body := e.do("local", c.method, c.path, `{"max_sandboxes":3}`)
		if c.method != "PUT" {
			code, body = e.do("local", c.method, c.path, "")
		}
		if code != c.want {
			t.Errorf("%s %s: %d %s, want %d", c.method, c.path, code, body, c.want)
		}
	}
	if code, body := e.do("local", "GET", "/v1/tenants/a/quota", ""); code != 200 || !strings.Contains(body, `"max_sandboxes": 3`) {
		t.Errorf("quota of a: %d %s", code, body)
	}
}

// TestTenantShares: one tenant cannot take every MCP session nor every
// upload slot; another tenant still gets its own, and the host is not
// capped by tenant. Before the fix, one tenant's sessions filled the
// daemon's 64.
func TestTenantShares(t *testing.T) {
	e := newTenv(t)
	e.tenant("a")
	e.tenant("b")
	ka := e.key("local", "a", "member")
	kb := e.key("local", "b", "member")

	t.Run("mcp sessions", func(t *testing.T) {
		e.srv.MCPMaxSessions = 8 // a quarter, 2, per tenant
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		connect := func(key string) (*mcpsdk.ClientSession, error) {
			hc := &http.Client{Transport: bearer{key, http.DefaultTransport}}
			return mcpsdk.NewClient(&mcpsdk.Implementation{Name: "test", Version: "1"}, nil).Connect(ctx,
				&mcpsdk.StreamableClientTransport{Endpoint: e.tcp.URL + "/v1/mcp", HTTPClient: hc, MaxRetries: -1}, nil)
		}
		var open []*mcpsdk.ClientSession
		// The SDK's client probes with a request that may make a session
		// the server ends at once; wait for it to be gone.
		settle := func() {
			for deadline := time.Now().Add(10 * time.Second); e.srv.mcp.handler.Sessions() != len(open); {
				if time.Now().After(deadline) {
					t.Fatalf("%d MCP sessions, want %d", e.srv.mcp.handler.Sessions(), len(open))
				}
				time.Sleep(10 * time.Millisecond)
			}
		}
		defer func() {
			for _, cs := range open {
				cs.Close()
			}
		}()
		for range 2 {
			cs, err := connect(ka.Key)
			if err != nil {
				t.Fatal(err)
			}
			open = append(open, cs)
			settle()
		}
		if cs, err := connect(ka.Key); err == nil {
			cs.Close()
			t.Fatal("tenant a opened a third MCP session past its share of 2")
		} else if !strings.Contains(err.Error(), "429") && !strings.Contains(err.Error(), "Too Many") {
			t.Logf("refused: %v", err)
		}
		cs, err := connect(kb.Key)
		if err != nil {
			t.Fatalf("tenant b's session while a holds its share: %v", err)
		}
		open = append(open, cs)
	})

	t.Run("uploads", func(t *testing.T) {
		old := maxUploadsPerTenant
		maxUploadsPerTenant = 1
		t.Cleanup(func() { maxUploadsPerTenant = old })
		sa := e.sandbox(ka.Key, `{"template":"base"}`)
		sb := e.sandbox(kb.Key, `{"template":"base"}`)
		// An upload held open: its body never ends until the test says.
		pr, pw := io.Pipe()
		defer pw.Close()
		req, _ := http.NewRequest("PUT", e.tcp.URL+"/v1/sandboxes/"+sa.ID+"/files?path=/held", pr)
		req.Header.Set("Authorization", "Bearer "+ka.Key)
		done := make(chan int, 1)
		go func() {
			resp, err := (&http.Client{Transport: &http.Transport{DisableKeepAlives: true}}).Do(req)
			if err != nil {
				done <- 0
				return
			}
			resp.Body.Close()
			done <- resp.StatusCode
		}()
		// More than the client's buffer, so the request is on the wire.
		pw.Write(make([]byte, 64<<10))
		// The held upload has its slot once the server took it in.
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
			e.srv.uploads.mu.Lock()
			n := e.srv.uploads.open["a"]
			e.srv.uploads.mu.Unlock()
			if n == 1 {
				break
			}
			select {
			case c := <-done:
				t.Fatalf("the held upload ended early: %d", c)
			default:
			}
			if time.Now().After(deadline) {
				t.Fatal("the held upload never reached the server")
			}
		}
		code, body := e.do(ka.Key, "PUT", "/v1/sandboxes/"+sa.ID+"/files?path=/second", "y")
		if code != 429 || !strings.Contains(body, "tenant a") {
			t.Fatalf("a second upload of tenant a past its share of 1: %d %s", code, body)
		}
		e.must(kb.Key, "PUT", "/v1/sandboxes/"+sb.ID+"/files?path=/other", "z", 0, nil)
		e.must("local", "PUT", "/v1/sandboxes/"+sa.ID+"/files?path=/host", "h", 0, nil)
		pw.Close()
		if code := <-done; code != 200 {
			t.Fatalf("the held upload: %d", code)
		}
		e.must(ka.Key, "PUT", "/v1/sandboxes/"+sa.ID+"/files?path=/third", "y", 0, nil)
	})
}

// TestLeaseRevokedByItself: one lease ends by itself, not only with its
// key or its sandbox's stop (before, no route revoked a single lease: a
// lease handed to code that misbehaved lived until its expiry unless its
// minting key, and everything else that key made, was revoked). Its
// streams end with it; its sibling leases and its key live on; another
// tenant's key, another sandbox's path and a caller lacking a scope the
// lease holds are refused.
func TestLeaseRevokedByItself(t *testing.T) {
	e := newTenv(t)
	e.tenant("a")
	e.tenant("b")
	owner := e.key("local", "a", "member")
	sb := e.sandbox(owner.Key, `{"template":"base"}`)
	other := e.sandbox(owner.Key, `{"template":"base"}`)
	var l1, l2 api.Lease
	e.must(owner.Key, "POST", "/v1/sandboxes/"+sb.ID+"/leases", `{"scopes":["exec"]}`, 201, &l1)
	e.must(owner.Key, "POST", "/v1/sandboxes/"+sb.ID+"/leases", `{"scopes":["exec"]}`, 201, &l2)

	// A stream opened with the lease.
	c := e.wsOpen(l1.Token, "/v1/sandboxes/"+sb.ID+"/exec/ws", nil)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.Write(ctx, websocket.MessageText, []byte(`{"cmd":["cat"],"tty":true}`)); err != nil {
		t.Fatal(err)
	}

	stranger := e.key("local", "b", "admin")
	noExec := e.key("local", "a", "member", "sandboxes:read", "sandboxes:write")
	for _, c := range []struct {
		name, cred, path string
		want             int
	}{
		{"another tenant's key", stranger.Key, "/v1/sandboxes/" + sb.ID + "/leases/" + l1.ID, 404},
		{"another sandbox's path", owner.Key, "/v1/sandboxes/" + other.ID + "/leases/" + l1.ID, 404},
		{"no such lease", owner.Key, "/v1/sandboxes/" + sb.ID + "/leases/nosuch", 404},
		{"a key without exec", noExec.Key, "/v1/sandboxes/" + sb.ID + "/leases/" + l1.ID, 403},
		{"the lease itself", l1.Token, "/v1/sandboxes/" + sb.ID + "/leases/" + l1.ID, 403},
	} {
		if code, body := e.do(c.cred, "DELETE", c.path, ""); code != c.want {
			t.Errorf("%s revoking the lease: %d %s, want %d", c.name, code, body, c.want)
		}
	}
	e.must(l1.Token, "GET", "/v1/sandboxes/"+sb.ID, "", 200, nil)

	e.must(owner.Key, "DELETE", "/v1/sandboxes/"+sb.ID+"/leases/"+l1.ID, "", 204, nil)
	if !wsEnds(c, revokeWithin) {
		t.Error("the lease's terminal outlived the lease's revocation")
	}
	e.must(l1.Token, "GET", "/v1/sandboxes/"+sb.ID, "", 401, nil)
	e.must(l2.Token, "GET", "/v1/sandboxes/"+sb.ID, "", 200, nil)
	e.must(owner.Key, "GET", "/v1/sandboxes/"+sb.ID, "", 200, nil)
	// Again: no error. The create-time lease by its id, c-<sandbox>.
	e.must(owner.Key, "DELETE", "/v1/sandboxes/"+sb.ID+"/leases/"+l1.ID, "", 204, nil)
	e.must(sb.LeaseToken, "GET", "/v1/sandboxes/"+sb.ID, "", 200, nil)
	e.must(owner.Key, "DELETE", "/v1/sandboxes/"+sb.ID+"/leases/c-"+sb.ID, "", 204, nil)
	e.must(sb.LeaseToken, "GET", "/v1/sandboxes/"+sb.ID, "", 401, nil)
}

// TestKeyNotOutlivingCreator: a key that expires makes keys that end with
// it at the latest (before, a console session's key, good for hours,
// could make itself a key that never expires).
func TestKeyNotOutlivingCreator(t *testing.T) {
	e := newTenv(t)
	e.tenant("a")
	var short api.CreatedAPIKey
	e.must("local", "POST", "/v1/keys", `{"tenant":"a","role":"admin","expires_in_seconds":3600}`, 201, &short)
	if short.ExpiresAt == nil {
		t.Fatal("the short key has no expiry")
	}
	if code, body := e.do(short.Key, "POST", "/v1/keys", `{"role":"member","expires_in_seconds":7200}`); code != 403 {
		t.Errorf("a key outliving its maker: %d %s, want 403", code, body)
	}
	var inherited, shorter api.CreatedAPIKey
	e.must(short.Key, "POST", "/v1/keys", `{"role":"member"}`, 201, &inherited)
	if inherited.ExpiresAt == nil || inherited.ExpiresAt.Sub(*short.ExpiresAt).Abs() > time.Millisecond { // the store keeps µs
		t.Errorf("a key made without expiry by a key expiring at %v expires at %v, want the same", short.ExpiresAt, inherited.ExpiresAt)
	}
	e.must(short.Key, "POST", "/v1/keys", `{"role":"member","expires_in_seconds":60}`, 201, &shorter)
	e.clock.Advance(3601 * time.Second)
	e.must(inherited.Key, "GET", "/v1/sandboxes", "", 401, nil)
	// The host, and a key without expiry, still make keys without one.
	var forever, child api.CreatedAPIKey
	e.must("local", "POST", "/v1/keys", `{"tenant":"a","role":"admin"}`, 201, &forever)
	e.must(forever.Key, "POST", "/v1/keys", `{"role":"member"}`, 201, &child)
	if forever.ExpiresAt != nil || child.ExpiresAt != nil {
		t.Errorf("keys without expiry: %v %v", forever.ExpiresAt, child.ExpiresAt)
	}
}
