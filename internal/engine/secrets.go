package engine

import (
	"context"
	"errors"
	"maps"

	"github.com/berth-sh/berth/internal/agent/wire"
	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/internal/network/egressrule"
	"github.com/berth-sh/berth/internal/sandbox"
	"github.com/berth-sh/berth/internal/secrets"
)

// SecretResolver opens a tenant's secrets (the daemon's vault).
type SecretResolver interface {
	Exists(ctx context.Context, tenant, name string) error
	Resolve(ctx context.Context, tenant, name string) ([]byte, error)
}

// SetSecrets installs the resolver of secret references; without one a
// create naming a secret is refused.
func (m *Engine) SetSecrets(r SecretResolver) { m.secrets = r }

// checkSecretRefs validates a create's references against tenant's
// secrets and returns them with defaulted env var names. A reference to a
// secret the tenant does not have is a 400 naming it.
func (m *Engine) checkSecretRefs(ctx context.Context, tenant string, refs []sandbox.SecretRef) ([]sandbox.SecretRef, error) {
	if len(refs) == 0 {
		return nil, nil
	}
	if m.secrets == nil {
		return nil, errdefs.Invalid("this daemon holds no secrets")
	}
	out := make([]sandbox.SecretRef, 0, len(refs))
	seen := map[string]bool{}
	files := map[string]bool{}
	for _, r := range refs {
		if err := secrets.CheckName(r.Name); err != nil {
			return nil, err
		}
		r.Placeholder = ""
		if r.EgressHost != "" {
			if r.File != "" {
				return nil, errdefs.Invalid("secret %s: file and egress_host in one reference; give two", r.Name)
			}
			h, err := secrets.CheckTarget(secrets.Egress, r.EgressHost)
			if err != nil {
				return nil, errdefs.Invalid("secret %s: egress_host: %s", r.Name, errdefs.Message(err))
			}
			r.EgressHost, r.Placeholder = h, secrets.NewPlaceholder()
		}
		if r.File != "" {
			if err := checkFileRef(r, files); err != nil {
				return nil, err
			}
		} else {
			if r.Env == "" {
				r.Env = r.Name
			}
			if _, err := secrets.CheckTarget(secrets.Env, r.Env); err != nil {
				return nil, errdefs.Invalid("secret %s: %s", r.Name, errdefs.Message(err))
			}
			if seen[r.Env] {
				return nil, errdefs.Invalid("secret env var %s is given twice", r.Env)
			}
			seen[r.Env] = true
		}
		if err := m.secrets.Exists(ctx, tenant, r.Name); errors.Is(err, errdefs.ErrNotFound) {
			return nil, errdefs.Invalid("secret %q does not exist (berth secret set %s)", r.Name, r.Name)
		} else if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, nil
}

// egressPort is the port egress-injected secrets go out on: HTTPS only.
const egressPort = 443

// checkEgressSecrets refuses egress references a sandbox of spec cannot
// use: one not in network mode egress, or whose rules do not allow the
// secret's host on TCP 443 (the proxy dials only what the rules allow).
func (m *Engine) checkEgressSecrets(sp *sandbox.Spec) error {
	for _, r := range sp.Secrets {
		if !r.Egress() {
			continue
		}
		if sp.Network != "egress" {
			return errdefs.EgressSecret(errdefs.ErrEgressSecretNetwork,
				"secret %s: egress:%s needs network mode egress (--network egress --allow %s)", r.Name, r.EgressHost, r.EgressHost)
		}
		if !egressrule.Allows(sp.Allow, r.EgressHost, egressPort) {
			return errdefs.EgressSecret(errdefs.ErrEgressSecretHost,
				"secret %s: the sandbox's egress rules do not allow %s on TCP %d (--allow %s)", r.Name, r.EgressHost, egressPort, r.EgressHost)
		}
	}
	return nil
}

// EgressCAEnv are the env vars every exec of a sandbox with egress
// secrets gets, naming the CA bundle (the image's system CAs and the
// sandbox's own egress CA) the agent writes on the secrets tmpfs.
var EgressCAEnv = []string{"SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "NODE_EXTRA_CA_CERTS", "CURL_CA_BUNDLE"}

// withSecretEnv is env with sb's secrets added, read now: a secret removed
// since the create is no longer given (revocation reaches every later
// exec), and one whose key the daemon lacks fails the exec rather than
// running it without. The values go only into the exec request to the
// agent, never into the spec, a log or an event.
func (m *Engine) withSecretEnv(ctx context.Context, sb *sandbox.Sandbox, env map[string]string) (map[string]string, error) {
	if !hasEnvSecrets(sb) {
		return env, nil
	}
	if m.secrets == nil {
		return nil, errdefs.Unavailable("sandbox %s references secrets and this daemon holds none", sb.ID)
	}
	out := maps.Clone(env)
	if out == nil {
		out = map[string]string{}
	}
	for _, r := range sb.Spec.Secrets {
		if r.File != "" {
			continue // secretfiles.go
		}
		if r.Egress() {
			// The placeholder only: the value is put in at the proxy.
			out[r.Env] = r.Placeholder
			for _, k := range EgressCAEnv {
				if _, set := env[k]; !set {
					out[k] = wire.EgressCABundle
				}
			}
			continue
		}
		v, err := m.secrets.Resolve(ctx, sb.Tenant, r.Name)
		if errors.Is(err, errdefs.ErrNotFound) {
			continue // revoked
		}
		if err != nil {
			return nil, err
		}
		out[r.Env] = string(v)
	}
	return out, nil
}
