package catalogue

import (
	"fmt"
	"strings"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/internal/selftest/attack"
)

// The console's read-only doors (issue #37): GET /v1/whoami tells a
// credential its own tenant and scopes, and must tell nothing more — not
// to a sandbox's lease token, not another tenant's or key's identity
// when the request names one. GET /v1/webhooks shows the daemon's webhook
// endpoint (the host's configuration, the URL possibly holding a token)
// to the host's administrator alone: no tenant's key, not even its
// admin's, nor a lease reads it.
func consoleAttacks() []*attack.Attack {
	return []*attack.Attack{
		tenantAttack("whoami-misuse", "ask GET /v1/whoami as a sandbox's lease token, and as a viewer naming another key and the host tenant",
			"403 for the lease; the viewer sees only itself",
			func(ctx ctxT, e *attack.Env, tcp *attack.RawClient, tn *tenantRun) attack.Outcome {
				m, err := tn.key(ctx, "member")
				if err != nil {
					return attack.Escaped("%v", err)
				}
				v, err := tn.key(ctx, "viewer")
				if err != nil {
					return attack.Escaped("%v", err)
				}
				sb, err := tn.create(ctx, tcp, m.Key)
				if err != nil {
					return attack.Escaped("%v", err)
				}
				st1, r1, err := tcp.Do(ctx, "GET", "/v1/whoami", sb.LeaseToken, nil)
				if err != nil {
					return attack.Escaped("request: %v", err)
				}
				st2, r2, err := tcp.Do(ctx, "GET", "/v1/whoami?key_id="+m.ID+"&tenant=&actor=local", v.Key, nil)
				if err != nil {
					return attack.Escaped("request: %v", err)
				}
				var w api.WhoAmI
				ok := st2 == 200 && jsonInto(r2, &w) == nil && w.KeyID == v.ID && w.Tenant == tn.name && w.Role == "viewer" &&
					!w.Host && !strings.Contains(r2, m.ID)
				return attack.Judged(denied(st1) && ok, "lease: %d %s; viewer naming the member's key: %d %s", st1,
					attack.Clip(attack.OneLine(r1), 50), st2, attack.Clip(attack.OneLine(r2), 120))
			}),
		tenantAttack("webhooks-read", "read GET /v1/webhooks (the host's webhook URL and delivery state) with a tenant's viewer, member and admin keys and a sandbox's lease token",
			"403 for each",
			func(ctx ctxT, e *attack.Env, tcp *attack.RawClient, tn *tenantRun) attack.Outcome {
				var got []string
				all := true
				var lease string
				for _, role := range []string{"viewer", "member", "admin"} {
					k, err := tn.key(ctx, role)
					if err != nil {
						return attack.Escaped("%v", err)
					}
					if role == "member" {
						sb, err := tn.create(ctx, tcp, k.Key)
						if err != nil {
							return attack.Escaped("%v", err)
						}
						lease = sb.LeaseToken
					}
					st, r, err := tcp.Do(ctx, "GET", "/v1/webhooks", k.Key, nil)
					if err != nil {
						return attack.Escaped("request: %v", err)
					}
					all = all && st == 403
					got = append(got, fmt.Sprintf("%s: %d %s", role, st, attack.Clip(attack.OneLine(r), 60)))
				}
				st, r, err := tcp.Do(ctx, "GET", "/v1/webhooks", lease, nil)
				if err != nil {
					return attack.Escaped("request: %v", err)
				}
				got = append(got, fmt.Sprintf("lease: %d %s", st, attack.Clip(attack.OneLine(r), 60)))
				return attack.Judged(all && denied(st), "%s", strings.Join(got, "; "))
			}),
	}
}
