package server

// Tenants, API keys, minted lease tokens and port tokens (the handlers
// of their routes, and the guard's helpers for leases and port tokens).
//
// Who may call what: the host's administrator (the unix socket, the
// bootstrap key) manages tenants and makes keys for any tenant; a tenant's
// key with the keys scope makes, lists and revokes its own tenant's keys,
// never stronger than itself (auth.Grant). Leases are minted per sandbox
// by a key holding what it grants (auth.LeaseGrant); port tokens by a key
// holding ports.

import (
	"context"
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
	"github.com/berth-sh/berth/internal/auth"
	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/internal/sandbox"
	"github.com/berth-sh/berth/internal/server/convert"
	"github.com/berth-sh/berth/internal/server/input"
	"github.com/berth-sh/berth/internal/server/rest"
	"github.com/berth-sh/berth/internal/store"
)

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

func (s *Server) now() time.Time {
	if s.authn != nil && s.authn.Now != nil {
		return s.authn.Now().UTC()
	}
	return time.Now().UTC()
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

func (s *Server) createTenant(w http.ResponseWriter, r *http.Request) {
	var req api.CreateTenantRequest
	if err := input.Decode(r, &req); err != nil {
		rest.Error(w, err)
		return
	}
	if err := CheckTenantName(req.Name); err != nil {
		rest.Error(w, err)
		return
	}
	t := &store.Tenant{Name: req.Name, CreatedAt: s.now()}
	if err := s.m.Store().CreateTenant(r.Context(), t); err != nil {
		rest.Error(w, err)
		return
	}
	rest.JSON(w, http.StatusCreated, api.Tenant{Name: t.Name, CreatedAt: t.CreatedAt})
}

func (s *Server) listTenants(w http.ResponseWriter, r *http.Request) {
	ts, err := s.m.Store().ListTenants(r.Context())
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

func (s *Server) deleteTenant(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	if err := CheckTenantName(name); err != nil {
		rest.Error(w, err)
		return
	}
	if err := s.m.Store().DeleteTenant(r.Context(), name, s.now()); err != nil {
		rest.Error(w, err)
		return
	}
	s.credentialsChanged()
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

func (s *Server) createKey(w http.ResponseWriter, r *http.Request) {
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
	if _, err := s.m.Store().GetTenant(r.Context(), tenant); err != nil {
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
	now := s.now()
	k := &store.APIKey{Name: req.Name, Tenant: tenant, Role: req.Role, Scopes: granted, CreatedAt: now, CreatedBy: p.Actor}
	if req.ExpiresInSeconds != 0 {
		d, err := ttlOf("expires_in_seconds", req.ExpiresInSeconds, 0, MaxKeyLifetime)
		if err != nil {
			rest.Error(w, err)
			return
		}
		k.ExpiresAt = now.Add(d)
	}
	id, key := auth.NewKey()
	k.ID, k.Hash, k.Prefix = id, auth.Hash(key), auth.PrefixOf(id)
	if err := s.m.Store().CreateAPIKey(r.Context(), k); err != nil {
		rest.Error(w, err)
		return
	}
	rest.JSON(w, http.StatusCreated, api.CreatedAPIKey{APIKey: keyToAPI(k), Key: key})
}

func (s *Server) listKeys(w http.ResponseWriter, r *http.Request) {
	pg, err := rest.PageOf(r)
	if err != nil {
		rest.Error(w, err)
		return
	}
	ks, next, err := s.m.Store().ListAPIKeys(r.Context(), rest.OwnerOf(r.Context()), pg)
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

// revokeKey revokes a key named by its id or printable prefix; another
// tenant's key is not found, and a key holding a scope the caller lacks
// is refused (auth.MayActOn: the rule key creation follows). A key revoked is refused on its next request,
// and the leases it minted with it.
func (s *Server) revokeKey(w http.ResponseWriter, r *http.Request) {
	id, _ := strings.CutPrefix(r.PathValue("id"), auth.KeyPrefix)
	k, err := s.m.Store().GetAPIKey(r.Context(), rest.OwnerOf(r.Context()), id)
	if err != nil {
		rest.Error(w, err)
		return
	}
	if err := auth.MayActOn(rest.Principal(r), k.Scopes); err != nil {
		rest.Error(w, err)
		return
	}
	if err := s.m.Store().RevokeAPIKey(r.Context(), k.ID, s.now()); err != nil {
		rest.Error(w, err)
		return
	}
	s.credentialsChanged()
	k, err = s.m.Store().GetAPIKey(r.Context(), store.AnyOwner, k.ID)
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

// LeaseRevoker is the engine's OnState hook: a sandbox that stops, is
// quarantined, fails or is deleted loses its leases, so none outlives
// that into a later start or release.
func LeaseRevoker(st store.Tenants, log *slog.Logger) func(string, sandbox.State) {
	return func(id string, to sandbox.State) {
		if !leaseEnds(to) {
			return
		}
		if _, err := st.RevokeLeases(context.Background(), id, time.Now().UTC()); err != nil && log != nil {
			log.Error("revoking the leases of a sandbox", "sandbox", id, "state", to, "err", err)
		}
	}
}

// createLease records the create-time lease of sb for its creator (its
// token is Leases.Token(sb.ID), the same on a replayed create) and
// returns the token. The lease holds the lease scopes the creator holds
// (auth.CreateLeaseGrant), never more, and dies with the creator's key.
func (s *Server) createLease(ctx context.Context, sb *sandbox.Sandbox, creator auth.Principal) (string, error) {
	if s.Leases == nil {
		return "", nil
	}
	err := s.m.Store().CreateLease(ctx, &store.Lease{ID: auth.CreateLeaseID(sb.ID), SandboxID: sb.ID, Tenant: sb.Tenant,
		KeyID: creator.KeyID, Scopes: auth.CreateLeaseGrant(creator), CreatedAt: s.now()})
	if err != nil && !errors.Is(err, errdefs.ErrConflict) {
		return "", err
	}
	return s.Leases.Token(sb.ID), nil
}

// minter is the principal on whose behalf a door hands out a lease minted
// with keyID: the caller in ctx when it is that key's, else the key as
// stored ("" is the host socket only when ctx says so; otherwise a
// principal holding nothing a lease could carry).
func (s *Server) minter(ctx context.Context, keyID string) (auth.Principal, error) {
	if p, ok := auth.From(ctx); ok && p.KeyID == keyID && !p.IsLease() {
		return p, nil
	}
	if keyID == "" {
		return auth.Principal{Actor: "unknown"}, nil
	}
	k, err := s.m.Store().GetAPIKey(ctx, store.AnyOwner, keyID)
	if err != nil {
		return auth.Principal{}, err
	}
	return auth.Principal{Actor: "key:" + k.ID, KeyID: k.ID, Tenant: k.Tenant, Scopes: k.Scopes}, nil
}

func (s *Server) mintLease(w http.ResponseWriter, r *http.Request) {
	var req api.CreateLeaseRequest
	if err := input.Decode(r, &req); err != nil {
		rest.Error(w, err)
		return
	}
	if s.Leases == nil {
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
	sb, err := s.m.Get(r.Context(), r.PathValue("id"))
	if err != nil {
		rest.Error(w, err)
		return
	}
	if !rest.Leasable(sb.State) {
		rest.Error(w, errdefs.Conflict("sandbox %s is %s: leases are for live sandboxes", sb.ID, sb.State))
		return
	}
	now := s.now()
	l := &store.Lease{ID: auth.NewLeaseID(), SandboxID: sb.ID, Tenant: sb.Tenant, KeyID: p.KeyID, Scopes: granted,
		CreatedAt: now, ExpiresAt: now.Add(ttl)}
	if err := s.m.Store().CreateLease(r.Context(), l); err != nil {
		rest.Error(w, err)
		return
	}
	rest.JSON(w, http.StatusCreated, api.Lease{ID: l.ID, SandboxID: sb.ID, Scopes: granted, ExpiresAt: l.ExpiresAt,
		Token: s.Leases.LeaseToken(sb.ID, l.ID)})
}

// ---- port tokens ----

func (s *Server) mintPortToken(w http.ResponseWriter, r *http.Request) {
	var req api.CreatePortTokenRequest
	if err := input.Decode(r, &req); err != nil {
		rest.Error(w, err)
		return
	}
	if s.Leases == nil {
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
	sb, err := s.m.Get(r.Context(), r.PathValue("id"))
	if err != nil {
		rest.Error(w, err)
		return
	}
	if !rest.Leasable(sb.State) {
		rest.Error(w, errdefs.Conflict("sandbox %s is %s: port tokens are for live sandboxes", sb.ID, sb.State))
		return
	}
	now := s.now()
	exp := now.Add(ttl).Truncate(time.Second)
	p := rest.Principal(r)
	rec := &store.PortToken{ID: auth.NewPortTokenID(), SandboxID: sb.ID, Tenant: sb.Tenant, Port: port, KeyID: p.KeyID,
		CreatedBy: p.Actor, CreatedAt: now, ExpiresAt: exp}
	if err := s.m.Store().CreatePortToken(r.Context(), rec); err != nil {
		rest.Error(w, err)
		return
	}
	tok := s.Leases.MintPort(auth.PortToken{Sandbox: sb.ID, Port: port, Expires: exp, ID: rec.ID})
	out := api.PortToken{ID: rec.ID, SandboxID: sb.ID, Port: port, Token: tok, ExpiresAt: exp, URL: portPath(sb.ID, port)}
	if s.Domain != "" {
		out.BrowserURL = s.hostPortURL(r, sb.ID, port) + "?" + auth.PortTokenParam + "=" + url.QueryEscape(tok)
	}
	rest.JSON(w, http.StatusCreated, out)
}

func portTokenToAPI(t *store.PortToken) api.PortTokenInfo {
	return api.PortTokenInfo{ID: t.ID, SandboxID: t.SandboxID, Port: t.Port, CreatedBy: t.CreatedBy, CreatedAt: t.CreatedAt,
		ExpiresAt: t.ExpiresAt, RevokedAt: convert.TimePtr(t.RevokedAt)}
}

// listPortTokens lists the port tokens of a sandbox the caller sees.
func (s *Server) listPortTokens(w http.ResponseWriter, r *http.Request) {
	sb, err := s.m.Get(r.Context(), r.PathValue("id"))
	if err != nil {
		rest.Error(w, err)
		return
	}
	ts, err := s.m.Store().ListPortTokens(r.Context(), rest.OwnerOf(r.Context()), sb.ID)
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

// revokePortToken revokes a port token of a sandbox the caller sees: it
// is refused from its next request, and the connections it opened end
// (live.go).
func (s *Server) revokePortToken(w http.ResponseWriter, r *http.Request) {
	sb, err := s.m.Get(r.Context(), r.PathValue("id"))
	if err != nil {
		rest.Error(w, err)
		return
	}
	o := rest.OwnerOf(r.Context())
	t, err := s.m.Store().GetPortToken(r.Context(), o, r.PathValue("token"))
	if err == nil && t.SandboxID != sb.ID {
		err = errdefs.NotFound("port token %s not found", r.PathValue("token"))
	}
	if err != nil {
		rest.Error(w, err)
		return
	}
	if err := s.m.Store().RevokePortToken(r.Context(), o, t.ID, s.now()); err != nil {
		rest.Error(w, err)
		return
	}
	s.credentialsChanged()
	if t, err = s.m.Store().GetPortToken(r.Context(), o, t.ID); err != nil {
		rest.Error(w, err)
		return
	}
	rest.JSON(w, 200, portTokenToAPI(t))
}

// hostPortURL is the base URL of sandbox id's port on its own host name,
// {port}-{id}.{domain}, by the scheme and port the request came in on.
func (s *Server) hostPortURL(r *http.Request, id string, port int) string {
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	host := strconv.Itoa(port) + "-" + id + "." + s.Domain
	if _, p, err := net.SplitHostPort(r.Host); err == nil && p != "" {
		host = net.JoinHostPort(host, p)
	}
	return scheme + "://" + host + "/"
}

// portPath is the path under which the proxy serves sandbox id's port.
func portPath(id string, port int) string {
	return "/v1/sandboxes/" + id + "/ports/" + strconv.Itoa(port) + "/"
}

// PortTokenHeader carries a port token on the path-routed proxy, which
// takes no cookie and no query token: that route is for non-browser
// clients (browsers use the host-routed {port}-{id}.{domain} names).
const PortTokenHeader = "X-Berth-Port-Token"

// pathRouted reports whether r came through the path-routed port proxy
// (/v1/sandboxes/{id}/ports/{port}/...) on the daemon's own origin.
func pathRouted(r *http.Request) bool {
	return strings.HasPrefix(r.Pattern, "/v1/sandboxes/{id}/ports/{port}")
}

// portToken finds a port token on a port-proxy request without an
// Authorization header. On a host-routed name ({port}-{id}.{domain}, the
// browser's way): the query parameter, else the cookie, which is that
// host's alone. On the path-routed proxy, the daemon's own origin: the
// PortTokenHeader only — never a cookie or the query, so a browser holds
// no credential a page on that origin could ride. fromQuery says where.
func portToken(r *http.Request) (tok string, fromQuery bool) {
	if r.Header.Get("Authorization") != "" {
		return "", false
	}
	if pathRouted(r) {
		return r.Header.Get(PortTokenHeader), false
	}
	if q := r.URL.Query(); q.Has(auth.PortTokenParam) {
		return q.Get(auth.PortTokenParam), true
	}
	if c, err := r.Cookie(auth.PortTokenParam); err == nil {
		return c.Value, false
	}
	return "", false
}

// portPrincipal authenticates a port token for the route's sandbox and
// port; the sandbox must be live and leasable. ok is false when the
// request carries none.
func (s *Server) portPrincipal(r *http.Request, rt Route) (p auth.Principal, ok bool, err error) {
	tok, _ := portToken(r)
	if tok == "" || !rt.PublicPort {
		return auth.Principal{}, false, nil
	}
	id := r.PathValue("id")
	port, perr := strconv.Atoi(r.PathValue("port"))
	if perr != nil {
		return auth.Principal{}, true, errdefs.Unauthenticated("invalid port token")
	}
	p, err = s.authn.CheckPort(r.Context(), tok, id, port)
	if err != nil {
		return auth.Principal{}, true, err
	}
	sb, err := s.lookup(context.WithoutCancel(r.Context()), id)
	if err != nil || !rest.Leasable(sb.State) || sb.ID != id || sb.Tenant != p.Tenant {
		return auth.Principal{}, true, errdefs.Unauthenticated("the port token ended with its sandbox")
	}
	return p, true, nil
}

// portTokenRedirect, for a port token that came in the query of a
// host-routed name, sets it as an HttpOnly, SameSite=Lax cookie of that
// host alone (no Domain attribute: neither the daemon's origin nor another
// sandbox's name gets it) and redirects to the URL without it, so the
// token leaves the address bar and the history. It reports whether it
// answered. The token never reaches the sandbox: the proxy drops the
// cookie, the parameter and the header.
func (s *Server) portTokenRedirect(w http.ResponseWriter, r *http.Request, rt Route, p auth.Principal) bool {
	tok, fromQuery := portToken(r)
	if !fromQuery || p.Port == 0 {
		return false
	}
	if rt.Pattern != HostPortPattern {
		return false
	}
	maxAge := 0
	if t, ok := s.Leases.CheckPort(tok); ok {
		maxAge = int(time.Until(t.Expires) / time.Second)
	}
	http.SetCookie(w, &http.Cookie{Name: auth.PortTokenParam, Value: tok, Path: "/", MaxAge: max(maxAge, 1),
		HttpOnly: true, SameSite: http.SameSiteLaxMode, Secure: r.TLS != nil})
	u := *r.URL
	q := u.Query()
	q.Del(auth.PortTokenParam)
	u.RawQuery = q.Encode()
	status := http.StatusSeeOther
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		status = http.StatusTemporaryRedirect
	}
	http.Redirect(w, r, u.RequestURI(), status)
	return true
}

// stripPortToken removes a port token from what the proxy forwards.
func stripPortToken(h http.Header, u *url.URL) {
	h.Del(PortTokenHeader)
	if cs := h.Values("Cookie"); len(cs) > 0 {
		h.Del("Cookie")
		for _, line := range cs {
			var keep []string
			for part := range strings.SplitSeq(line, ";") {
				// Compared as net/http parses a cookie's name: trimmed.
				name, _, _ := strings.Cut(part, "=")
				if strings.TrimSpace(name) != auth.PortTokenParam {
					keep = append(keep, strings.TrimSpace(part))
				}
			}
			if len(keep) > 0 {
				h.Add("Cookie", strings.Join(keep, "; "))
			}
		}
	}
	if q := u.Query(); q.Has(auth.PortTokenParam) {
		q.Del(auth.PortTokenParam)
		u.RawQuery = q.Encode()
	}
}
