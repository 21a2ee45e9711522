package kube

// berth's DNS-pinned resolver for egress pods: the only nameserver they
// are given and may reach. A query is answered for the sandbox whose pod
// holds the source address (the pod cache, indexed by IP); unknown
// sources are REFUSED. A name no rule of that sandbox allows is NXDOMAIN;
// an allowed one is asked upstream, and every address of the answer is
// written into the sandbox's NetworkPolicy (through the API, conflict
// retried, after reading the rules again from the API) BEFORE the answer
// goes back. Any replica may answer any query: the policy object is the
// shared state.

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"sync"
	"time"

	"github.com/miekg/dns"
	"golang.org/x/time/rate"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/berth-sh/berth/internal/network"
	"github.com/berth-sh/berth/internal/network/egressrule"
	"github.com/berth-sh/berth/internal/node"
)

const podIPIndex = "berth.sh/pod-ip"

// initEgress adds what the resolver reads to the informers (before they
// start): the policies and an index of pods by address.
func (b *Backend) initEgress() error {
	b.policies = b.factory.Networking().V1().NetworkPolicies().Lister()
	inf := b.factory.Core().V1().Pods().Informer()
	err := inf.AddIndexers(cache.Indexers{podIPIndex: func(obj any) ([]string, error) {
		p, ok := obj.(*corev1.Pod)
		if !ok || p.Spec.HostNetwork {
			return nil, nil
		}
		var ips []string
		for _, ip := range p.Status.PodIPs {
			if a, err := netip.ParseAddr(ip.IP); err == nil {
				ips = append(ips, a.Unmap().String())
			}
		}
		return ips, nil
	}})
	if err != nil {
		return fmt.Errorf("kubernetes backend: pod index: %w", err)
	}
	b.podIndex = inf.GetIndexer()
	return nil
}

// sandboxAt is the sandbox whose running pod holds address a ("" none).
func (b *Backend) sandboxAt(a netip.Addr) string {
	objs, err := b.podIndex.ByIndex(podIPIndex, a.Unmap().String())
	if err != nil {
		return ""
	}
	for _, o := range objs {
		p, ok := o.(*corev1.Pod)
		if ok && p.DeletionTimestamp == nil && p.Status.Phase == corev1.PodRunning && p.Labels[LabelSandbox] != "" {
			return p.Labels[LabelSandbox]
		}
	}
	return ""
}

// resolver serves DNS for egress pods.
type resolver struct {
	b       *Backend
	servers []*dns.Server
	wg      sync.WaitGroup
	ctx     context.Context
	cancel  context.CancelFunc

	mu      sync.Mutex
	sources map[netip.Addr]*source
}

// source is what one address may still ask.
type source struct {
	lim      *rate.Limiter
	inflight int
	seen     time.Time
}

// maxSources bounds the per-source table (stale entries go first).
const maxSources = 65536

func startResolver(b *Backend) (*resolver, error) {
	r := &resolver{b: b, sources: map[netip.Addr]*source{}}
	r.ctx, r.cancel = context.WithCancel(context.Background())
	addr := b.cfg.Resolver.Listen
	pc, err := net.ListenPacket("udp", addr)
	if err != nil {
		return nil, fmt.Errorf("kubernetes backend: resolver on udp %s: %w", addr, err)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		pc.Close()
		return nil, fmt.Errorf("kubernetes backend: resolver on tcp %s: %w", addr, err)
	}
	r.servers = []*dns.Server{
		{PacketConn: pc, Handler: r},
		{Listener: &perSourceListener{Listener: ln, max: maxTCPPerSource, open: map[netip.Addr]int{}}, Handler: r, ReadTimeout: 5 * time.Second, WriteTimeout: 5 * time.Second,
			IdleTimeout: func() time.Duration { return 10 * time.Second }, MaxTCPQueries: 64},
	}
	for _, s := range r.servers {
		r.wg.Add(1)
		go func() {
			defer r.wg.Done()
			if err := s.ActivateAndServe(); err != nil {
				b.log.Debug("resolver stopped", "err", err)
			}
		}()
	}
	b.log.Info("egress resolver listening", "udp", pc.LocalAddr().String(), "tcp", ln.Addr().String(),
		"address", b.cfg.Resolver.Address.String())
	return r, nil
}

// Addr is where the resolver listens (UDP; TCP is the same address).
func (r *resolver) addr() net.Addr { return r.servers[0].PacketConn.LocalAddr() }

func (r *resolver) close() {
	r.cancel()
	for _, s := range r.servers {
		_ = s.Shutdown()
	}
	r.wg.Wait()
}

// ResolverAddr is where this backend's resolver listens (nil: none).
func (b *Backend) ResolverAddr() net.Addr {
	if b.resolver == nil {
		return nil
	}
	return b.resolver.addr()
}

// admit takes a slot of src's budget (rate and queries in flight); the
// returned func gives it back.
func (r *resolver) admit(src netip.Addr) (func(), bool) {
	cfg := r.b.cfg.Resolver
	r.mu.Lock()
	defer r.mu.Unlock()
	now := time.Now()
	s := r.sources[src]
	if s == nil {
		if len(r.sources) >= maxSources {
			for a, o := range r.sources {
				if o.inflight == 0 && now.Sub(o.seen) > time.Minute {
					delete(r.sources, a)
				}
			}
			if len(r.sources) >= maxSources {
				return nil, false
			}
		}
		s = &source{lim: rate.NewLimiter(rate.Limit(cfg.QPS), cfg.Burst)}
		r.sources[src] = s
	}
	s.seen = now
	if s.inflight >= cfg.MaxInflight || !s.lim.AllowN(now, 1) {
		return nil, false
	}
	s.inflight++
	return func() {
		r.mu.Lock()
		s.inflight--
		r.mu.Unlock()
	}, true
}

func addrOf(a net.Addr) (netip.AddrPort, string) {
	switch v := a.(type) {
	case *net.UDPAddr:
		return v.AddrPort(), "udp"
	case *net.TCPAddr:
		return v.AddrPort(), "tcp"
	}
	ap, _ := netip.ParseAddrPort(a.String())
	return ap, a.Network()
}

// ServeDNS answers one query.
func (r *resolver) ServeDNS(w dns.ResponseWriter, req *dns.Msg) {
	b := r.b
	src, proto := addrOf(w.RemoteAddr())
	dst, _ := addrOf(w.LocalAddr())
	srcIP := src.Addr().Unmap()
	id := b.sandboxAt(srcIP)
	if id == "" {
		network.Reply(w, req, dns.RcodeRefused)
		return
	}
	done, ok := r.admit(srcIP)
	if !ok {
		network.Reply(w, req, dns.RcodeRefused)
		return
	}
	defer done()
	if req.Opcode != dns.OpcodeQuery || len(req.Question) != 1 || req.Response {
		network.Reply(w, req, dns.RcodeNotImplemented)
		return
	}
	name := egressrule.NormDomain(req.Question[0].Name)
	f := node.Flow{SandboxID: id, Time: time.Now(), Kind: "dns", Proto: proto, Src: src.String(), Dst: dst.String(), Name: name}
	rule, ok := b.cachedRule(id, name)
	if !ok {
		f.Decision, f.Rule = node.Deny, "notallowed"
		b.flow(f)
		network.Reply(w, req, dns.RcodeNameError)
		return
	}
	f.Decision, f.Rule = network.Allow, rule
	ctx, cancel := context.WithTimeout(r.ctx, 2*b.cfg.Resolver.UpstreamTimeout+10*time.Second)
	defer cancel()
	resp, err := r.exchange(ctx, req, proto)
	if err != nil {
		b.log.Warn("resolver: upstream failed", "name", name, "err", err)
		network.Reply(w, req, dns.RcodeServerFailure)
		return
	}
	// Pin every address of the answer, in the policy, before the sandbox
	// sees it; hand out no TTL longer than the pin.
	cfg := b.cfg.Resolver
	type pin struct {
		a   netip.Addr
		ttl time.Duration
	}
	var pins []pin
	kept := resp.Answer[:0]
	for _, rr := range resp.Answer {
		var ttl time.Duration
		rr.Header().Ttl, ttl = network.ClampTTL(rr.Header().Ttl, cfg.PinMinTTL, cfg.PinMaxTTL)
		var a netip.Addr
		switch v := rr.(type) {
		case *dns.A:
			a, _ = netip.AddrFromSlice(v.A.To4())
		case *dns.AAAA:
			a, _ = netip.AddrFromSlice(v.AAAA.To16())
		default:
			kept = append(kept, rr)
			continue
		}
		if !pinnable(a) {
			continue // never handed out: it would not be reachable anyway
		}
		kept = append(kept, rr)
		pins = append(pins, pin{a.Unmap(), ttl})
	}
	resp.Answer = kept
	if len(pins) > 0 {
		allowed := true
		err := b.updatePolicy(ctx, id, func(allow *[]string, ps network.Pins, now time.Time) (bool, error) {
			rules, err := egressrule.ParseAll(*allow)
			if err != nil {
				return false, err
			}
			// The rules as the API holds them now: a rule removed since
			// the cache was read pins nothing.
			if allowed = slices.ContainsFunc(rules, func(r network.Rule) bool { return r.MatchesName(name) }); !allowed {
				return false, nil
			}
			changed := keepPins(ps, rules, now)
			for _, p := range pins {
				until := now.Add(p.ttl)
				// A pin still good for half its time is not written again.
				if t, ok := ps[network.PinKey{Name: name, Addr: p.a}]; ok && t.After(now.Add(p.ttl/2)) {
					continue
				}
				ps.Add(name, []netip.Addr{p.a}, until, now, cfg.MaxPins)
				changed = true
			}
			return changed, nil
		})
		if err != nil {
			b.log.Warn("resolver: pinning", "sandbox", id, "name", name, "err", err)
			network.Reply(w, req, dns.RcodeServerFailure)
			return
		}
		if !allowed {
			f.Decision, f.Rule = node.Deny, "notallowed"
			b.flow(f)
			network.Reply(w, req, dns.RcodeNameError)
			return
		}
	}
	b.flow(f)
	network.WriteAnswer(w, req, resp, proto)
}

// cachedRule is the canonical text of the first rule of sandbox id (as
// its policy in the cache says) allowing name.
func (b *Backend) cachedRule(id, name string) (string, bool) {
	p, err := b.policies.NetworkPolicies(b.cfg.Namespace).Get(policyName(id))
	if err != nil {
		return "", false
	}
	allow, _, ok, err := policyState(p)
	if err != nil || !ok {
		return "", false
	}
	rules, err := egressrule.ParseAll(allow)
	if err != nil {
		return "", false
	}
	for _, r := range rules {
		if r.MatchesName(name) {
			return r.String(), true
		}
	}
	return "", false
}

func (b *Backend) flow(f node.Flow) {
	b.mu.Lock()
	fn := b.hooks.Flow
	b.mu.Unlock()
	fn(f)
}

// exchange asks the upstreams req's question alone (never the sandbox's
// own message), over UDP (TCP when the answer is truncated or the sandbox
// asked over TCP).
func (r *resolver) exchange(ctx context.Context, req *dns.Msg, proto string) (*dns.Msg, error) {
	cfg := r.b.cfg.Resolver
	m := new(dns.Msg)
	m.SetQuestion(dns.Fqdn(req.Question[0].Name), req.Question[0].Qtype)
	m.Question[0].Qclass = req.Question[0].Qclass
	m.RecursionDesired = true
	m.SetEdns0(1232, false)
	return network.Forward(ctx, m, proto, cfg.Upstream, cfg.UpstreamTimeout)
}

// maxTCPPerSource bounds one address's open TCP connections to the
// resolver (each holds a goroutine until its idle timeout).
const maxTCPPerSource = 8

// perSourceListener closes at once a connection from an address that
// already holds max.
type perSourceListener struct {
	net.Listener
	max  int
	mu   sync.Mutex
	open map[netip.Addr]int
}

func (l *perSourceListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		ap, _ := addrOf(c.RemoteAddr())
		a := ap.Addr().Unmap()
		l.mu.Lock()
		if l.open[a] >= l.max {
			l.mu.Unlock()
			c.Close()
			continue
		}
		l.open[a]++
		l.mu.Unlock()
		return &countedConn{Conn: c, release: sync.OnceFunc(func() {
			l.mu.Lock()
			if l.open[a]--; l.open[a] <= 0 {
				delete(l.open, a)
			}
			l.mu.Unlock()
		})}, nil
	}
}

type countedConn struct {
	net.Conn
	release func()
}

func (c *countedConn) Close() error {
	c.release()
	return c.Conn.Close()
}
