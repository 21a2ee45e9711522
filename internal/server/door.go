package server

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/berth-sh/berth/internal/access"
	"github.com/berth-sh/berth/internal/auth"
	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/internal/sandbox"
	"github.com/berth-sh/berth/internal/server/rest"
	"github.com/berth-sh/berth/internal/store"
)

// What another front door onto the same engine (internal/e2b) borrows
// from this one, so a credential, a lease and a proxied port mean the same
// on every door.

// Credential authenticates token (an API key, a lease token, or — for
// access.Ports on a port — a port token) for op on target, as the guard
// does: a lease or port token only while its sandbox is leasable, then
// the access layer's decision (access.Authorize), then the key's rate
// limit. The door names the operation; the rule is the catalogue's.
func (s *Server) Credential(ctx context.Context, token string, op access.Op, target access.Target) (auth.Principal, error) {
	if token == "" {
		return auth.Principal{}, errdefs.Unauthenticated("no credential")
	}
	var p auth.Principal
	var err error
	if op == access.Ports && target.Port > 0 && strings.HasPrefix(token, auth.PortTokenPrefix) {
		// A port token opens its port through every door that proxies
		// one, as it does berth's own port proxy.
		p, err = s.authn.CheckPort(ctx, token, target.Sandbox, target.Port)
	} else {
		p, err = s.authn.Authenticate(ctx, token)
	}
	if err != nil {
		return auth.Principal{}, err
	}
	if p.IsLease() {
		if sb, err := s.lookup(ctx, p.Sandbox); err != nil || !rest.Leasable(sb.State) || sb.Tenant != p.Tenant {
			return auth.Principal{}, errdefs.Unauthenticated("the lease token ended with its sandbox")
		}
	}
	if err := access.Authorize(p, op, target.Sandbox); err != nil {
		return auth.Principal{}, err
	}
	if err := s.rateLimit(ctx, p); err != nil {
		return auth.Principal{}, err
	}
	return p, nil
}

// Bind is the context a door's call by p runs in while it lasts: it is
// cancelled, with the reason as its cause, within credRecheck of p's
// credential ending (revoked, expired, its minting key or tenant gone,
// its sandbox no longer leasable), as a REST stream's is (live.go). The
// caller defers release.
func (s *Server) Bind(ctx context.Context, p auth.Principal) (context.Context, func()) {
	return s.bind(ctx, p)
}

// WithCaller is the context a call of the authorized p runs in: the
// principal and the identity the engine reads owners from.
func WithCaller(ctx context.Context, p auth.Principal) context.Context {
	return rest.WithCaller(ctx, p)
}

// SandboxLease is the lease token a door hands out for sb to caller: a
// token derived from the caller, never holding a right it lacks and dying
// with its key. The sandbox's creator gets its create-time lease while
// that lives. Anyone else — another key of the tenant reading the
// sandbox, or the creator once a stop revoked the create-time lease (E2B's
// pause without memory, then connect) — gets a lease of its own for this
// start of sb: the create-time lease's scopes that caller also holds
// (auth.CreateLeaseGrant), recorded with the caller's key, its id naming
// the key and StartedAt so repeated calls hand out the same token, revoked
// at sb's next stop like every lease of it. A sandbox that is not leasable
// gets its create-time token, which the guard refuses.
func (s *Server) SandboxLease(ctx context.Context, sb *sandbox.Sandbox, caller auth.Principal) (string, error) {
	tok, err := s.createLease(ctx, sb, caller)
	if err != nil || s.Leases == nil || !rest.Leasable(sb.State) {
		return tok, err
	}
	first, err := s.m.Store().GetLease(ctx, auth.CreateLeaseID(sb.ID))
	if err != nil {
		return "", err
	}
	if first.RevokedAt.IsZero() && first.KeyID == caller.KeyID {
		return tok, nil
	}
	var scopes []string
	for _, sc := range auth.CreateLeaseGrant(caller) {
		if slices.Contains(first.Scopes, sc) {
			scopes = append(scopes, sc)
		}
	}
	id := auth.CreateLeaseID(sb.ID) + "-" + strconv.FormatInt(sb.StartedAt.UnixNano(), 36)
	if first.KeyID != caller.KeyID {
		id += "-" + caller.KeyID
	}
	err = s.m.Store().CreateLease(ctx, &store.Lease{ID: id, SandboxID: sb.ID, Tenant: sb.Tenant, KeyID: caller.KeyID,
		Scopes: scopes, CreatedAt: s.now()})
	if err != nil && !errors.Is(err, errdefs.ErrConflict) {
		return "", err
	}
	return s.Leases.LeaseToken(sb.ID, id), nil
}

// ProxyPort forwards r to port of sandbox id at path, as the port proxy
// does (its errors are this API's JSON).
func (s *Server) ProxyPort(w http.ResponseWriter, r *http.Request, id string, port int, path string) {
	s.proxy(w, r, id, strconv.Itoa(port), path)
}

// maxSigningKeys bounds the keys of one tenant whose leases a signed file
// URL is checked against (a tenant with more keys signs with the
// creator's).
const maxSigningKeys = 1000

// SignedLease returns the lease token of sb that made a signed file URL
// (E2B's downloadUrl/uploadUrl: the SDK signs with its envdAccessToken):
// matches reports whether the URL's signature is the one a token would
// give. The candidates are the tokens SandboxLease hands out for sb at
// this start — the create-time lease, the creator's lease after a stop,
// and each key of sb's tenant's own lease — so no store row is read per
// guess; none is checked for life here: the caller authenticates the one
// that matches with Credential, which refuses a revoked or ended lease.
// "" when none matches.
func (s *Server) SignedLease(ctx context.Context, sb *sandbox.Sandbox, matches func(token string) bool) (string, error) {
	if s.Leases == nil {
		return "", nil
	}
	first := auth.CreateLeaseID(sb.ID)
	started := first + "-" + strconv.FormatInt(sb.StartedAt.UnixNano(), 36)
	for _, id := range []string{first, started} {
		if tok := s.Leases.LeaseToken(sb.ID, id); matches(tok) {
			return tok, nil
		}
	}
	keys, _, err := s.m.Store().ListAPIKeys(ctx, store.OwnedBy(sb.Tenant), store.Page{Limit: maxSigningKeys})
	if err != nil {
		return "", err
	}
	for _, k := range keys {
		if tok := s.Leases.LeaseToken(sb.ID, started+"-"+k.ID); matches(tok) {
			return tok, nil
		}
	}
	return "", nil
}
