package network

import (
	"net/netip"

	"github.com/berth-sh/berth/internal/network/egressrule"
)

// Rule is one allow rule of a sandbox; package egressrule holds its
// grammar, this package turns it into nftables objects and resolver
// answers.
type Rule = egressrule.Rule

// IP protocol numbers the tables match on.
const (
	protoTCP    = 6
	protoUDP    = 17
	protoICMPv6 = 58
)

// insidePrefix reports whether inner lies wholly inside outer.
func insidePrefix(inner, outer netip.Prefix) bool {
	return outer.Bits() <= inner.Bits() && outer.Contains(inner.Addr())
}
