package network

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/berth-sh/berth/internal/network/egressrule"
	"github.com/miekg/dns"
	"golang.org/x/sys/unix"
)

// resolver is berth's DNS server on the gateway addresses: the only
// resolver a sandbox can reach.
type resolver struct {
	n       *Network
	servers []*dns.Server
	wg      sync.WaitGroup
	ctx     context.Context
	cancel  context.CancelFunc
}

// maxNamesPerSandbox bounds the address→name memory used by the flow log.
const maxNamesPerSandbox = 4096

func freebind(network, address string, c syscall.RawConn) error {
	return c.Control(func(fd uintptr) {
		_ = unix.SetsockoptInt(int(fd), unix.SOL_IP, unix.IP_FREEBIND, 1)
		_ = unix.SetsockoptInt(int(fd), unix.SOL_IPV6, unix.IPV6_FREEBIND, 1)
	})
}

func startResolver(n *Network) (*resolver, error) {
	r := &resolver{n: n}
	r.ctx, r.cancel = context.WithCancel(context.Background())
	lc := net.ListenConfig{Control: freebind}
	for _, gw := range []netip.Addr{n.gw4, n.gw6} {
		addr := netip.AddrPortFrom(gw, 53).String()
		pc, err := lc.ListenPacket(context.Background(), "udp", addr)
		if err != nil {
			r.close()
			return nil, fmt.Errorf("network: resolver on udp %s: %w", addr, err)
		}
		ln, err := lc.Listen(context.Background(), "tcp", addr)
		if err != nil {
			pc.Close()
			r.close()
			return nil, fmt.Errorf("network: resolver on tcp %s: %w", addr, err)
		}
		r.servers = append(r.servers,
			&dns.Server{PacketConn: pc, Handler: r},
			&dns.Server{Listener: ln, Handler: r, ReadTimeout: 5 * time.Second, WriteTimeout: 5 * time.Second, IdleTimeout: func() time.Duration { return 10 * time.Second }})
	}
	for _, s := range r.servers {
		s := s
		r.wg.Add(1)
		go func() {
			defer r.wg.Done()
			if err := s.ActivateAndServe(); err != nil {
				n.log.Debug("resolver stopped", "err", err)
			}
		}()
	}
	return r, nil
}

func (r *resolver) close() error {
	r.cancel()
	var first error
	for _, s := range r.servers {
		if err := s.Shutdown(); err != nil && first == nil {
			first = err
		}
	}
	r.wg.Wait()
	return first
}

func addrPortOf(a net.Addr) (netip.AddrPort, string) {
	switch v := a.(type) {
	case *net.UDPAddr:
		return v.AddrPort(), "udp"
	case *net.TCPAddr:
		return v.AddrPort(), "tcp"
	}
	ap, _ := netip.ParseAddrPort(a.String())
	return ap, a.Network()
}

func unmapAP(ap netip.AddrPort) netip.AddrPort {
	return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
}

// ServeDNS answers one query of a sandbox.
func (r *resolver) ServeDNS(w dns.ResponseWriter, req *dns.Msg) {
	n := r.n
	src, proto := addrPortOf(w.RemoteAddr())
	src = unmapAP(src)
	dst, _ := addrPortOf(w.LocalAddr())
	dst = unmapAP(dst)
	n.mu.Lock()
	sb := n.byAddr[src.Addr()]
	var rules []Rule
	var id string
	var redirect []string
	if sb != nil {
		rules, id, redirect = sb.rules, sb.id, sb.redirect
	}
	n.mu.Unlock()
	if sb == nil {
		Reply(w, req, dns.RcodeRefused)
		return
	}
	if req.Opcode != dns.OpcodeQuery || len(req.Question) != 1 {
		Reply(w, req, dns.RcodeNotImplemented)
		return
	}
	name := egressrule.NormDomain(req.Question[0].Name)
	f := Flow{Time: time.Now(), Kind: "dns", Proto: proto, Src: src, Dst: dst, Name: name}
	var tags []string
	v4only := false
	for _, rule := range rules {
		if rule.Domain != "" && egressrule.MatchDomain(rule.Domain, name) {
			if len(tags) == 0 {
				f.Rule = rule.String()
			}
			tags = append(tags, rule.Tag())
			v4only = v4only || redirectsRule(redirect, rule)
		}
	}
	if len(tags) == 0 {
		f.Decision, f.Rule = Deny, reasonNotAllowed
		n.record(id, f)
		Reply(w, req, dns.RcodeNameError)
		return
	}
	f.Decision = Allow
	resp, err := r.exchange(req, proto)
	if err != nil {
		n.log.Warn("resolver: upstream failed", "name", name, "err", err)
		n.record(id, f)
		Reply(w, req, dns.RcodeServerFailure)
		return
	}
	if v4only {
		// The redirect to the egress proxy is IPv4 only: a name of a
		// redirected rule gets no AAAA, so nothing of it is pinned (or
		// reachable) over IPv6 and clients use the redirected IPv4.
		resp.Answer = slices.DeleteFunc(resp.Answer, func(rr dns.RR) bool { _, ok := rr.(*dns.AAAA); return ok })
	}
	// Pin every address of the answer for its TTL (clamped) before the
	// sandbox sees it; hand out no TTL longer than the pin.
	byTTL := map[time.Duration][]netip.Addr{}
	for _, rr := range resp.Answer {
		var ttl time.Duration
		rr.Header().Ttl, ttl = ClampTTL(rr.Header().Ttl, n.cfg.PinMinTTL, n.cfg.PinMaxTTL)
		var a netip.Addr
		switch v := rr.(type) {
		case *dns.A:
			a, _ = netip.AddrFromSlice(v.A.To4())
		case *dns.AAAA:
			a, _ = netip.AddrFromSlice(v.AAAA.To16())
		default:
			continue
		}
		if !a.IsValid() {
			continue
		}
		byTTL[ttl] = append(byTTL[ttl], a.Unmap())
		f.Answers = append(f.Answers, a.Unmap())
	}
	n.mu.Lock()
	if cur := n.sandboxes[id]; cur == sb {
		for ttl, addrs := range byTTL {
			if err := n.pin(sb, tags, addrs, ttl); err != nil {
				n.log.Warn("resolver: pinning", "sandbox", id, "err", err)
			}
			if len(sb.names) > maxNamesPerSandbox {
				clear(sb.names)
			}
			for _, a := range addrs {
				sb.names[a] = name
			}
			sb.pins.add(name, addrs, time.Now().Add(ttl), time.Now())
		}
	}
	n.mu.Unlock()
	n.record(id, f)
	WriteAnswer(w, req, resp, proto)
}

// exchange forwards a copy of req (a fresh id) to the upstreams, over
// UDP (TCP when the answer is truncated or the sandbox asked over TCP).
func (r *resolver) exchange(req *dns.Msg, proto string) (*dns.Msg, error) {
	m := req.Copy()
	m.Id = dns.Id()
	return Forward(r.ctx, m, proto, r.n.cfg.Upstream, r.n.cfg.UpstreamTimeout)
}
