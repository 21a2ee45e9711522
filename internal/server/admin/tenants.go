// Package admin serves the routes that manage who may do what and how
// much: tenants, API keys, minted lease tokens and port tokens, quotas,
// secrets, and the audit log's reads. The routes are mounted, each with
// its rule, by the root package server's route table; the guard's own
// part of leases and port tokens (checking them) is the root's.
//
// Who may call what: the host's administrator (the unix socket, the
// bootstrap key) manages tenants and makes keys for any tenant; a tenant's
// key with the keys scope makes, lists and revokes its own tenant's keys,
// never stronger than itself (auth.Grant). Leases are minted per sandbox
// by a key holding what it grants (auth.LeaseGrant); port tokens by a key
// holding ports.
package admin

import (
	"context"
	"crypto/ed25519"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/internal/audit"
	"github.com/berth-sh/berth/internal/auth"
	"github.com/berth-sh/berth/internal/engine"
	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/internal/sandbox"
	"github.com/berth-sh/berth/internal/server/convert"
	"github.com/berth-sh/berth/internal/server/input"
	"github.com/berth-sh/berth/internal/server/rest"
	"github.com/berth-sh/berth/internal/store"
)

// Engine is what the admin routes need of the engine.
type Engine interface {
	Store() store.Store
	Get(ctx context.Context, ref string) (*sandbox.Sandbox, error)
	Quota(ctx context.Context, tenant string) (*store.TenantQuota, error)
	SetQuota(ctx context.Context, q *store.TenantQuota) error
	TenantUsage(ctx context.Context, tenant, skip string) (engine.Usage, error)
	SecretChanged(ctx context.Context, tenant, name string) int
}

// Options are the daemon's settings the admin routes read, per request
// (the daemon sets them on the server after it is made).
type Options struct {
	// Leases mints lease and port tokens (nil: none).
	Leases *auth.Leases
	// Domain, if set, names sandbox ports {port}-{id}.{Domain}.
	Domain string
	// Audit serves /v1/audit (nil: no audit log).
	Audit *audit.Log
	// AuditAnchorKey checks the anchors POST /v1/audit/verify is given.
	AuditAnchorKey ed25519.PublicKey
	// Secrets serves /v1/secrets.
	Secrets SecretsConfig
}

// Handlers serves the admin routes.
type Handlers struct {
	E    Engine
	Opts func() Options
	// Now is the clock keys, leases and tokens are stamped with.
	Now func() time.Time
	// CredentialsChanged is told when a key or port token is revoked or a
	// tenant deleted, so the connections they opened end at once.
	CredentialsChanged func()
	// QuotaChanged is told when a tenant's quota is set (its key rate is
	// read again).
	QuotaChanged func(tenant string)
	Log          func() *slog.Logger
}

func (h *Handlers) now() time.Time {
	if h.Now != nil {
		return h.Now()
	}
	return time.Now().UTC()
}

func (h *Handlers) logger() *slog.Logger {
	if h.Log == nil {
		return slog.Default()
	}
	return h.Log()
}

func (h *Handlers) opts() Options {
	if h.Opts == nil {
		return Options{}
	}
	return h.Opts()
}

func (h *Handlers) credentialsChanged() {
	if h.CredentialsChanged != nil {
		h.CredentialsChanged()
	}
}

// Lifetimes of what the routes here mint.
const (
	DefaultTokenTTL = time.Hour
	MaxLeaseTTL     = 30 * 24 * time.Hour
	MaxPortTokenTTL = 24 * time.Hour
	MaxKeyLifetime  = 10 * 366 * 24 * time.Hour
)

var tenantNameRE = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,62}$`)

// CheckTenantName refuses a tenant name that is not 1-63 lowercase
// letters, digits and '-', starting with a letter or digit.
func CheckTenantName(name string) error {
	if !tenantNameRE.MatchString(name) {
		return errdefs.Invalid("tenant name %q: want 1-63 lowercase letters, digits and '-', not starting with '-'", name)
	}
	return nil
}

// ttlOf turns a request's seconds into a lifetime: 0 is def; negative
// or above max is refused.
func ttlOf(field string, secs int64, def, max time.Duration) (time.Duration, error) {
	if secs == 0 {
		return def, nil
	}
	if secs < 0 || secs > int64(max/time.Second) {
		return 0, errdefs.Invalid("%s %d: want 1 to %d seconds", field, secs, int64(max/time.Second))
	}
	return time.Duration(secs) * time.Second, nil
}

// ---- tenants (host only) ----

// CreateTenant serves POST /v1/tenants.
func (h *Handlers) CreateTenant(w http.ResponseWriter, r *http.Request) {
	var req api.CreateTenantRequest
	if err := input.Decode(r, &req); err != nil {
		rest.Error(w, err)
		return
	}
	if err := CheckTenantName(req.Name); err != nil {
		rest.Error(w, err)
		return
	}
	t := &store.Tenant{Name: req.Name, CreatedAt: h.now()}
	if err := h.E.Store().CreateTenant(r.Context(), t); err != nil {
		rest.Error(w, err)
		return
	}
	rest.JSON(w, http.StatusCreated, api.Tenant{Name: t.Name, CreatedAt: t.CreatedAt})
}

// ListTenants serves GET /v1/tenants.
func (h *Handlers) ListTenants(w http.ResponseWriter, r *http.Request) {
	ts, err := h.E.Store().ListTenants(r.Context())
	if err != nil {
		rest.Error(w, err)
		return
	}
	out := make([]api.Tenant, 0, len(ts))
	for _, t := range ts {
		out = append(out, api.Tenant{Name: t.Name, CreatedAt: t.CreatedAt})
	}
	rest.JSON(w, 200, out)
}

// DeleteTenant serves DELETE /v1/tenants/{name}.
func (h *Handlers) DeleteTenant(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	if err := CheckTenantName(name); err != nil {
		rest.Error(w, err)
		return
	}
	if err := h.E.Store().DeleteTenant(r.Context(), name, h.now()); err != nil {
		rest.Error(w, err)
		return
	}
	h.credentialsChanged()
	w.WriteHeader(http.StatusNoContent)
}

// ---- API keys ----

func keyToAPI(k *store.APIKey) api.APIKey {
	out := api.APIKey{ID: k.ID, Prefix: k.Prefix, Name: k.Name, Tenant: k.Tenant, Role: k.Role, Scopes: k.Scopes,
		CreatedAt: k.CreatedAt, CreatedBy: k.CreatedBy, ExpiresAt: convert.TimePtr(k.ExpiresAt), RevokedAt: convert.TimePtr(k.RevokedAt)}
	if out.Prefix == "" {
		out.Prefix = auth.PrefixOf(k.ID)
	}
	if out.Scopes == nil {
		out.Scopes = []string{}
	}
	return out
}

// CreateKey serves POST /v1/keys.
func (h *Handlers) CreateKey(w http.ResponseWriter, r *http.Request) {
	var req api.CreateAPIKeyRequest
	if err := input.Decode(r, &req); err != nil {
		rest.Error(w, err)
		return
	}
	p := rest.Principal(r)
	tenant := req.Tenant
	switch {
	case p.Host && tenant == "":
		rest.Error(w, errdefs.Invalid("a key needs a tenant: pass tenant"))
		return
	case !p.Host && tenant == "":
		tenant = p.Tenant
	case !p.Host && tenant != p.Tenant:
		// Another tenant is not there for this caller.
		rest.Error(w, errdefs.NotFound("tenant %q not found", tenant))
		return
	}
	if err := sandbox.CheckText("name", req.Name); err != nil {
		rest.Error(w, err)
		return
	}
	if len(req.Name) > 128 {
		rest.Error(w, errdefs.Invalid("name is longer than 128 bytes"))
		return
	}
	if _, err := h.E.Store().GetTenant(r.Context(), tenant); err != nil {
		rest.Error(w, err)
		return
	}
	scopes := make([]auth.Scope, 0, len(req.Scopes))
	for _, sc := range req.Scopes {
		scopes = append(scopes, auth.Scope(sc))
	}
	granted, err := auth.Grant(p, auth.Role(req.Role), scopes)
	if err != nil {
		rest.Error(w, err)
		return
	}
	now := h.now()
	k := &store.APIKey{Name: req.Name, Tenant: tenant, Role: req.Role, Scopes: granted, CreatedAt: now, CreatedBy: p.Actor}
	if req.ExpiresInSeconds != 0 {
		d, err := ttlOf("expires_in_seconds", req.ExpiresInSeconds, 0, MaxKeyLifetime)
		if err != nil {
			rest.Error(w, err)
			return
		}
		k.ExpiresAt = now.Add(d)
	}
	// No key outlives the key that made it: an expiring key (a console
	// session's, one handed out for a day) makes keys that end with it
	// at the latest, else a stolen session would mint itself a permanent
	// one. Without expires_in_seconds the new key inherits the expiry.
	if p.KeyID != "" {
		creator, err := h.E.Store().GetAPIKey(r.Context(), store.AnyOwner, p.KeyID)
		if err != nil {
			rest.Error(w, err)
			return
		}
		switch {
		case creator.ExpiresAt.IsZero():
		case k.ExpiresAt.IsZero():
			k.ExpiresAt = creator.ExpiresAt
		case k.ExpiresAt.After(creator.ExpiresAt):
			rest.Error(w, errdefs.Permission("the credential expires at %s: it cannot make a key that outlives it",
				creator.ExpiresAt.UTC().Format(time.RFC3339)))
			return
		}
	}
	id, key := auth.NewKey()
	k.ID, k.Hash, k.Prefix = id, auth.Hash(key), auth.PrefixOf(id)
	if err := h.E.Store().CreateAPIKey(r.Context(), k); err != nil {
		rest.Error(w, err)
		return
	}
	rest.JSON(w, http.StatusCreated, api.CreatedAPIKey{APIKey: keyToAPI(k), Key: key})
}

// ListKeys serves GET /v1/keys.
func (h *Handlers) ListKeys(w http.ResponseWriter, r *http.Request) {
	pg, err := rest.PageOf(r)
	if err != nil {
		rest.Error(w, err)
		return
	}
	ks, next, err := h.E.Store().ListAPIKeys(r.Context(), rest.OwnerOf(r.Context()), pg)
	if err != nil {
		rest.Error(w, err)
		return
	}
	rest.SetNext(w, next)
	out := make([]api.APIKey, 0, len(ks))
	for _, k := range ks {
		out = append(out, keyToAPI(k))
	}
	rest.JSON(w, 200, out)
}

// RevokeKey revokes a key named by its id or printable prefix; another
// tenant's key is not found, and a key holding a scope the caller lacks
// is refused (auth.MayActOn: the rule key creation follows). A key revoked is refused on its next request,
// and the leases it minted with it.
func (h *Handlers) RevokeKey(w http.ResponseWriter, r *http.Request) {
	id, _ := strings.CutPrefix(r.PathValue("id"), auth.KeyPrefix)
	k, err := h.E.Store().GetAPIKey(r.Context(), rest.OwnerOf(r.Context()), id)
	if err != nil {
		rest.Error(w, err)
		return
	}
	if err := auth.MayActOn(rest.Principal(r), k.Scopes); err != nil {
		rest.Error(w, err)
		return
	}
	if err := h.E.Store().RevokeAPIKey(r.Context(), k.ID, h.now()); err != nil {
		rest.Error(w, err)
		return
	}
	h.credentialsChanged()
	k, err = h.E.Store().GetAPIKey(r.Context(), store.AnyOwner, k.ID)
	if err != nil {
		rest.Error(w, err)
		return
	}
	rest.JSON(w, 200, keyToAPI(k))
}

// ---- leases ----

// leaseEnds reports whether entering st revokes a sandbox's leases.
func leaseEnds(st sandbox.State) bool {
	switch st {
	case sandbox.StateStopping, sandbox.StateStopped, sandbox.StateQuarantined, sandbox.StateDeleting,
		sandbox.StateDeleted, sandbox.StateFailed:
		return true
	}
	return false
}

// LeaseStore is what LeaseRevoker reads and writes.
type LeaseStore interface {
	store.Tenants
	GetSandbox(ctx context.Context, o store.Owner, id string) (*sandbox.Sandbox, error)
}

// LeaseRevoker is the engine's OnState hook: a sandbox that stops, is
// quarantined, fails or is deleted loses its leases, so none outlives
// that into a later start or release — but for the create-time lease of
// a sandbox whose spec keeps it across a stop (KeepCreateLease: E2B's
// pause without memory), which a stop leaves alive.
func LeaseRevoker(st LeaseStore, log *slog.Logger) func(string, sandbox.State) {
	return func(id string, to sandbox.State) {
		if !leaseEnds(to) {
			return
		}
		var keep []string
		if to == sandbox.StateStopping || to == sandbox.StateStopped {
			sb, err := st.GetSandbox(context.Background(), store.AnyOwner, id)
			if err != nil && !errors.Is(err, errdefs.ErrNotFound) && log != nil {
				log.Error("reading a stopping sandbox for its leases", "sandbox", id, "err", err)
			}
			if err == nil && sb.Spec.KeepCreateLease {
				keep = append(keep, auth.CreateLeaseID(id))
			}
		}
		if _, err := st.RevokeLeases(context.Background(), id, time.Now().UTC(), keep...); err != nil && log != nil {
			log.Error("revoking the leases of a sandbox", "sandbox", id, "state", to, "err", err)
		}
	}
}

// MintLease serves POST /v1/sandboxes/{id}/leases.
func (h *Handlers) MintLease(w http.ResponseWriter, r *http.Request) {
	var req api.CreateLeaseRequest
	if err := input.Decode(r, &req); err != nil {
		rest.Error(w, err)
		return
	}
	if h.opts().Leases == nil {
		rest.Error(w, errdefs.Unavailable("this daemon mints no lease tokens"))
		return
	}
	ttl, err := ttlOf("ttl_seconds", req.TTLSeconds, DefaultTokenTTL, MaxLeaseTTL)
	if err != nil {
		rest.Error(w, err)
		return
	}
	scopes := make([]auth.Scope, 0, len(req.Scopes))
	for _, sc := range req.Scopes {
		scopes = append(scopes, auth.Scope(sc))
	}
	p := rest.Principal(r)
	granted, err := auth.LeaseGrant(p, scopes)
	if err != nil {
		rest.Error(w, err)
		return
	}
	sb, err := h.E.Get(r.Context(), r.PathValue("id"))
	if err != nil {
		rest.Error(w, err)
		return
	}
	if !rest.Leasable(sb.State) {
		rest.Error(w, errdefs.Conflict("sandbox %s is %s: leases are for live sandboxes", sb.ID, sb.State))
		return
	}
	now := h.now()
	l := &store.Lease{ID: auth.NewLeaseID(), SandboxID: sb.ID, Tenant: sb.Tenant, KeyID: p.KeyID, Scopes: granted,
		CreatedAt: now, ExpiresAt: now.Add(ttl)}
	if err := h.E.Store().CreateLease(r.Context(), l); err != nil {
		rest.Error(w, err)
		return
	}
	rest.JSON(w, http.StatusCreated, api.Lease{ID: l.ID, SandboxID: sb.ID, Scopes: granted, ExpiresAt: l.ExpiresAt,
		Token: h.opts().Leases.LeaseToken(sb.ID, l.ID)})
}

// RevokeLease serves DELETE /v1/sandboxes/{id}/leases/{lease}: one lease
// of a sandbox the caller sees ends by itself (its id is the one minting
// answered; the create-time lease's is "c-" and the sandbox id), refused
// from its next request, its streams ended (the root package server,
// live.go). As with keys (auth.MayActOn), no caller revokes a lease
// holding a scope it lacks. Revoking a revoked lease is no error.
func (h *Handlers) RevokeLease(w http.ResponseWriter, r *http.Request) {
	sb, err := h.E.Get(r.Context(), r.PathValue("id"))
	if err != nil {
		rest.Error(w, err)
		return
	}
	o := rest.OwnerOf(r.Context())
	l, err := h.E.Store().GetLease(r.Context(), r.PathValue("lease"))
	if err == nil && (l.SandboxID != sb.ID || !o.Sees(l.Tenant)) {
		err = errdefs.NotFound("lease %s not found", r.PathValue("lease"))
	} else if errors.Is(err, errdefs.ErrNotFound) {
		err = errdefs.NotFound("lease %s not found", r.PathValue("lease"))
	}
	if err != nil {
		rest.Error(w, err)
		return
	}
	if err := auth.MayActOn(rest.Principal(r), l.Scopes); err != nil {
		rest.Error(w, err)
		return
	}
	if err := h.E.Store().RevokeLease(r.Context(), o, l.ID, h.now()); err != nil {
		rest.Error(w, err)
		return
	}
	h.credentialsChanged()
	w.WriteHeader(http.StatusNoContent)
}

// ---- port tokens ----

// MintPortToken serves POST /v1/sandboxes/{id}/ports/{port}/token.
func (h *Handlers) MintPortToken(w http.ResponseWriter, r *http.Request) {
	var req api.CreatePortTokenRequest
	if err := input.Decode(r, &req); err != nil {
		rest.Error(w, err)
		return
	}
	if h.opts().Leases == nil {
		rest.Error(w, errdefs.Unavailable("this daemon mints no port tokens"))
		return
	}
	port, err := strconv.Atoi(r.PathValue("port"))
	if err != nil || port < 1 || port > 65535 || strconv.Itoa(port) != r.PathValue("port") {
		rest.Error(w, errdefs.Invalid("bad port %q", r.PathValue("port")))
		return
	}
	ttl, err := ttlOf("ttl_seconds", req.TTLSeconds, DefaultTokenTTL, MaxPortTokenTTL)
	if err != nil {
		rest.Error(w, err)
		return
	}
	sb, err := h.E.Get(r.Context(), r.PathValue("id"))
	if err != nil {
		rest.Error(w, err)
		return
	}
	if !rest.Leasable(sb.State) {
		rest.Error(w, errdefs.Conflict("sandbox %s is %s: port tokens are for live sandboxes", sb.ID, sb.State))
		return
	}
	now := h.now()
	exp := now.Add(ttl).Truncate(time.Second)
	p := rest.Principal(r)
	rec := &store.PortToken{ID: auth.NewPortTokenID(), SandboxID: sb.ID, Tenant: sb.Tenant, Port: port, KeyID: p.KeyID,
		CreatedBy: p.Actor, CreatedAt: now, ExpiresAt: exp}
	if err := h.E.Store().CreatePortToken(r.Context(), rec); err != nil {
		rest.Error(w, err)
		return
	}
	tok := h.opts().Leases.MintPort(auth.PortToken{Sandbox: sb.ID, Port: port, Expires: exp, ID: rec.ID})
	out := api.PortToken{ID: rec.ID, SandboxID: sb.ID, Port: port, Token: tok, ExpiresAt: exp, URL: PortPath(sb.ID, port)}
	if h.opts().Domain != "" {
		out.BrowserURL = h.hostPortURL(r, sb.ID, port) + "?" + auth.PortTokenParam + "=" + url.QueryEscape(tok)
	}
	rest.JSON(w, http.StatusCreated, out)
}

func portTokenToAPI(t *store.PortToken) api.PortTokenInfo {
	return api.PortTokenInfo{ID: t.ID, SandboxID: t.SandboxID, Port: t.Port, CreatedBy: t.CreatedBy, CreatedAt: t.CreatedAt,
		ExpiresAt: t.ExpiresAt, RevokedAt: convert.TimePtr(t.RevokedAt)}
}

// ListPortTokens lists the port tokens of a sandbox the caller sees.
func (h *Handlers) ListPortTokens(w http.ResponseWriter, r *http.Request) {
	sb, err := h.E.Get(r.Context(), r.PathValue("id"))
	if err != nil {
		rest.Error(w, err)
		return
	}
	ts, err := h.E.Store().ListPortTokens(r.Context(), rest.OwnerOf(r.Context()), sb.ID)
	if err != nil {
		rest.Error(w, err)
		return
	}
	out := make([]api.PortTokenInfo, 0, len(ts))
	for _, t := range ts {
		out = append(out, portTokenToAPI(t))
	}
	rest.JSON(w, 200, out)
}

// RevokePortToken revokes a port token of a sandbox the caller sees: it
// is refused from its next request, and the connections it opened end
// (the root package server, live.go).
func (h *Handlers) RevokePortToken(w http.ResponseWriter, r *http.Request) {
	sb, err := h.E.Get(r.Context(), r.PathValue("id"))
	if err != nil {
		rest.Error(w, err)
		return
	}
	o := rest.OwnerOf(r.Context())
	t, err := h.E.Store().GetPortToken(r.Context(), o, r.PathValue("token"))
	if err == nil && t.SandboxID != sb.ID {
		err = errdefs.NotFound("port token %s not found", r.PathValue("token"))
	}
	if err != nil {
		rest.Error(w, err)
		return
	}
	if err := h.E.Store().RevokePortToken(r.Context(), o, t.ID, h.now()); err != nil {
		rest.Error(w, err)
		return
	}
	h.credentialsChanged()
	if t, err = h.E.Store().GetPortToken(r.Context(), o, t.ID); err != nil {
		rest.Error(w, err)
		return
	}
	rest.JSON(w, 200, portTokenToAPI(t))
}

// hostPortURL is the base URL of sandbox id's port on its own host name,
// {port}-{id}.{domain}, by the scheme and port the request came in on.
func (h *Handlers) hostPortURL(r *http.Request, id string, port int) string {
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	host := strconv.Itoa(port) + "-" + id + "." + h.opts().Domain
	if _, p, err := net.SplitHostPort(r.Host); err == nil && p != "" {
		host = net.JoinHostPort(host, p)
	}
	return scheme + "://" + host + "/"
}

// PortPath is the path under which the proxy serves sandbox id's port.
func PortPath(id string, port int) string {
	return "/v1/sandboxes/" + id + "/ports/" + strconv.Itoa(port) + "/"
}
