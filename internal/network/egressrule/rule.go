package egressrule

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"
)

// Rule is one allow rule of a sandbox. Exactly one of CIDR and Domain is
// set. Domain is an exact name ("pypi.org") or a wildcard ("*.pypi.org",
// which matches every name strictly below pypi.org, not pypi.org itself).
// Ports empty means every port; Proto "" means TCP and UDP when ports are
// given and every protocol (ICMP included) when they are not.
type Rule struct {
	CIDR   netip.Prefix
	Domain string
	Ports  []uint16
	Proto  string
}

// maxPortsPerRule bounds the nft rules one Rule expands to.
const maxPortsPerRule = 64

// String is the rule's canonical text, as shown in the flow log.
func (r Rule) String() string {
	var b strings.Builder
	if r.Domain != "" {
		b.WriteString(NormDomain(r.Domain))
	} else {
		b.WriteString(r.CIDR.Masked().String())
	}
	if r.Proto != "" {
		b.WriteString(" " + r.Proto)
	}
	if len(r.Ports) > 0 {
		ps := slices.Clone(r.Ports)
		slices.Sort(ps)
		ps = slices.Compact(ps)
		b.WriteString(" port ")
		for i, p := range ps {
			if i > 0 {
				b.WriteByte(',')
			}
			b.WriteString(strconv.Itoa(int(p)))
		}
	}
	return b.String()
}

// Tag is a short stable identifier of the rule, used in nft object names
// and log prefixes.
func (r Rule) Tag() string {
	s := sha256.Sum256([]byte(r.String()))
	return hex.EncodeToString(s[:])[:6]
}

// L4 returns the IP protocol numbers the rule is limited to (nil: any).
func (r Rule) L4() []uint8 {
	switch {
	case r.Proto == "tcp":
		return []uint8{protoTCP}
	case r.Proto == "udp":
		return []uint8{protoUDP}
	case len(r.Ports) > 0:
		return []uint8{protoTCP, protoUDP}
	}
	return nil
}

// IP protocol numbers of the protocols a rule can name.
const (
	protoTCP = 6
	protoUDP = 17
)

// Validate reports whether r is well formed.
func (r Rule) Validate() error {
	hasCIDR := r.CIDR.IsValid()
	if hasCIDR == (r.Domain != "") {
		return fmt.Errorf("network: rule must have exactly one of CIDR and domain: %+v", r)
	}
	if r.Domain != "" {
		if err := validDomain(r.Domain); err != nil {
			return err
		}
	}
	if hasCIDR && r.CIDR.Addr().Zone() != "" {
		return fmt.Errorf("network: rule CIDR %s has a zone", r.CIDR)
	}
	switch r.Proto {
	case "", "tcp", "udp":
	default:
		return fmt.Errorf("network: rule protocol %q: want tcp, udp or empty", r.Proto)
	}
	if len(r.Ports) > maxPortsPerRule {
		return fmt.Errorf("network: rule has %d ports, at most %d", len(r.Ports), maxPortsPerRule)
	}
	if slices.Contains(r.Ports, 0) {
		return fmt.Errorf("network: rule port 0")
	}
	return nil
}

// ValidateAll checks every rule.
func ValidateAll(rules []Rule) error {
	for _, r := range rules {
		if err := r.Validate(); err != nil {
			return err
		}
	}
	return nil
}

// MatchesName reports whether r is a domain rule covering name (any
// case, with or without the final dot).
func (r Rule) MatchesName(name string) bool {
	return r.Domain != "" && MatchDomain(r.Domain, NormDomain(name))
}

// Protocols are the L4 protocols r is limited to, "tcp" and/or "udp" (nil:
// every protocol).
func (r Rule) Protocols() []string {
	var out []string
	for _, p := range r.L4() {
		switch p {
		case protoTCP:
			out = append(out, "tcp")
		case protoUDP:
			out = append(out, "udp")
		}
	}
	return out
}

// NormDomain is a name as rules and pins compare it: lower case, no
// surrounding space, no final dot.
func NormDomain(d string) string {
	return strings.TrimSuffix(strings.ToLower(strings.TrimSpace(d)), ".")
}

func validDomain(d string) error {
	n := NormDomain(d)
	n = strings.TrimPrefix(n, "*.")
	if n == "" || len(n) > 253 || strings.Contains(n, "*") {
		return fmt.Errorf("network: invalid domain %q (exact name or *.suffix)", d)
	}
	for _, label := range strings.Split(n, ".") {
		if label == "" || len(label) > 63 {
			return fmt.Errorf("network: invalid domain %q", d)
		}
		for _, c := range label {
			if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
				return fmt.Errorf("network: invalid domain %q", d)
			}
		}
	}
	return nil
}

// MatchDomain reports whether name (normalised, no trailing dot) is
// covered by the domain pattern of a rule.
func MatchDomain(pattern, name string) bool {
	p := NormDomain(pattern)
	if suffix, ok := strings.CutPrefix(p, "*."); ok {
		return strings.HasSuffix(name, "."+suffix)
	}
	return name == p
}

// matchesFlow reports whether a flow to dst with protocol proto matches
// the CIDR rule r.
func (r Rule) matchesFlow(dst netip.AddrPort, proto uint8) bool {
	if !r.CIDR.IsValid() || !r.CIDR.Contains(dst.Addr().Unmap()) {
		return false
	}
	return r.matchesPort(dst.Port(), proto)
}

func (r Rule) matchesPort(port uint16, proto uint8) bool {
	if ps := r.L4(); ps != nil && !slices.Contains(ps, proto) {
		return false
	}
	return len(r.Ports) == 0 || slices.Contains(r.Ports, port)
}
