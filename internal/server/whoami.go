package server

import (
	"net/http"
	"slices"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/internal/auth"
	"github.com/berth-sh/berth/internal/server/rest"
)

// whoami serves GET /v1/whoami: the caller's own identity and scopes, so
// a client (the console) shows only what the credential may do. It reads
// nothing but the request's own principal; it names no other key and no
// other tenant.
func (s *Server) whoami(w http.ResponseWriter, r *http.Request) {
	p := rest.Principal(r)
	scopes := slices.Clone(p.Scopes)
	if scopes == nil {
		scopes = []string{}
	}
	rest.JSON(w, http.StatusOK, api.WhoAmI{Actor: p.Actor, KeyID: p.KeyID, Tenant: p.Tenant, Role: string(roleOf(scopes)),
		Scopes: scopes, Host: p.Host})
}

// roleOf is the narrowest role whose scopes hold every one of scopes.
func roleOf(scopes []string) auth.Role {
	for _, role := range auth.Roles {
		rs, _ := auth.RoleScopes(role)
		if !slices.ContainsFunc(scopes, func(s string) bool { return !slices.Contains(rs, auth.Scope(s)) }) {
			return role
		}
	}
	return auth.RoleAdmin
}
