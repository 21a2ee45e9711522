package network

import (
	"net/netip"
	"time"

	"github.com/berth-sh/berth/internal/network/egressrule"
)

// maxPinsPerSandbox bounds the (name, address) pairs a sandbox's pin
// record holds; when full, expired pairs go first, then everything.
const maxPinsPerSandbox = 4096

// PinKey is one (name, address) pair berth's resolver answered.
type PinKey struct {
	Name string
	Addr netip.Addr
}

// pins records which address berth's resolver answered for which name,
// until when: what the egress proxy checks before it dials (a sandbox
// cannot name an allowed host and connect to an address that name did
// not resolve to). Unlike the nft domain sets, which are per rule and so
// cover every name a wildcard matches, it keeps the name itself.
//
// Pins is shared with the Kubernetes backend's resolver (package
// node/kube), which keeps the same record in a sandbox's NetworkPolicy.
type Pins map[PinKey]time.Time

type pins = Pins

func (p pins) add(name string, addrs []netip.Addr, until time.Time, now time.Time) {
	p.Add(name, addrs, until, now, maxPinsPerSandbox)
}

// Add pins addrs for name until until (a pin only ever grows longer),
// keeping at most limit pairs: when full, expired pairs go first, then
// everything.
func (p Pins) Add(name string, addrs []netip.Addr, until time.Time, now time.Time, limit int) {
	if len(p)+len(addrs) > limit {
		for k, t := range p {
			if !t.After(now) {
				delete(p, k)
			}
		}
		if len(p)+len(addrs) > limit {
			clear(p)
		}
	}
	for _, a := range addrs {
		k := PinKey{name, a.Unmap()}
		if until.After(p[k]) {
			p[k] = until
		}
	}
}

func (p pins) has(name string, a netip.Addr, now time.Time) bool { return p.Has(name, a, now) }

// Has reports whether name's pin of a holds after now.
func (p Pins) Has(name string, a netip.Addr, now time.Time) bool {
	t, ok := p[PinKey{egressrule.NormDomain(name), a.Unmap()}]
	return ok && t.After(now)
}

// Prune drops the pairs expired at now and those keep refuses; it
// reports whether any went.
func (p Pins) Prune(now time.Time, keep func(PinKey) bool) bool {
	n := len(p)
	for k, t := range p {
		if !t.After(now) || keep != nil && !keep(k) {
			delete(p, k)
		}
	}
	return len(p) != n
}

// Pinned reports whether berth's resolver answered name with addr to
// sandbox id and that answer's pin has not expired.
func (n *Network) Pinned(id, name string, addr netip.Addr) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	sb := n.sandboxes[id]
	return sb != nil && sb.pins.has(name, addr, time.Now())
}

// ClampTTL is berth's resolver's TTL policy for one answered record: the
// TTL handed to the sandbox is at most maxTTL, and the address stays
// pinned (allowed) for that TTL but never less than minPin.
func ClampTTL(ttl uint32, minPin, maxTTL time.Duration) (answer uint32, pin time.Duration) {
	answer = min(ttl, uint32(maxTTL/time.Second))
	return answer, max(time.Duration(answer)*time.Second, minPin)
}
