package input

import (
	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/internal/secrets"
)

// maxSecretRefs bounds a create's secret references.
const maxSecretRefs = 64

// checkSecretRefs validates a create's secret references: names, env var
// names and file paths by internal/secrets' rules, no env var or file given
// twice, not both an env var and a file in one reference (one name may be
// both as two references); an egress_host is a DNS name, and its
// reference's env var (the placeholder's) counts among the env vars.
func checkSecretRefs(refs []api.SecretRef) error {
	if len(refs) > maxSecretRefs {
		return errdefs.Invalid("at most %d secrets", maxSecretRefs)
	}
	seen := map[string]bool{}
	for _, r := range refs {
		if err := secrets.CheckName(r.Name); err != nil {
			return err
		}
		kind, target := secrets.Env, r.Env
		if r.EgressHost != "" {
			if r.File != "" {
				return errdefs.Invalid("secret %s: file and egress_host in one reference; give two", r.Name)
			}
			if _, err := secrets.CheckTarget(secrets.Egress, r.EgressHost); err != nil {
				return errdefs.Invalid("secret %s: egress_host: %s", r.Name, errdefs.Message(err))
			}
		}
		if r.File != "" {
			if r.Env != "" {
				return errdefs.Invalid("secret %s: env and file in one reference; give two", r.Name)
			}
			kind, target = secrets.File, r.File
		} else if target == "" {
			target = r.Name
		}
		if _, err := secrets.CheckTarget(kind, target); err != nil {
			return errdefs.Invalid("secret %s: %s", r.Name, errdefs.Message(err))
		}
		key := string(kind) + ":" + target
		if seen[key] {
			return errdefs.Invalid("secret %s %s is given twice", kind, target)
		}
		seen[key] = true
	}
	return nil
}
