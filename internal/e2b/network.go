package e2b

import (
	"context"
	"encoding/json"
	"net/http"
	"net/netip"
	"slices"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/internal/access"
	"github.com/berth-sh/berth/internal/auth"
	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/internal/server/convert"
	"github.com/berth-sh/berth/internal/server/input"
)

// E2B's egress rules are a deny list with exceptions: everything is
// reachable but what denyOut names (addresses and CIDRs; "0.0.0.0/0",
// the SDK's allTraffic, is everything), and allowOut names what stays
// reachable even so. berth's egress is an allow list, deny by default. The
// two meet exactly: the allow list is allowOut and the address space
// outside denyOut, written as the CIDRs that cover it (a denied /32 is the
// 32 prefixes beside it on the way down from 0.0.0.0/0). berth's own
// validation of rules (node.CheckRules, the MaxAllowRules bound) then
// applies as to any rule, through the same engine call REST's network
// update makes (netrules), so one validator judges both doors.

// maxDenyOut bounds denyOut before the complement is computed.
const maxDenyOut = 64

var (
	all4 = netip.MustParsePrefix("0.0.0.0/0")
	all6 = netip.MustParsePrefix("::/0")
)

// egressAllow is berth's allow list for E2B's allowOut and denyOut.
func egressAllow(allowOut, denyOut []string) ([]string, error) {
	if len(denyOut) > maxDenyOut {
		return nil, errdefs.Invalid("network denyOut: at most %d entries", maxDenyOut)
	}
	open := []netip.Prefix{all4, all6}
	for _, d := range denyOut {
		p, err := netip.ParsePrefix(d)
		if err != nil {
			a, aerr := netip.ParseAddr(d)
			if aerr != nil || a.Zone() != "" {
				return nil, errdefs.Invalid("network denyOut %q: want an IP address or a CIDR", d)
			}
			p = netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen())
		}
		if p.Addr().Is4In6() {
			p = netip.PrefixFrom(p.Addr().Unmap(), p.Bits()-96)
		}
		p = p.Masked()
		if p == all4 {
			// allTraffic: every destination, IPv6 as well (an E2B
			// sandbox has no IPv6 to leave open; a berth one does).
			open = nil
			continue
		}
		open = subtract(open, p)
	}
	allow := slices.Clone(allowOut)
	for _, p := range open {
		allow = append(allow, p.String())
	}
	return allow, nil
}

// subtract is set without d: a prefix d covers goes, one that covers d is
// split around it.
func subtract(set []netip.Prefix, d netip.Prefix) []netip.Prefix {
	var out []netip.Prefix
	for _, p := range set {
		switch {
		case p.Addr().Is4() != d.Addr().Is4():
			out = append(out, p)
		case d.Bits() <= p.Bits() && d.Contains(p.Addr()):
			// d covers p.
		case p.Bits() < d.Bits() && p.Contains(d.Addr()):
			out = append(out, around(p, d)...)
		default:
			out = append(out, p)
		}
	}
	return out
}

// around is p without d, a longer prefix inside it: at each length on the
// way from p down to d, the half that does not hold d.
func around(p, d netip.Prefix) []netip.Prefix {
	var out []netip.Prefix
	for bits := p.Bits() + 1; bits <= d.Bits(); bits++ {
		b := netip.PrefixFrom(d.Addr(), bits).Masked().Addr().AsSlice()
		i := bits - 1
		b[i/8] ^= 0x80 >> (i % 8)
		sib, _ := netip.AddrFromSlice(b)
		out = append(out, netip.PrefixFrom(sib, bits))
	}
	return out
}

// networkUpdate is the body of E2B's PUT /sandboxes/{id}/network: the
// sandbox's egress rules replaced by these (fields left out are empty:
// an empty update opens the sandbox to every destination again).
type networkUpdate struct {
	AllowOut            []string        `json:"allowOut"`
	DenyOut             []string        `json:"denyOut"`
	AllowInternetAccess *bool           `json:"allow_internet_access"`
	EgressProxy         json.RawMessage `json:"egressProxy"`
	Rules               json.RawMessage `json:"rules"`
}

// updateNetwork serves updateNetwork: the sandbox's egress rules replaced
// at once, on a running or paused sandbox as on a stopped one (REST's
// POST /v1/sandboxes/{id}/network, the same engine call). A sandbox
// without egress (network none: created with allowInternetAccess false,
// or with berth's default of none) has no rules to update: 400.
// The rules are translated into REST's request (api.NetworkRulesRequest),
// which the gate validates with REST's rules; the engine replaces the
// sandbox's list with them.
func (d *Door) updateNetwork(r *http.Request) (access.Translate, handler) {
	var req api.NetworkRulesRequest
	tr := func() (access.Validator, error) {
		var in networkUpdate
		if err := decode(r, &in); err != nil {
			return nil, err
		}
		if present(in.EgressProxy) || present(in.Rules) {
			return nil, errdefs.Invalid("network egressProxy and rules are not supported by berth's E2B door")
		}
		deny := in.DenyOut
		if in.AllowInternetAccess != nil && !*in.AllowInternetAccess {
			deny = append(slices.Clone(deny), all4.String())
		}
		allow, err := egressAllow(in.AllowOut, deny)
		if err != nil {
			return nil, err
		}
		req.Allow = allow
		return input.Request(&req), nil
	}
	return tr, func(ctx context.Context, w http.ResponseWriter, r *http.Request, p auth.Principal) error {
		nr := convert.RulesRequest(&req)
		nr.Replace = true
		if _, err := d.cfg.Manager.UpdateNetworkRules(ctx, r.PathValue("sandboxID"), nr, p.Actor); err != nil {
			return err
		}
		w.WriteHeader(http.StatusNoContent)
		return nil
	}
}
