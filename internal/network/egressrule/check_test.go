package egressrule

import (
	"errors"
	"fmt"
	"testing"

	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/internal/sandbox"
)

// Check, Canonical and Allows are what the engine asks of rules (once
// methods of every node backend, asserted by the node conformance suite).
func TestCheck(t *testing.T) {
	if err := Check([]string{"10.0.0.0/8", "pypi.org:443", "tcp://*.github.com:443,22", "1.1.1.1"}); err != nil {
		t.Errorf("Check of valid rules: %v", err)
	}
	for _, bad := range []string{"not a rule!", "10.0.0.0/99", "pypi.org:99999"} {
		if err := Check([]string{bad}); !errors.Is(err, errdefs.ErrInvalid) {
			t.Errorf("Check(%q) = %v, want an invalid-argument error", bad, err)
		}
	}
	// Past the bound, the refusal is a limit (its own error code), not a
	// malformed rule; a rule's ports count one each.
	many := make([]string, sandbox.MaxAllowRules+1)
	for i := range many {
		many[i] = fmt.Sprintf("10.%d.%d.0/24", i/256, i%256)
	}
	if err := Check(many); !errors.Is(err, errdefs.ErrLimit) {
		t.Errorf("Check of %d rules = %v, want a limit error", len(many), err)
	}
	ports := "a.example:1"
	for p := 2; p <= 64; p++ {
		ports += fmt.Sprintf(",%d", p)
	}
	weighty := make([]string, sandbox.MaxAllowRules/64+1)
	for i := range weighty {
		weighty[i] = ports
	}
	if err := Check(weighty); !errors.Is(err, errdefs.ErrLimit) {
		t.Errorf("Check of %d rules of 64 ports each = %v, want a limit error", len(weighty), err)
	}
}

func TestCanonical(t *testing.T) {
	a, err := Canonical("PyPI.org:443")
	if err != nil {
		t.Fatalf("Canonical: %v", err)
	}
	b, err := Canonical("pypi.org.:443")
	if err != nil || a != b {
		t.Errorf("Canonical: %q and %q (%v) for two spellings of one rule", a, b, err)
	}
	if other, err := Canonical("pypi.org:80"); err != nil || other == a {
		t.Errorf("Canonical: %q for port 80 as for 443 (%v)", other, err)
	}
	if _, err := Canonical("not a rule!"); !errors.Is(err, errdefs.ErrInvalid) {
		t.Errorf("Canonical of garbage = %v, want an invalid-argument error", err)
	}
}

func TestAllows(t *testing.T) {
	allow := []string{"API.test.example", "tcp://*.svc.example:443", "udp://dns.example:443"}
	for _, c := range []struct {
		host string
		port uint16
		want bool
	}{
		{"api.test.example", 443, true}, {"x.svc.example", 443, true}, {"x.svc.example", 80, false},
		{"svc.example", 443, false}, {"dns.example", 443, false},
	} {
		if got := Allows(allow, c.host, c.port); got != c.want {
			t.Errorf("Allows(%s:%d) = %v, want %v", c.host, c.port, got, c.want)
		}
	}
	if Allows(append(allow, "not a rule!"), "api.test.example", 443) {
		t.Error("rules that do not parse allow something")
	}
}
