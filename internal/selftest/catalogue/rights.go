package catalogue

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/client"
	"github.com/berth-sh/berth/internal/auth"
	"github.com/berth-sh/berth/internal/selftest/attack"
)

// Rights behind every door (issue #30), tried as a tenant's low-privilege
// credential over TCP: a token never holds a right its minting principal
// lacks, key management never acts above the caller's own rights, tenant
// parameters name tenants that exist, a revoked credential's open
// connection ends, a port token is revocable. Each attack works in a
// tenant of its own, made for it and deleted after.
func rightsAttacks() []*attack.Attack {
	x := tenantAttack
	return []*attack.Attack{
		x("create-lease-scope", "exec and write files through the lease_token of a sandbox created by a key without exec or files", "403",
			func(ctx ctxT, e *attack.Env, tcp *attack.RawClient, tn *tenantRun) attack.Outcome {
				k, err := tn.key(ctx, "member", "sandboxes:read", "sandboxes:write")
				if err != nil {
					return attack.Escaped("%v", err)
				}
				sb, err := tn.create(ctx, tcp, k.Key)
				if err != nil {
					return attack.Escaped("%v", err)
				}
				st1, r1, err := tcp.Do(ctx, "POST", "/v1/sandboxes/"+sb.ID+"/exec", sb.LeaseToken, api.ExecRequest{Cmd: []string{"true"}})
				if err != nil {
					return attack.Escaped("request: %v", err)
				}
				st2, r2, err := tcp.Do(ctx, "PUT", "/v1/sandboxes/"+sb.ID+"/files?path=/tmp/x", sb.LeaseToken, "x")
				if err != nil {
					return attack.Escaped("request: %v", err)
				}
				return attack.Judged(denied(st1) && denied(st2), "exec with the create's lease: %d %s; files: %d %s", st1,
					attack.Clip(attack.OneLine(r1), 50), st2, attack.Clip(attack.OneLine(r2), 50))
			}),
		x("keys-revoke-admin", "revoke the tenant's admin key with a key holding only keys", "403, the admin key still works",
			func(ctx ctxT, e *attack.Env, tcp *attack.RawClient, tn *tenantRun) attack.Outcome {
				adm, err := tn.key(ctx, "admin")
				if err != nil {
					return attack.Escaped("%v", err)
				}
				mgr, err := tn.key(ctx, "admin", "keys")
				if err != nil {
					return attack.Escaped("%v", err)
				}
				st, resp, err := tcp.Do(ctx, "DELETE", "/v1/keys/"+adm.ID, mgr.Key, nil)
				if err != nil {
					return attack.Escaped("request: %v", err)
				}
				after, _, err := tcp.Do(ctx, "GET", "/v1/keys", adm.Key, nil)
				if err != nil {
					return attack.Escaped("request: %v", err)
				}
				return attack.Judged(denied(st) && after == 200, "DELETE the admin key with a keys-only key: %d %s; the admin key then: %d",
					st, attack.Clip(attack.OneLine(resp), 60), after)
			}),
		x("quota-bad-tenant", "set a quota for tenant ../x and for a tenant that does not exist", "400 and 404",
			func(ctx ctxT, e *attack.Env, tcp *attack.RawClient, tn *tenantRun) attack.Outcome {
				st1, _, err := e.Raw.Do(ctx, "PUT", "/v1/tenants/..%2Fx/quota", "", api.QuotaRequest{MaxSandboxes: 1})
				if err != nil {
					return attack.Escaped("request: %v", err)
				}
				st2, _, err := e.Raw.Do(ctx, "PUT", "/v1/tenants/"+tn.name+"-gone/quota", "", api.QuotaRequest{MaxSandboxes: 1})
				if err != nil {
					return attack.Escaped("request: %v", err)
				}
				return attack.Judged(st1 == 400 && st2 == 404, "../x: %d; a tenant that does not exist: %d", st1, st2)
			}),
		x("revoked-key-pty", "keep a terminal (exec WebSocket) open after its key is revoked", "the connection ends within 10 s",
			func(ctx ctxT, e *attack.Env, tcp *attack.RawClient, tn *tenantRun) attack.Outcome {
				k, err := tn.key(ctx, "member")
				if err != nil {
					return attack.Escaped("%v", err)
				}
				sb, err := tn.create(ctx, tcp, k.Key)
				if err != nil {
					return attack.Escaped("%v", err)
				}
				kc, err := client.New(tcpBase(e), k.Key)
				if err != nil {
					return attack.Escaped("%v", err)
				}
				defer kc.Close()
				stdin, hold := io.Pipe()
				defer hold.Close()
				var out attack.SyncBuffer
				done := make(chan error, 1)
				go func() {
					_, err := kc.ExecInteractive(ctx, sb.ID, api.ExecRequest{Cmd: []string{"sh", "-c", "echo open; exec cat"}, TTY: true}, stdin, &out, &out, nil)
					done <- err
				}()
				for deadline := time.Now().Add(60 * time.Second); !strings.Contains(out.String(), "open"); time.Sleep(50 * time.Millisecond) {
					select {
					case err := <-done:
						return attack.Escaped("the terminal ended before the revocation: %v", err)
					default:
					}
					if time.Now().After(deadline) {
						return attack.Escaped("the terminal never opened")
					}
				}
				if _, err := e.C.RevokeAPIKey(ctx, k.ID); err != nil {
					return attack.Escaped("revoke: %v", err)
				}
				start := time.Now()
				select {
				case err := <-done:
					return attack.Contained("the terminal ended %.1f s after the revocation (%v)", time.Since(start).Seconds(), err)
				case <-time.After(10 * time.Second):
					hold.Close()
					return attack.Escaped("the terminal still ran 10 s after its key was revoked")
				}
			}),
		x("port-token-revoked", "open a port with a port token after it was revoked", "401",
			func(ctx ctxT, e *attack.Env, tcp *attack.RawClient, tn *tenantRun) attack.Outcome {
				k, err := tn.key(ctx, "member")
				if err != nil {
					return attack.Escaped("%v", err)
				}
				sb, err := tn.create(ctx, tcp, k.Key)
				if err != nil {
					return attack.Escaped("%v", err)
				}
				var pt api.PortToken
				st, resp, err := tcp.Do(ctx, "POST", "/v1/sandboxes/"+sb.ID+"/ports/8080/token", k.Key, api.CreatePortTokenRequest{TTLSeconds: 600})
				if err != nil || st != 201 || jsonInto(resp, &pt) != nil || pt.ID == "" {
					return attack.Escaped("mint: %d %v %s", st, err, attack.Clip(resp, 80))
				}
				if st, resp, err := tcp.Do(ctx, "DELETE", "/v1/sandboxes/"+sb.ID+"/port-tokens/"+pt.ID, k.Key, nil); err != nil || st != 200 {
					return attack.Escaped("revoke: %d %v %s", st, err, attack.Clip(resp, 80))
				}
				st, resp, err = tcp.Do(ctx, "GET", "/v1/sandboxes/"+sb.ID+"/ports/8080/", pt.Token, nil)
				if err != nil {
					return attack.Escaped("request: %v", err)
				}
				return attack.Judged(st == 401, "GET the port with the revoked token: %d %s", st, attack.Clip(attack.OneLine(resp), 60))
			}),
		x("key-outlives-creator", "with a key that expires in an hour, make a key that expires later, and one with no expiry", "403 for the later one; the other ends with its maker",
			func(ctx ctxT, e *attack.Env, tcp *attack.RawClient, tn *tenantRun) attack.Outcome {
				short, err := e.C.CreateAPIKey(ctx, api.CreateAPIKeyRequest{Tenant: tn.name, Role: "admin", ExpiresInSeconds: 3600})
				if err != nil || short.ExpiresAt == nil {
					return attack.Escaped("an expiring key: %v", err)
				}
				st, resp, err := tcp.Do(ctx, "POST", "/v1/keys", short.Key, api.CreateAPIKeyRequest{Role: "member", ExpiresInSeconds: 7200})
				if err != nil {
					return attack.Escaped("request: %v", err)
				}
				if st != 403 {
					return attack.Escaped("a key outliving its maker: %d %s", st, attack.Clip(attack.OneLine(resp), 60))
				}
				var k api.CreatedAPIKey
				st, resp, err = tcp.Do(ctx, "POST", "/v1/keys", short.Key, api.CreateAPIKeyRequest{Role: "member"})
				if err != nil || st != 201 || jsonInto(resp, &k) != nil {
					return attack.Escaped("a key without expiry: %d %v %s", st, err, attack.Clip(resp, 80))
				}
				ends := k.ExpiresAt != nil && !k.ExpiresAt.After(*short.ExpiresAt)
				return attack.Judged(ends, "later: 403; without expiry: expires %v (maker %v)", k.ExpiresAt, short.ExpiresAt)
			}),
		x("port-path-origin", "serve a page that sets a cookie from a sandbox port, read it through the path-routed proxy on the daemon's own origin with a port token, and hand that route the token in its query as a link would", "the cookie dropped and the page sandboxed (CSP sandbox: an opaque origin); the query token refused (401), no cookie set",
			func(ctx ctxT, e *attack.Env, tcp *attack.RawClient, tn *tenantRun) attack.Outcome {
				k, err := tn.key(ctx, "member")
				if err != nil {
					return attack.Escaped("%v", err)
				}
				sb, err := tn.create(ctx, tcp, k.Key)
				if err != nil {
					return attack.Escaped("%v", err)
				}
				page := "import http.server as h\n" +
					"class H(h.BaseHTTPRequestHandler):\n" +
					"  def do_GET(s):\n" +
					"    s.send_response(200); s.send_header('Set-Cookie', 'planted=1; Path=/'); s.send_header('Content-Type', 'text/html'); s.end_headers(); s.wfile.write(b'<script>fetch(\"/v1/whoami\")</script>')\n" +
					"h.HTTPServer(('0.0.0.0', 8000), H).serve_forever()\n"
				st, resp, err := tcp.Do(ctx, "POST", "/v1/sandboxes/"+sb.ID+"/processes", k.Key,
					api.StartProcessRequest{ExecRequest: api.ExecRequest{Cmd: []string{"python3", "-c", page}}})
				if err != nil || st != 201 {
					return attack.Escaped("start the page's server: %d %v %s", st, err, attack.Clip(attack.OneLine(resp), 80))
				}
				var pt api.PortToken
				st, resp, err = tcp.Do(ctx, "POST", "/v1/sandboxes/"+sb.ID+"/ports/8000/token", k.Key, api.CreatePortTokenRequest{TTLSeconds: 600})
				if err != nil || st != 201 || jsonInto(resp, &pt) != nil || pt.Token == "" {
					return attack.Escaped("mint: %d %v %s", st, err, attack.Clip(resp, 80))
				}
				base := strings.TrimSuffix(tcpBase(e), "/") + "/v1/sandboxes/" + sb.ID + "/ports/8000/"
				get := func(url string, hdr map[string]string) (*http.Response, error) {
					req, err := http.NewRequestWithContext(ctx, "GET", url, nil)
					if err != nil {
						return nil, err
					}
					for k, v := range hdr {
						req.Header.Set(k, v)
					}
					hc := &http.Client{Timeout: 30 * time.Second,
						CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
					resp, err := hc.Do(req)
					if err == nil {
						_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
						resp.Body.Close()
					}
					return resp, err
				}
				var r *http.Response
				for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(250 * time.Millisecond) {
					r, err = get(base, map[string]string{"X-Berth-Port-Token": pt.Token})
					if err == nil && r.StatusCode == 200 {
						break
					}
					if time.Now().After(deadline) {
						return attack.Escaped("the page never answered through the proxy: %v %v", err, r)
					}
				}
				var bad []string
				if c := r.Header.Values("Set-Cookie"); len(c) > 0 {
					bad = append(bad, fmt.Sprintf("the page set %q on the daemon's origin", c))
				}
				if csp := r.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "sandbox") {
					bad = append(bad, fmt.Sprintf("the page is not sandboxed (CSP %q)", csp))
				}
				q, err := get(base+"?"+auth.PortTokenParam+"="+pt.Token, nil)
				if err != nil {
					return attack.Escaped("request: %v", err)
				}
				if q.StatusCode != 401 || len(q.Header.Values("Set-Cookie")) > 0 {
					bad = append(bad, fmt.Sprintf("the path route took the token from its query: %d, cookies %q", q.StatusCode, q.Header.Values("Set-Cookie")))
				}
				if len(bad) > 0 {
					return attack.Escaped("%s", strings.Join(bad, "; "))
				}
				return attack.Contained("no cookie, CSP sandbox; the query token 401")
			}),
		x("mcp-session-share", "open MCP sessions at /v1/mcp with one tenant's key until refused, then one with another tenant's key", "the first tenant refused (429) at its share, below the daemon's bound; the other tenant's session opens",
			func(ctx ctxT, e *attack.Env, tcp *attack.RawClient, tn *tenantRun) attack.Outcome {
				ka, err := tn.key(ctx, "member")
				if err != nil {
					return attack.Escaped("%v", err)
				}
				other, err := newTenantRun(ctx, e, "mcp-session-share-b")
				if err != nil {
					return attack.Escaped("%v", err)
				}
				defer other.cleanup(context.WithoutCancel(ctx))
				kb, err := other.key(ctx, "member")
				if err != nil {
					return attack.Escaped("%v", err)
				}
				base := strings.TrimSuffix(tcpBase(e), "/")
				var open []mcpSession
				defer func() {
					for _, s := range open {
						s.close(context.WithoutCancel(ctx), base)
					}
				}()
				refused := 0
				for range 70 { // past the default bound of 64
					s, st, err := openMCPSession(ctx, base, ka.Key)
					if err != nil {
						return attack.Escaped("open: %v", err)
					}
					if st != 200 {
						refused = st
						break
					}
					open = append(open, s)
				}
				if refused != 429 {
					return attack.Escaped("one tenant opened %d sessions, then %d (want 429 at its share)", len(open), refused)
				}
				s, st, err := openMCPSession(ctx, base, kb.Key)
				if err != nil {
					return attack.Escaped("open: %v", err)
				}
				if st != 200 {
					return attack.Escaped("one tenant holds %d sessions; the other tenant's was refused: %d", len(open), st)
				}
				open = append(open, s)
				return attack.Contained("refused 429 after %d sessions; the other tenant's opened", len(open)-1)
			}),
		x("lease-revoked", "run a command with a lease token after that lease alone was revoked (its key still valid)", "401",
			func(ctx ctxT, e *attack.Env, tcp *attack.RawClient, tn *tenantRun) attack.Outcome {
				k, err := tn.key(ctx, "member")
				if err != nil {
					return attack.Escaped("%v", err)
				}
				sb, err := tn.create(ctx, tcp, k.Key)
				if err != nil {
					return attack.Escaped("%v", err)
				}
				var l api.Lease
				st, resp, err := tcp.Do(ctx, "POST", "/v1/sandboxes/"+sb.ID+"/leases", k.Key, api.CreateLeaseRequest{Scopes: []string{"exec"}})
				if err != nil || st != 201 || jsonInto(resp, &l) != nil || l.ID == "" {
					return attack.Escaped("mint: %d %v %s", st, err, attack.Clip(resp, 80))
				}
				if st, resp, err := tcp.Do(ctx, "DELETE", "/v1/sandboxes/"+sb.ID+"/leases/"+l.ID, k.Key, nil); err != nil || st != 204 {
					return attack.Escaped("revoke: %d %v %s", st, err, attack.Clip(resp, 80))
				}
				st, resp, err = tcp.Do(ctx, "POST", "/v1/sandboxes/"+sb.ID+"/exec", l.Token, api.ExecRequest{Cmd: []string{"true"}})
				if err != nil {
					return attack.Escaped("request: %v", err)
				}
				return attack.Judged(st == 401, "exec with the revoked lease: %d %s", st, attack.Clip(attack.OneLine(resp), 60))
			}),
	}
}

// tenantRun is a tenant made for one attack, with the keys and sandboxes
// the attack made in it; cleanup deletes them and it.
type tenantRun struct {
	e         *attack.Env
	name      string
	sandboxes []string
}

func newTenantRun(ctx ctxT, e *attack.Env, id string) (*tenantRun, error) {
	name := strings.ToLower(fmt.Sprintf("st-%s-%s", e.Tag, strings.ReplaceAll(id, "_", "-")))
	if len(name) > 63 {
		name = name[:63]
	}
	name = strings.TrimRight(name, "-")
	if _, err := e.C.CreateTenant(ctx, name); err != nil {
		return nil, fmt.Errorf("create tenant %s: %w", name, err)
	}
	return &tenantRun{e: e, name: name}, nil
}

func (tn *tenantRun) key(ctx ctxT, role string, scopes ...string) (*api.CreatedAPIKey, error) {
	k, err := tn.e.C.CreateAPIKey(ctx, api.CreateAPIKeyRequest{Tenant: tn.name, Role: role, Scopes: scopes})
	if err != nil {
		return nil, fmt.Errorf("make a %s key: %w", role, err)
	}
	return k, nil
}

// create makes a sandbox of the env's class with key, over TCP.
func (tn *tenantRun) create(ctx ctxT, tcp *attack.RawClient, key string) (*api.Sandbox, error) {
	req := map[string]any{"runtime": tn.e.Class, "timeout_seconds": 900,
		"labels": map[string]string{"berth-selftest": tn.e.Tag}}
	st, resp, err := tcp.Do(ctx, "POST", "/v1/sandboxes", key, req)
	if err != nil {
		return nil, err
	}
	var sb api.Sandbox
	if st != 201 || jsonInto(resp, &sb) != nil || sb.ID == "" {
		return nil, fmt.Errorf("create with the tenant's key: %d %s", st, attack.Clip(attack.OneLine(resp), 80))
	}
	tn.sandboxes = append(tn.sandboxes, sb.ID)
	tn.e.Track(sb.ID)
	return &sb, nil
}

func jsonInto(s string, v any) error { return json.Unmarshal([]byte(s), v) }

func (tn *tenantRun) cleanup(ctx ctxT) {
	for _, id := range tn.sandboxes {
		_, _ = tn.e.C.DeleteSandbox(ctx, id, true)
	}
	_ = tn.e.C.DeleteTenant(ctx, tn.name)
}

// tcpBase is the http:// base of the daemon's TCP listener.
func tcpBase(e *attack.Env) string {
	if e.Target.TCP != "" {
		return e.Target.TCP
	}
	return e.Target.Host
}

// tenantAttack is an API attack run over the daemon's TCP listener in a
// tenant made for it (newTenantRun) and deleted after.
func tenantAttack(id, desc, expected string, run func(ctx ctxT, e *attack.Env, tcp *attack.RawClient, tn *tenantRun) attack.Outcome) *attack.Attack {
	return &attack.Attack{ID: "api." + id, Category: attack.CatAPI, Description: desc, Expected: expected,
		Run: func(ctx ctxT, e *attack.Env) attack.Outcome {
			tcp := tcpOf(e)
			if tcp == nil {
				return attack.NotApplicable("needs the daemon's TCP listener (--private, or --host http://... / --tcp)")
			}
			tn, err := newTenantRun(ctx, e, id)
			if err != nil {
				return attack.Escaped("%v", err)
			}
			defer tn.cleanup(context.WithoutCancel(ctx))
			return run(ctx, e, tcp, tn)
		}}
}

// mcpSession is an MCP session opened over /v1/mcp.
type mcpSession struct{ id, key string }

// openMCPSession sends MCP's initialize to base's /v1/mcp with key: the
// session, or the status it was refused with.
func openMCPSession(ctx ctxT, base, key string) (mcpSession, int, error) {
	body := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"berth-selftest","version":"1"}}}`
	req, err := http.NewRequestWithContext(ctx, "POST", base+"/v1/mcp", strings.NewReader(body))
	if err != nil {
		return mcpSession{}, 0, err
	}
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	resp, err := (&http.Client{Timeout: time.Minute}).Do(req)
	if err != nil {
		return mcpSession{}, 0, err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	id := resp.Header.Get("Mcp-Session-Id")
	if resp.StatusCode == 200 && id == "" {
		return mcpSession{}, 0, fmt.Errorf("an initialize answered 200 without a session id")
	}
	return mcpSession{id: id, key: key}, resp.StatusCode, nil
}

// close ends the session (DELETE /v1/mcp).
func (s mcpSession) close(ctx ctxT, base string) {
	req, err := http.NewRequestWithContext(ctx, "DELETE", base+"/v1/mcp", nil)
	if err != nil {
		return
	}
	req.Header.Set("Authorization", "Bearer "+s.key)
	req.Header.Set("Mcp-Session-Id", s.id)
	if resp, err := (&http.Client{Timeout: time.Minute}).Do(req); err == nil {
		resp.Body.Close()
	}
}
