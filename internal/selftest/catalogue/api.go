package catalogue

import (
	"context"
	"encoding/json"
	"strings"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/internal/selftest/attack"
)

// API credentials over TCP: a sandbox's lease token acts on that sandbox
// only, for exec, files, ports and its own lifecycle; never on another
// sandbox, never for privileged verbs (release from quarantine, network
// rules, fork, snapshot, create, list, doctor), never after the sandbox is
// gone. Requests without a valid key are refused, whatever the path's
// encoding.
func apiAttacks() []*attack.Attack {
	x := func(id, desc, expected string, run func(ctx ctxT, e *attack.Env, tcp *attack.RawClient) attack.Outcome) *attack.Attack {
		return &attack.Attack{ID: "api." + id, Category: attack.CatAPI, Description: desc, Expected: expected,
			Run: func(ctx ctxT, e *attack.Env) attack.Outcome {
				tcp := tcpOf(e)
				if tcp == nil {
					return attack.NotApplicable("needs the daemon's TCP listener (--private, or --host http://... / --tcp)")
				}
				return run(ctx, e, tcp)
			}}
	}
	// lease runs one request with sandbox A's lease token.
	lease := func(id, desc, expected string, req func(e *attack.Env, a, b *api.Sandbox) (method, path string, body any), ok func(st int, body string, a *api.Sandbox) bool) *attack.Attack {
		return x(id, desc, expected, func(ctx ctxT, e *attack.Env, tcp *attack.RawClient) attack.Outcome {
			a, err := e.Group(ctx, "api-a")
			if err != nil {
				return attack.Escaped("%v", err)
			}
			b, err := e.Group(ctx, "api-b")
			if err != nil {
				return attack.Escaped("%v", err)
			}
			if a.LeaseToken == "" {
				return attack.Escaped("create returned no lease token")
			}
			before, _ := e.C.ListSandboxes(ctx, false)
			m, p, body := req(e, a, b)
			st, resp, err := tcp.Do(ctx, m, p, a.LeaseToken, body)
			removeNew(context.WithoutCancel(ctx), e, before, resp)
			if err != nil {
				return attack.Escaped("request: %v", err)
			}
			return attack.Judged(ok(st, resp, a), "%s %s with A's lease token: %d %s", m, strings.Replace(p, a.ID, "A", 1), st, attack.Clip(attack.OneLine(resp), 110))
		})
	}
	deny := func(st int, _ string, _ *api.Sandbox) bool { return denied(st) }
	denyOr404 := func(st int, _ string, _ *api.Sandbox) bool { return denied(st) || st == 404 }
	return []*attack.Attack{
		lease("lease-other-get", "GET sandbox B with sandbox A's lease token", "401/403/404",
			func(e *attack.Env, a, b *api.Sandbox) (string, string, any) {
				return "GET", "/v1/sandboxes/" + b.ID, nil
			}, denyOr404),
		lease("lease-other-exec", "exec in sandbox B with sandbox A's lease token", "401/403/404",
			func(e *attack.Env, a, b *api.Sandbox) (string, string, any) {
				return "POST", "/v1/sandboxes/" + b.ID + "/exec", api.ExecRequest{Cmd: []string{"true"}}
			}, denyOr404),
		lease("lease-other-files", "read a file of sandbox B with sandbox A's lease token", "401/403/404",
			func(e *attack.Env, a, b *api.Sandbox) (string, string, any) {
				return "GET", "/v1/sandboxes/" + b.ID + "/files?path=/etc/hostname", nil
			}, denyOr404),
		x("lease-release-quarantine", "release its own quarantine with the sandbox's lease token", "401/403",
			func(ctx ctxT, e *attack.Env, tcp *attack.RawClient) attack.Outcome {
				q, err := e.Create(ctx, api.CreateSandboxRequest{})
				if err != nil {
					return attack.Escaped("%v", err)
				}
				defer e.Delete(context.WithoutCancel(ctx), q.ID)
				if _, err := e.C.Quarantine(ctx, q.ID); err != nil {
					return attack.Escaped("quarantine: %v", err)
				}
				st, resp, err := tcp.Do(ctx, "POST", "/v1/sandboxes/"+q.ID+"/release", q.LeaseToken, nil)
				if err != nil {
					return attack.Escaped("request: %v", err)
				}
				return attack.Judged(denied(st), "POST release with its own lease token: %d %s", st, attack.Clip(attack.OneLine(resp), 60))
			}),
		lease("lease-network-rules", "widen its own egress rules (allow 0.0.0.0/0) with its lease token", "401/403",
			func(e *attack.Env, a, b *api.Sandbox) (string, string, any) {
				return "POST", "/v1/sandboxes/" + a.ID + "/network", api.NetworkRulesRequest{Allow: []string{"0.0.0.0/0"}}
			}, deny),
		lease("lease-fork", "fork itself with its lease token", "401/403",
			func(e *attack.Env, a, b *api.Sandbox) (string, string, any) {
				return "POST", "/v1/sandboxes/" + a.ID + "/fork", api.ForkRequest{Count: 1}
			}, deny),
		lease("lease-snapshot", "snapshot itself with its lease token", "401/403",
			func(e *attack.Env, a, b *api.Sandbox) (string, string, any) {
				return "POST", "/v1/sandboxes/" + a.ID + "/snapshots", api.CreateSnapshotRequest{}
			}, deny),
		lease("lease-create", "create a sandbox with a lease token", "401/403",
			func(e *attack.Env, a, b *api.Sandbox) (string, string, any) {
				return "POST", "/v1/sandboxes", map[string]any{"runtime": e.Class, "labels": map[string]string{"berth-selftest": e.Tag}}
			}, deny),
		lease("lease-list", "list all sandboxes with a lease token", "401/403, or only itself",
			func(e *attack.Env, a, b *api.Sandbox) (string, string, any) { return "GET", "/v1/sandboxes", nil },
			func(st int, body string, a *api.Sandbox) bool {
				if denied(st) {
					return true
				}
				var sbs []api.Sandbox
				var wrapped struct {
					Sandboxes []api.Sandbox `json:"sandboxes"`
				}
				if json.Unmarshal([]byte(body), &sbs) != nil {
					json.Unmarshal([]byte(body), &wrapped)
					sbs = wrapped.Sandboxes
				}
				return st == 200 && len(sbs) == 1 && sbs[0].ID == a.ID
			}),
		lease("lease-doctor", "GET /v1/doctor (host orphans and paths) with a lease token", "401/403",
			func(e *attack.Env, a, b *api.Sandbox) (string, string, any) { return "GET", "/v1/doctor", nil }, deny),
		lease("lease-audit-read", "read the audit log (every caller's actions) with a lease token", "401/403",
			func(e *attack.Env, a, b *api.Sandbox) (string, string, any) { return "GET", "/v1/audit", nil }, deny),
		lease("lease-audit-export", "export the sealed audit records with a lease token", "401/403",
			func(e *attack.Env, a, b *api.Sandbox) (string, string, any) { return "GET", "/v1/audit/export", nil }, deny),
		lease("lease-audit-verify", "run the audit verification (a whole-log scan) with a lease token", "401/403",
			func(e *attack.Env, a, b *api.Sandbox) (string, string, any) { return "POST", "/v1/audit/verify", nil }, deny),
		x("lease-after-delete", "use a sandbox's lease token after the sandbox was deleted", "401",
			func(ctx ctxT, e *attack.Env, tcp *attack.RawClient) attack.Outcome {
				d, err := e.Create(ctx, api.CreateSandboxRequest{})
				if err != nil {
					return attack.Escaped("%v", err)
				}
				if err := e.Delete(ctx, d.ID); err != nil {
					return attack.Escaped("delete: %v", err)
				}
				st, resp, err := tcp.Do(ctx, "GET", "/v1/sandboxes/"+d.ID+"/events", d.LeaseToken, nil)
				if err != nil {
					return attack.Escaped("request: %v", err)
				}
				return attack.Judged(st == 401, "GET events of the deleted sandbox with its token: %d %s", st, attack.Clip(attack.OneLine(resp), 60))
			}),
		x("lease-after-stop", "use a sandbox's lease token after the sandbox was stopped and started again", "401",
			func(ctx ctxT, e *attack.Env, tcp *attack.RawClient) attack.Outcome {
				d, err := e.Create(ctx, api.CreateSandboxRequest{Persistent: true})
				if err != nil {
					return attack.Escaped("%v", err)
				}
				defer e.Delete(context.WithoutCancel(ctx), d.ID)
				if _, err := e.C.Stop(ctx, d.ID); err != nil {
					return attack.Escaped("stop: %v", err)
				}
				if _, err := e.C.Start(ctx, d.ID); err != nil {
					return attack.Escaped("start: %v", err)
				}
				st, resp, err := tcp.Do(ctx, "GET", "/v1/sandboxes/"+d.ID, d.LeaseToken, nil)
				if err != nil {
					return attack.Escaped("request: %v", err)
				}
				return attack.Judged(st == 401, "GET the restarted sandbox with its old token: %d %s", st, attack.Clip(attack.OneLine(resp), 60))
			}),
		x("port-token-other", "open another port, and another sandbox's port, with a port token minted for one port", "401",
			func(ctx ctxT, e *attack.Env, tcp *attack.RawClient) attack.Outcome {
				a, err := e.Group(ctx, "api-a")
				if err != nil {
					return attack.Escaped("%v", err)
				}
				b, err := e.Group(ctx, "api-b")
				if err != nil {
					return attack.Escaped("%v", err)
				}
				pt, err := e.C.CreatePortToken(ctx, a.ID, 8080, api.CreatePortTokenRequest{TTLSeconds: 60})
				if err != nil {
					return attack.Escaped("mint: %v", err)
				}
				var seen []string
				for _, p := range []string{"/v1/sandboxes/" + a.ID + "/ports/9090/", "/v1/sandboxes/" + b.ID + "/ports/8080/", "/v1/sandboxes/" + a.ID} {
					st, _, err := tcp.Do(ctx, "GET", p, pt.Token, nil)
					if err != nil {
						return attack.Escaped("request: %v", err)
					}
					if st != 401 {
						return attack.Escaped("GET %s with A's port-8080 token: %d", strings.Replace(p, a.ID, "A", 1), st)
					}
					seen = append(seen, "401")
				}
				return attack.Judged(true, "other port, other sandbox, the API: %s", strings.Join(seen, " "))
			}),
		lease("lease-quota", "read the tenant's quota (GET /v1/quota) with a lease token", "401/403",
			func(e *attack.Env, a, b *api.Sandbox) (string, string, any) { return "GET", "/v1/quota", nil }, deny),
		x("quota-other-tenant", "read another tenant's quota with a tenant's key: its path, and /v1/quota?tenant=", "401/403, and only its own",
			func(ctx ctxT, e *attack.Env, tcp *attack.RawClient) attack.Outcome {
				a, b := "selftest-qa-"+e.Tag, "selftest-qb-"+e.Tag
				cctx := context.WithoutCancel(ctx)
				for _, tn := range []string{a, b} {
					if _, err := e.C.CreateTenant(ctx, tn); err != nil {
						return attack.NotApplicable("making tenants needs the host admin: %v", err)
					}
					defer e.C.DeleteTenant(cctx, tn)
				}
				k, err := e.C.CreateAPIKey(ctx, api.CreateAPIKeyRequest{Name: "selftest", Tenant: a, Role: "admin"})
				if err != nil {
					return attack.Escaped("key of tenant A: %v", err)
				}
				defer e.C.RevokeAPIKey(cctx, k.Prefix)
				st, resp, err := tcp.Do(ctx, "GET", "/v1/tenants/"+b+"/quota", k.Key, nil)
				if err != nil {
					return attack.Escaped("request: %v", err)
				}
				if !denied(st) {
					return attack.Escaped("GET /v1/tenants/B/quota with A's admin key: %d %s", st, attack.Clip(attack.OneLine(resp), 80))
				}
				st2, resp2, err := tcp.Do(ctx, "GET", "/v1/quota?tenant="+b, k.Key, nil)
				if err != nil {
					return attack.Escaped("request: %v", err)
				}
				var q api.Quota
				if st2 == 200 && (json.Unmarshal([]byte(resp2), &q) != nil || q.Tenant != a) {
					return attack.Escaped("GET /v1/quota?tenant=B with A's key answered tenant %q", q.Tenant)
				}
				return attack.Judged(st2 == 200 || denied(st2), "B's quota path: %d; /v1/quota?tenant=B: %d, tenant A's own", st, st2)
			}),
		x("encoded-slash", "GET /v1/sandboxes/A%2Fports%2F8080/events without a key", "401",
			func(ctx ctxT, e *attack.Env, tcp *attack.RawClient) attack.Outcome {
				a, err := e.Group(ctx, "api-a")
				if err != nil {
					return attack.Escaped("%v", err)
				}
				st, resp, err := tcp.Do(ctx, "GET", "/v1/sandboxes/"+a.ID+"%2Fports%2F8080/events", attack.NoKey, nil)
				if err != nil {
					return attack.Escaped("request: %v", err)
				}
				return attack.Judged(st == 401, "no key: %d %s", st, attack.Clip(attack.OneLine(resp), 70))
			}),
		x("no-key", "GET /v1/sandboxes without a key", "401",
			func(ctx ctxT, e *attack.Env, tcp *attack.RawClient) attack.Outcome {
				st, resp, err := tcp.Do(ctx, "GET", "/v1/sandboxes", attack.NoKey, nil)
				if err != nil {
					return attack.Escaped("request: %v", err)
				}
				return attack.Judged(st == 401, "%d %s", st, attack.Clip(attack.OneLine(resp), 70))
			}),
		x("bad-key", "GET /v1/sandboxes with a made-up key", "401",
			func(ctx ctxT, e *attack.Env, tcp *attack.RawClient) attack.Outcome {
				st, resp, err := tcp.Do(ctx, "GET", "/v1/sandboxes", "berth_"+strings.Repeat("0", 40), nil)
				if err != nil {
					return attack.Escaped("request: %v", err)
				}
				return attack.Judged(st == 401, "%d %s", st, attack.Clip(attack.OneLine(resp), 70))
			}),
	}
}

// tcp is a raw client on the daemon's TCP listener, nil when there is none.
func tcpOf(e *attack.Env) *attack.RawClient {
	switch {
	case e.Target.TCP != "":
		return attack.TCPRaw(e.Target.TCP)
	case strings.HasPrefix(e.Target.Host, "http"):
		return attack.TCPRaw(e.Target.Host)
	}
	return nil
}

// removeNew deletes sandboxes (and a snapshot named in resp) that a
// request which should have been refused created anyway.
func removeNew(ctx ctxT, e *attack.Env, before []api.Sandbox, resp string) {
	var snap api.Snapshot
	if json.Unmarshal([]byte(resp), &snap) == nil && snap.ID != "" && strings.Contains(resp, "\"sandbox_id\"") {
		e.C.DeleteSnapshot(ctx, snap.ID)
	}
	old := map[string]bool{}
	for _, sb := range before {
		old[sb.ID] = true
	}
	after, err := e.C.ListSandboxes(ctx, false)
	if err != nil {
		return
	}
	for _, sb := range after {
		if !old[sb.ID] {
			_, _ = e.C.DeleteSandbox(ctx, sb.ID, true)
		}
	}
}
