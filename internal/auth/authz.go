package auth

import (
	"slices"

	"github.com/berth-sh/berth/internal/errdefs"
)

// Scope names what a credential may do. An API key carries a list of
// scopes; ScopeAdmin implies every other. Lease tokens carry none: what a
// lease may call is fixed per route (Rule.Lease), on its own sandbox only.
type Scope string

// The scopes of the API. Each route needs exactly the scopes its Rule
// lists.
const (
	// ScopeSandboxesRead reads sandboxes and their events, rules, flows,
	// diffs, snapshots, volumes, templates and pools.
	ScopeSandboxesRead Scope = "sandboxes:read"
	// ScopeSandboxesWrite creates, deletes and changes the lifecycle of
	// sandboxes and the objects made from them (forks, snapshots,
	// volumes).
	ScopeSandboxesWrite Scope = "sandboxes:write"
	// ScopeExec runs commands in a sandbox.
	ScopeExec Scope = "exec"
	// ScopeFiles reads and writes a sandbox's files (export and copy
	// included).
	ScopeFiles Scope = "files"
	// ScopePorts reaches a sandbox's ports through the proxy.
	ScopePorts Scope = "ports"
	// ScopeNetwork sets the containment of a sandbox: its egress rules,
	// its quarantine and release.
	ScopeNetwork Scope = "network"
	// ScopeTemplates manages a tenant's templates.
	ScopeTemplates Scope = "templates"
	// ScopeSecrets manages a tenant's secrets.
	ScopeSecrets Scope = "secrets"
	// ScopeKeys manages a tenant's API keys (within what the caller
	// holds itself).
	ScopeKeys Scope = "keys"
	// ScopeAudit reads a tenant's audit log.
	ScopeAudit Scope = "audit"
	// ScopeAdmin holds every other scope. The host routes (templates of
	// the host, pools, apply, doctor, metrics, tenants) also need the
	// caller to be the host (Rule.Host), which a tenant's admin is not.
	ScopeAdmin Scope = "admin"
)

// Scopes lists every scope, for documentation and tests.
var Scopes = []Scope{ScopeSandboxesRead, ScopeSandboxesWrite, ScopeExec, ScopeFiles, ScopePorts,
	ScopeNetwork, ScopeTemplates, ScopeSecrets, ScopeKeys, ScopeAudit, ScopeAdmin}

// Role is a named set of scopes an API key is made with.
type Role string

// The roles: a viewer reads; a member works with sandboxes (and their
// network containment, templates and ports); an admin holds everything
// of its tenant, its keys, secrets and audit log included.
const (
	RoleViewer Role = "viewer"
	RoleMember Role = "member"
	RoleAdmin  Role = "admin"
)

// Roles lists every role.
var Roles = []Role{RoleViewer, RoleMember, RoleAdmin}

// RoleScopes returns the scopes role grants, and false for no role.
func RoleScopes(role Role) ([]Scope, bool) {
	switch role {
	case RoleViewer:
		return []Scope{ScopeSandboxesRead}, true
	case RoleMember:
		return []Scope{ScopeSandboxesRead, ScopeSandboxesWrite, ScopeExec, ScopeFiles, ScopePorts, ScopeNetwork,
			ScopeTemplates}, true
	case RoleAdmin:
		return []Scope{ScopeAdmin}, true
	}
	return nil, false
}

// Grant is what a key made by creator with role and the requested scopes
// holds: the role's scopes when none are asked for, else those asked for,
// each within the role (admin: any) and held by creator — no caller makes
// a key stronger than itself.
func Grant(creator Principal, role Role, scopes []Scope) ([]string, error) {
	rs, ok := RoleScopes(role)
	if !ok {
		return nil, errdefs.Invalid("role %q is not one of viewer, member, admin", role)
	}
	if len(scopes) == 0 {
		scopes = rs
	}
	var out []string
	for _, s := range scopes {
		if !slices.Contains(Scopes, s) {
			return nil, errdefs.Invalid("scope %q is not a scope", s)
		}
		if role != RoleAdmin && !slices.Contains(rs, s) {
			return nil, errdefs.Invalid("scope %q is not within the %s role", s, role)
		}
		if !creator.Has(s) {
			return nil, errdefs.Permission("the credential cannot grant the %q scope it lacks", s)
		}
		if !slices.Contains(out, string(s)) {
			out = append(out, string(s))
		}
	}
	return out, nil
}

// MayActOn decides whether p may act on (revoke, and any later change of)
// a key holding scopes: only when p holds every one of them — the rule
// Grant makes keys by. A key holding only keys cannot revoke its tenant's
// admin keys.
func MayActOn(p Principal, scopes []string) error {
	for _, s := range scopes {
		if !p.Has(Scope(s)) {
			return errdefs.Permission("the credential cannot act on a key holding the %q scope it lacks", s)
		}
	}
	return nil
}

// MintableLeaseScopes are the scopes a minted lease may be given; it also
// always reads its own sandbox and events.
var MintableLeaseScopes = []Scope{ScopeExec, ScopeFiles, ScopePorts}

// LeaseGrant is what a lease minted by creator with the requested scopes
// holds: sandboxes:read and those scopes, each mintable and held by
// creator.
func LeaseGrant(creator Principal, scopes []Scope) ([]string, error) {
	out := []string{string(ScopeSandboxesRead)}
	for _, s := range scopes {
		if !slices.Contains(MintableLeaseScopes, s) {
			return nil, errdefs.Invalid("a lease may hold exec, files and ports, not %q", s)
		}
		if !creator.Has(s) {
			return nil, errdefs.Permission("the credential cannot grant the %q scope it lacks", s)
		}
		if !slices.Contains(out, string(s)) {
			out = append(out, string(s))
		}
	}
	return out, nil
}

// CreateLeaseGrant is what the lease a sandbox's create hands out holds:
// the lease scopes (LeaseScopes) its creator holds, by LeaseGrant's rule —
// no lease holds a right its minting principal lacks. A creator without
// exec or files gets a lease without them.
func CreateLeaseGrant(creator Principal) []string {
	out := []string{}
	for _, s := range LeaseScopes {
		if creator.Has(s) {
			out = append(out, string(s))
		}
	}
	return out
}

// LeaseScopes is the fixed, small set a sandbox's lease token holds, as
// data: reading its sandbox and events, exec, files, ports, and keeping
// it alive (touch, under sandboxes:write). Never network (rules,
// quarantine, release), admin, or creating anything: a route marked for
// leases (Rule.Lease) may only need scopes in this set (Valid), and a
// lease is refused any route that needs another (Authorize).
var LeaseScopes = []Scope{ScopeSandboxesRead, ScopeSandboxesWrite, ScopeExec, ScopeFiles, ScopePorts}

// Rule is what a route requires of its caller. The zero Rule is invalid:
// a route is either Public or names the scopes it needs, so a route
// registered without a decision cannot serve.
type Rule struct {
	// Public routes need no credential (the health check).
	Public bool
	// Scopes an API key needs, all of them (ScopeAdmin has all).
	Scopes []Scope
	// Lease lets a lease token call the route, on the sandbox named by
	// the route's {id} path value when that is the token's own sandbox.
	// Only routes under /v1/sandboxes/{id} may set it.
	Lease bool
	// Host routes are the host administrator's alone (Principal.Host),
	// whatever scopes a tenant's key holds.
	Host bool
}

// Valid reports whether r states a requirement.
func (r Rule) Valid() bool {
	for _, s := range r.Scopes {
		if !slices.Contains(Scopes, s) {
			return false
		}
	}
	if r.Lease {
		for _, s := range r.Scopes {
			if !slices.Contains(LeaseScopes, s) {
				return false
			}
		}
	}
	return r.Public != (len(r.Scopes) > 0) && !(r.Public && r.Lease) && !(r.Host && (r.Public || r.Lease))
}

// Has reports whether p holds scope s.
func (p Principal) Has(s Scope) bool {
	return slices.Contains(p.Scopes, string(ScopeAdmin)) || slices.Contains(p.Scopes, string(s))
}

// IsLease reports whether p is a sandbox's lease (or port) token.
func (p Principal) IsLease() bool { return p.Sandbox != "" }

// Anonymous is the principal of a request that presented no credential
// and reached a route that needs none (the health check, a public port).
var Anonymous = Principal{Actor: "anonymous"}

// Authorize decides whether p may call a route with rule, where sandbox
// is the route's decoded {id} path value ("" if it has none). It never
// looks at the request itself: the router's match is the only input.
// A lease token also needs its sandbox to be live, which the caller
// checks against the store.
func Authorize(p Principal, rule Rule, sandbox string) error {
	switch {
	case !rule.Valid():
		return errdefs.Permission("this route has no access rule")
	case rule.Public:
		return nil
	case rule.Host && !p.Host:
		return errdefs.Permission("only the host's administrator may call this route")
	case p.IsLease():
		if !rule.Lease {
			return errdefs.Permission("a lease token cannot call this route")
		}
		if sandbox == "" || sandbox != p.Sandbox {
			return errdefs.Permission("a lease token acts on its own sandbox only, by its id")
		}
		for _, s := range rule.Scopes {
			if !slices.Contains(LeaseScopes, s) {
				return errdefs.Permission("a lease token never holds the %q scope", s)
			}
			if !slices.Contains(p.Scopes, string(s)) {
				return errdefs.Permission("the lease token lacks the %q scope", s)
			}
		}
		return nil
	}
	for _, s := range rule.Scopes {
		if !p.Has(s) {
			return errdefs.Permission("the credential lacks the %q scope", s)
		}
	}
	return nil
}
