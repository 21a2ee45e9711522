package admin

import (
	"net/http"
	"strings"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/internal/secrets"
	"github.com/berth-sh/berth/internal/secrets/vault"
	"github.com/berth-sh/berth/internal/server/input"
	"github.com/berth-sh/berth/internal/server/rest"
	"github.com/berth-sh/berth/internal/store"
)

// SecretsConfig is what the secrets routes need from the daemon.
type SecretsConfig struct {
	Vault *vault.Vault
	// KeyFile is the file the master keys came from, rewritten by a
	// rotation; "" when they came from the environment.
	KeyFile string
}

func secretToAPI(sec *store.Secret) api.Secret {
	return api.Secret{Name: sec.Name, KeyID: sec.Sealed.KeyID, CreatedAt: sec.CreatedAt, UpdatedAt: sec.UpdatedAt}
}

func (h *Handlers) vault() (*vault.Vault, error) {
	if h.opts().Secrets.Vault == nil {
		return nil, errdefs.Unavailable("this daemon has no secrets keyring")
	}
	return h.opts().Secrets.Vault, nil
}

// PutSecret seals the body's value. Neither the value nor its length is
// logged or echoed.
func (h *Handlers) PutSecret(w http.ResponseWriter, r *http.Request) {
	v, err := h.vault()
	if err != nil {
		rest.Error(w, err)
		return
	}
	var req api.PutSecretRequest
	if err := input.Decode(r, &req); err != nil {
		rest.Error(w, err)
		return
	}
	if strings.IndexByte(req.Value, 0) >= 0 {
		rest.Error(w, errdefs.Invalid("secret value holds a NUL byte"))
		return
	}
	sec, created, err := v.Put(r.Context(), rest.Tenant(r), r.PathValue("name"), []byte(req.Value))
	if err != nil {
		rest.Error(w, err)
		return
	}
	if !created {
		h.pushSecretFiles(r, sec.Name)
	}
	status := http.StatusOK
	if created {
		status = http.StatusCreated
	}
	rest.JSON(w, status, secretToAPI(sec))
}

// ListSecrets serves GET /v1/secrets.
func (h *Handlers) ListSecrets(w http.ResponseWriter, r *http.Request) {
	v, err := h.vault()
	if err != nil {
		rest.Error(w, err)
		return
	}
	p, err := rest.PageOf(r)
	if err != nil {
		rest.Error(w, err)
		return
	}
	list, next, err := v.List(r.Context(), rest.Tenant(r), p)
	if err != nil {
		rest.Error(w, err)
		return
	}
	rest.SetNext(w, next)
	out := make([]api.Secret, 0, len(list))
	for _, sec := range list {
		out = append(out, secretToAPI(sec))
	}
	rest.JSON(w, http.StatusOK, out)
}

// DeleteSecret serves DELETE /v1/secrets/{name}.
func (h *Handlers) DeleteSecret(w http.ResponseWriter, r *http.Request) {
	v, err := h.vault()
	if err != nil {
		rest.Error(w, err)
		return
	}
	if err := v.Delete(r.Context(), rest.Tenant(r), r.PathValue("name")); err != nil {
		rest.Error(w, err)
		return
	}
	h.pushSecretFiles(r, r.PathValue("name"))
	w.WriteHeader(http.StatusNoContent)
}

// pushSecretFiles brings a replaced or removed secret to the running
// sandboxes that have it as a file, before the answer (best effort: the
// outcome is an event on each sandbox; the change stands either way).
func (h *Handlers) pushSecretFiles(r *http.Request, name string) {
	if h.E != nil {
		h.E.SecretChanged(r.Context(), rest.Tenant(r), name)
	}
}

// RotateSecretsKey re-wraps every tenant's data keys under the body's key
// while the daemon serves (admin only: it is the host's master key).
func (h *Handlers) RotateSecretsKey(w http.ResponseWriter, r *http.Request) {
	v, err := h.vault()
	if err != nil {
		rest.Error(w, err)
		return
	}
	var req api.RotateSecretsKeyRequest
	if err := input.Decode(r, &req); err != nil {
		rest.Error(w, err)
		return
	}
	k, err := secrets.KeyFromBase64(req.Key)
	if err != nil {
		rest.Error(w, err)
		return
	}
	rot, err := v.Rotate(r.Context(), k, h.opts().Secrets.KeyFile)
	if err != nil {
		rest.Error(w, err)
		return
	}
	h.logger().Info("secrets master key rotated", "key_id", rot.KeyID, "rewrapped", rot.Rewrapped, "removed", rot.Removed)
	rest.JSON(w, http.StatusOK, api.RotateSecretsKeyResponse{KeyID: rot.KeyID, Rewrapped: rot.Rewrapped, Removed: rot.Removed, KeyFile: rot.KeyFile})
}
