package server

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/berth-sh/berth/internal/auth"
	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/internal/sandbox"
	"github.com/berth-sh/berth/internal/server/rest"
	"github.com/berth-sh/berth/internal/store"
)

// The guard's and the doors' part of leases and port tokens: the
// create-time lease, the principal a door mints for, and the port token a
// request to the port proxy carries (minting, listing and revoking them
// are package admin's).

func (s *Server) now() time.Time {
	if s.authn != nil && s.authn.Now != nil {
		return s.authn.Now().UTC()
	}
	return time.Now().UTC()
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
