package egressrule

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"

	"github.com/berth-sh/berth/internal/errdefs"
	sbx "github.com/berth-sh/berth/internal/sandbox"
)

// Parse reads a rule as users write it:
//
//	[tcp://|udp://]TARGET[:PORT[,PORT...]]
//
// TARGET is an IP address, a CIDR, a domain or a wildcard domain
// (*.pypi.org); an IPv6 address with ports is bracketed ([2001:db8::1]:443).
// Examples: 10.0.0.0/8, 1.1.1.1, pypi.org:443, tcp://*.github.com:443,22.
func Parse(s string) (Rule, error) {
	var r Rule
	orig := s
	s = strings.TrimSpace(s)
	for _, p := range []string{"tcp", "udp"} {
		if rest, ok := strings.CutPrefix(s, p+"://"); ok {
			r.Proto, s = p, rest
		}
	}
	if s == "" {
		return r, fmt.Errorf("empty rule")
	}
	target, ports := s, ""
	switch {
	case strings.HasPrefix(s, "["):
		end := strings.Index(s, "]")
		if end < 0 {
			return r, fmt.Errorf("rule %q: unclosed [", orig)
		}
		target = s[1:end]
		if rest := s[end+1:]; rest != "" {
			if !strings.HasPrefix(rest, ":") {
				return r, fmt.Errorf("rule %q: expected :PORT after ]", orig)
			}
			ports = rest[1:]
		}
	case strings.Count(s, ":") == 1:
		target, ports, _ = strings.Cut(s, ":")
	}
	if ports != "" {
		for _, p := range strings.Split(ports, ",") {
			n, err := strconv.ParseUint(p, 10, 16)
			if err != nil || n == 0 {
				return r, fmt.Errorf("rule %q: bad port %q", orig, p)
			}
			r.Ports = append(r.Ports, uint16(n))
		}
	}
	if pfx, err := netip.ParsePrefix(target); err == nil {
		r.CIDR = pfx.Masked()
	} else if a, err := netip.ParseAddr(target); err == nil {
		r.CIDR = netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen())
	} else {
		r.Domain = strings.ToLower(strings.TrimSuffix(target, "."))
	}
	if err := r.Validate(); err != nil {
		return r, fmt.Errorf("rule %q: %w", orig, err)
	}
	return r, nil
}

// ParseAll reads several rules: at most sandbox.MaxAllowRules, a rule
// with ports counting once per port (each is a kernel rule of its own;
// errdefs.ErrLimit past that).
func ParseAll(ss []string) ([]Rule, error) {
	if len(ss) > sbx.MaxAllowRules {
		return nil, errdefs.Limit("max_allow_rules", sbx.MaxAllowRules, "%d allow rules given", len(ss))
	}
	out := make([]Rule, 0, len(ss))
	weight := 0
	for _, s := range ss {
		r, err := Parse(s)
		if err != nil {
			return nil, err
		}
		if weight += max(1, len(r.Ports)); weight > sbx.MaxAllowRules {
			return nil, errdefs.Limit("max_allow_rules", sbx.MaxAllowRules,
				"%d allow rules given, which with their ports count more than that", len(ss))
		}
		out = append(out, r)
	}
	return out, ValidateAll(out)
}
