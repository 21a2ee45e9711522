package egressrule

import (
	"errors"

	"github.com/berth-sh/berth/internal/errdefs"
)

// Check validates a sandbox's egress rules as the engine takes them:
// errdefs.ErrLimit past sandbox.MaxAllowRules (a rule counting once per
// port), errdefs.ErrInvalid for a rule that does not parse.
func Check(allow []string) error {
	if _, err := ParseAll(allow); err != nil {
		if errors.Is(err, errdefs.ErrLimit) {
			return err
		}
		return errdefs.Invalid("%v", err)
	}
	return nil
}

// Canonical returns the form two spellings of one rule share (its
// String), or errdefs.ErrInvalid.
func Canonical(rule string) (string, error) {
	r, err := Parse(rule)
	if err != nil {
		return "", errdefs.Invalid("%v", err)
	}
	return r.String(), nil
}

// Allows reports whether the rules allow (valid ones; invalid rules allow
// nothing) let TCP reach port of the domain name host: what an egress
// secret's host must satisfy.
func Allows(allow []string, host string, port uint16) bool {
	rules, err := ParseAll(allow)
	return err == nil && AllowsTCP(rules, host, port)
}

// AllowsTCP reports whether rules allow a TCP connection to port of the
// domain name host (a domain rule matching it, on that port).
func AllowsTCP(rules []Rule, host string, port uint16) bool {
	host = NormDomain(host)
	for _, r := range rules {
		if r.Domain != "" && MatchDomain(r.Domain, host) && r.matchesPort(port, protoTCP) {
			return true
		}
	}
	return false
}
