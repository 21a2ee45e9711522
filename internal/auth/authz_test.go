package auth

import (
	"errors"
	"testing"

	"github.com/berth-sh/berth/internal/errdefs"
)

func TestAuthorize(t *testing.T) {
	lease := Principal{Actor: "lease:sb1", Sandbox: "sb1"}
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
	lease := Principal{Actor: "lease:x", Sandbox: "x"}
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
