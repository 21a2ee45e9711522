package engine

import (
	"context"
	"errors"
	"maps"

	"github.com/berth-sh/berth/internal/errdefs"
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
