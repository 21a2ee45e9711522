package server

import (
	"context"
	"errors"
	"net/http"
	"strconv"

	"github.com/berth-sh/berth/internal/auth"
	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/internal/sandbox"
	"github.com/berth-sh/berth/internal/server/rest"
	"github.com/berth-sh/berth/internal/store"
)

// What another front door onto the same engine (internal/e2b) borrows
// from this one, so a credential, a lease and a proxied port mean the same
// on every door.

// Credential authenticates token (an API key or a lease token) for a call
// that needs rule on sandbox id ("" for none), as the guard does: a lease
// only while its sandbox is leasable, then the rule, then the key's rate
// limit.
func (s *Server) Credential(ctx context.Context, token string, rule auth.Rule, id string) (auth.Principal, error) {
	if token == "" {
		return auth.Principal{}, errdefs.Unauthenticated("no credential")
	}
	p, err := s.authn.Authenticate(ctx, token)
	if err != nil {
		return auth.Principal{}, err
	}
	if p.IsLease() {
		if sb, err := s.lookup(ctx, p.Sandbox); err != nil || !rest.Leasable(sb.State) {
			return auth.Principal{}, errdefs.Unauthenticated("the lease token ended with its sandbox")
		}
	}
	if err := auth.Authorize(p, rule, id); err != nil {
		return auth.Principal{}, err
	}
	if err := s.rateLimit(ctx, p); err != nil {
		return auth.Principal{}, err
	}
	return p, nil
}

// WithCaller is the context a call of the authorized p runs in: the
// principal and the identity the engine reads owners from.
func WithCaller(ctx context.Context, p auth.Principal) context.Context {
	return rest.WithCaller(ctx, p)
}

// SandboxLease is the lease token a door hands out for sb: its
// create-time lease while that lives. A stop revokes every lease of a
// sandbox (LeaseRevoker), so once sb has stopped and started again (E2B's
// pause without memory, then connect) it is a lease of the same scopes
// for this start of sb — one per start, its id naming StartedAt, so
// repeated calls hand out the same token — revoked again at its next
// stop. A sandbox that is not leasable gets its create-time token, which
// the guard refuses.
func (s *Server) SandboxLease(ctx context.Context, sb *sandbox.Sandbox, keyID string) (string, error) {
	creator, err := s.minter(ctx, keyID)
	if err != nil {
		return "", err
	}
	tok, err := s.createLease(ctx, sb, creator)
	if err != nil || s.Leases == nil || !rest.Leasable(sb.State) {
		return tok, err
	}
	first, err := s.m.Store().GetLease(ctx, auth.CreateLeaseID(sb.ID))
	if err != nil {
		return "", err
	}
	if first.RevokedAt.IsZero() {
		return tok, nil
	}
	id := auth.CreateLeaseID(sb.ID) + "-" + strconv.FormatInt(sb.StartedAt.UnixNano(), 36)
	err = s.m.Store().CreateLease(ctx, &store.Lease{ID: id, SandboxID: sb.ID, Tenant: sb.Tenant, KeyID: keyID,
		Scopes: first.Scopes, CreatedAt: s.now()})
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
