package input

import (
	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/internal/secrets"
)

// maxSecretRefs bounds a create's secret references.
const maxSecretRefs = 64

// checkSecretRefs validates a create's secret references: names and env
// var names by internal/secrets' rules, no env var given twice.
func checkSecretRefs(refs []api.SecretRef) error {
	if len(refs) > maxSecretRefs {
		return errdefs.Invalid("at most %d secrets", maxSecretRefs)
	}
	seen := map[string]bool{}
	for _, r := range refs {
		if err := secrets.CheckName(r.Name); err != nil {
			return err
		}
		env := r.Env
		if env == "" {
			env = r.Name
		}
		if _, err := secrets.CheckTarget(secrets.Env, env); err != nil {
			return errdefs.Invalid("secret %s: %s", r.Name, errdefs.Message(err))
		}
		if seen[env] {
			return errdefs.Invalid("secret env var %s is given twice", env)
		}
		seen[env] = true
	}
	return nil
}
