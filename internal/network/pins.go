package network

import (
	"net/netip"
	"time"
)

// maxPinsPerSandbox bounds the (name, address) pairs a sandbox's pin
// record holds; when full, expired pairs go first, then everything.
const maxPinsPerSandbox = 4096

type pinKey struct {
	name string
	addr netip.Addr
}

// pins records which address berth's resolver answered for which name,
// until when: what the egress proxy checks before it dials (a sandbox
// cannot name an allowed host and connect to an address that name did
// not resolve to). Unlike the nft domain sets, which are per rule and so
// cover every name a wildcard matches, it keeps the name itself.
type pins map[pinKey]time.Time

func (p pins) add(name string, addrs []netip.Addr, until time.Time, now time.Time) {
	if len(p)+len(addrs) > maxPinsPerSandbox {
		for k, t := range p {
			if !t.After(now) {
				delete(p, k)
			}
		}
		if len(p)+len(addrs) > maxPinsPerSandbox {
			clear(p)
		}
	}
	for _, a := range addrs {
		k := pinKey{name, a.Unmap()}
		if until.After(p[k]) {
			p[k] = until
		}
	}
}

func (p pins) has(name string, a netip.Addr, now time.Time) bool {
	t, ok := p[pinKey{normDomain(name), a.Unmap()}]
	return ok && t.After(now)
}

// Pinned reports whether berth's resolver answered name with addr to
// sandbox id and that answer's pin has not expired.
func (n *Network) Pinned(id, name string, addr netip.Addr) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	sb := n.sandboxes[id]
	return sb != nil && sb.pins.has(name, addr, time.Now())
}

// AllowsTCP reports whether rules allow a TCP connection to port of the
// domain name host (a domain rule matching it, on that port): what an
// egress secret's host must satisfy.
func AllowsTCP(rules []Rule, host string, port uint16) bool {
	host = normDomain(host)
	for _, r := range rules {
		if r.Domain != "" && matchDomain(r.Domain, host) && r.matchesPort(port, protoTCP) {
			return true
		}
	}
	return false
}
