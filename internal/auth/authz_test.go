package auth

import (
	"errors"
	"slices"
	"testing"

	"github.com/berth-sh/berth/internal/errdefs"
)

func leaseScopeNames() []string {
	var ss []string
	for _, s := range LeaseScopes {
		ss = append(ss, string(s))
	}
	return ss
}

func TestAuthorize(t *testing.T) {
	lease := Principal{Actor: "lease:sb1", Sandbox: "sb1", Scopes: leaseScopeNames()}
	minted := Principal{Actor: "lease:sb1", Sandbox: "sb1", Scopes: []string{string(ScopeSandboxesRead), string(ScopeFiles)}}
	tenantAdmin := Principal{Actor: "key:ta", Tenant: "acme", Scopes: []string{string(ScopeAdmin)}}
	hostRule := Rule{Scopes: []Scope{ScopeAdmin}, Host: true}
	reader := Principal{Actor: "key:r", Scopes: []string{string(ScopeSandboxesRead)}}
	rw := Principal{Actor: "key:rw", Scopes: []string{string(ScopeSandboxesRead), string(ScopeExec)}}
	leaseRead := Rule{Scopes: []Scope{ScopeSandboxesRead}, Lease: true}
	run := Rule{Scopes: []Scope{ScopeSandboxesRead, ScopeExec}}
	adminOnly := Rule{Scopes: []Scope{ScopeAdmin}}
	for _, c := range []struct {
		name string
		p    Principal
		rule Rule
		id   string
		ok   bool
	}{
		{"public, anyone", Anonymous, Rule{Public: true}, "", true},
		{"anonymous, scoped route", Anonymous, leaseRead, "sb1", false},
		{"zero rule", Admin, Rule{}, "", false},
		{"public lease rule is invalid", Anonymous, Rule{Public: true, Lease: true}, "", false},
		{"unknown scope is invalid", Admin, Rule{Scopes: []Scope{"everything"}}, "", false},
		{"admin has every scope", Admin, run, "", true},
		{"admin route, admin", Admin, adminOnly, "", true},
		{"admin route, reader", reader, adminOnly, "", false},
		{"all scopes needed", reader, run, "", false},
		{"all scopes held", rw, run, "", true},
		{"lease, own sandbox", lease, leaseRead, "sb1", true},
		{"lease, other sandbox", lease, leaseRead, "sb2", false},
		{"lease, no id", lease, leaseRead, "", false},
		{"lease, prefix of id", lease, leaseRead, "sb", false},
		{"lease, id with suffix", lease, leaseRead, "sb1/ports/80", false},
		{"lease, route not for leases", lease, Rule{Scopes: []Scope{ScopeSandboxesRead}}, "sb1", false},
		{"lease, admin route", lease, adminOnly, "sb1", false},
		{"minted lease, a scope it holds", minted, Rule{Scopes: []Scope{ScopeFiles}, Lease: true}, "sb1", true},
		{"minted lease, a scope it lacks", minted, Rule{Scopes: []Scope{ScopeExec}, Lease: true}, "sb1", false},
		{"host route, host", Admin, hostRule, "", true},
		{"host route, a tenant's admin", tenantAdmin, hostRule, "", false},
		{"tenant admin, any scope", tenantAdmin, run, "", true},
		{"host lease rule is invalid", Admin, Rule{Scopes: []Scope{ScopeSandboxesRead}, Lease: true, Host: true}, "sb1", false},
		{"lease carrying admin scope is still a lease", Principal{Sandbox: "sb1", Scopes: []string{"admin"}}, adminOnly, "sb1", false},
	} {
		err := Authorize(c.p, c.rule, c.id)
		if (err == nil) != c.ok {
			t.Errorf("%s: %v, want ok=%v", c.name, err, c.ok)
		}
		if err != nil && !errors.Is(err, errdefs.ErrPermission) {
			t.Errorf("%s: %v is not a permission error", c.name, err)
		}
	}
}

func TestLeaseScopesAreFixed(t *testing.T) {
	lease := Principal{Actor: "lease:x", Sandbox: "x", Scopes: append(leaseScopeNames(), string(ScopeNetwork), string(ScopeAdmin))}
	for _, s := range []Scope{ScopeNetwork, ScopeAdmin} {
		if (Rule{Scopes: []Scope{s}, Lease: true}).Valid() {
			t.Errorf("a lease rule needing %q is valid", s)
		}
		if err := Authorize(lease, Rule{Scopes: []Scope{s}, Lease: true}, "x"); err == nil {
			t.Errorf("a lease was allowed a route needing %q", s)
		}
	}
	for _, s := range LeaseScopes {
		if err := Authorize(lease, Rule{Scopes: []Scope{s}, Lease: true}, "x"); err != nil {
			t.Errorf("a lease was refused %q on its own sandbox: %v", s, err)
		}
	}
}

// TestGrant: a key holds its role's scopes, or the narrower set asked
// for; never a scope outside the role, an unknown one, or one its
// creator lacks.
func TestGrant(t *testing.T) {
	member := Principal{Tenant: "acme", Scopes: []string{string(ScopeSandboxesRead), string(ScopeKeys)}}
	for _, c := range []struct {
		name    string
		creator Principal
		role    Role
		scopes  []Scope
		want    []string
		err     error
	}{
		{"viewer by host", Admin, RoleViewer, nil, []string{"sandboxes:read"}, nil},
		{"member by host", Admin, RoleMember, nil, []string{"sandboxes:read", "sandboxes:write", "exec", "files", "ports", "network", "templates"}, nil},
		{"admin by host", Admin, RoleAdmin, nil, []string{"admin"}, nil},
		{"admin narrowed", Admin, RoleAdmin, []Scope{ScopeAudit, ScopeKeys}, []string{"audit", "keys"}, nil},
		{"member narrowed", Admin, RoleMember, []Scope{ScopeExec, ScopeExec}, []string{"exec"}, nil},
		{"scope outside the role", Admin, RoleViewer, []Scope{ScopeExec}, nil, errdefs.ErrInvalid},
		{"unknown scope", Admin, RoleAdmin, []Scope{"root"}, nil, errdefs.ErrInvalid},
		{"unknown role", Admin, "owner", nil, nil, errdefs.ErrInvalid},
		{"no role", Admin, "", nil, nil, errdefs.ErrInvalid},
		{"viewer by a weak creator", member, RoleViewer, nil, []string{"sandboxes:read"}, nil},
		{"stronger than the creator", member, RoleMember, nil, nil, errdefs.ErrPermission},
		{"admin by a weak creator", member, RoleAdmin, nil, nil, errdefs.ErrPermission},
	} {
		got, err := Grant(c.creator, c.role, c.scopes)
		if c.err != nil {
			if !errors.Is(err, c.err) {
				t.Errorf("%s: err %v, want %v", c.name, err, c.err)
			}
			continue
		}
		if err != nil || !slices.Equal(got, c.want) {
			t.Errorf("%s: %v %v, want %v", c.name, got, err, c.want)
		}
	}
}

// TestLeaseGrant: a minted lease reads its sandbox and holds a subset of
// exec, files and ports its minter holds — never network, write or admin.
func TestLeaseGrant(t *testing.T) {
	exec := Principal{Scopes: []string{string(ScopeSandboxesWrite), string(ScopeExec)}}
	if got, err := LeaseGrant(Admin, []Scope{ScopeExec, ScopePorts}); err != nil || !slices.Equal(got, []string{"sandboxes:read", "exec", "ports"}) {
		t.Errorf("LeaseGrant(admin, exec ports) = %v %v", got, err)
	}
	if got, err := LeaseGrant(exec, nil); err != nil || !slices.Equal(got, []string{"sandboxes:read"}) {
		t.Errorf("LeaseGrant(none) = %v %v", got, err)
	}
	for _, s := range []Scope{ScopeNetwork, ScopeSandboxesWrite, ScopeAdmin, ScopeKeys, "x"} {
		if _, err := LeaseGrant(Admin, []Scope{s}); !errors.Is(err, errdefs.ErrInvalid) {
			t.Errorf("LeaseGrant(%q) = %v, want invalid", s, err)
		}
	}
	if _, err := LeaseGrant(exec, []Scope{ScopeFiles}); !errors.Is(err, errdefs.ErrPermission) {
		t.Errorf("a lease with a scope its minter lacks: %v", err)
	}
}
