package network

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"net/netip"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// newNS creates an anonymous network namespace (on a throwaway OS thread)
// and returns a handle; it disappears when the handle is closed.
func newNS(t testing.TB) netns.NsHandle {
	t.Helper()
	type res struct {
		ns  netns.NsHandle
		err error
	}
	ch := make(chan res)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread dies with us
		ns, err := netns.New()
		ch <- res{ns, err}
	}()
	r := <-ch
	if r.err != nil {
		t.Fatalf("new netns: %v", r.err)
	}
	t.Cleanup(func() { r.ns.Close() })
	return r.ns
}

// inNS runs f on an OS thread inside ns; sockets f creates live there.
func inNS(ns netns.NsHandle, f func()) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		runtime.LockOSThread() // never unlocked: the thread dies with us
		if err := netns.Set(ns); err != nil {
			panic(err)
		}
		f()
	}()
	<-done
}

func nsPath(ns netns.NsHandle) string { return fmt.Sprintf("/proc/self/fd/%d", int(ns)) }

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)[:n]
}

func mustNet(t testing.TB, s string) *net.IPNet {
	p := netip.MustParsePrefix(s)
	return prefixNet(p)
}

// Addresses of the fake internet (documentation ranges; the test
// namespace has no other route anyway).
var (
	hostUp4   = netip.MustParseAddr("198.51.100.2")
	inetUp4   = netip.MustParseAddr("198.51.100.1")
	hostUp6   = netip.MustParseAddr("2001:db8:1::2")
	inetUp6   = netip.MustParseAddr("2001:db8:1::1")
	webA      = netip.MustParseAddr("203.0.113.10") // allowed by CIDR (tcp 80)
	webB      = netip.MustParseAddr("203.0.113.11") // allowed.example.com
	webDeny   = netip.MustParseAddr("203.0.113.20") // never allowed
	moveOld   = netip.MustParseAddr("203.0.113.12") // moving.example.com, first
	moveNew   = netip.MustParseAddr("203.0.113.13") // moving.example.com, then
	upstream  = netip.MustParseAddr("203.0.113.53") // the upstream resolver
	metadata  = netip.MustParseAddr("169.254.169.254")
	web6A     = netip.MustParseAddr("2001:db8:2::10") // allowed by CIDR
	web6B     = netip.MustParseAddr("2001:db8:2::20") // allowed.example.com AAAA
	web6Deny  = netip.MustParseAddr("2001:db8:2::30")
	inetAddrs = []netip.Addr{webA, webB, webDeny, moveOld, moveNew, upstream, metadata, web6A, web6B, web6Deny}
)

// upstreamDNS is the test's authoritative server for example.com.
type upstreamDNS struct {
	mu      sync.Mutex
	records map[string][]dns.RR
	queries int
}

func (u *upstreamDNS) set(name string, rrs ...string) {
	u.mu.Lock()
	defer u.mu.Unlock()
	var out []dns.RR
	for _, s := range rrs {
		rr, err := dns.NewRR(s)
		if err != nil {
			panic(err)
		}
		out = append(out, rr)
	}
	u.records[dns.Fqdn(name)] = out
}

func (u *upstreamDNS) ServeDNS(w dns.ResponseWriter, r *dns.Msg) {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.queries++
	m := new(dns.Msg)
	m.SetReply(r)
	m.Authoritative = true
	q := r.Question[0]
	rrs, ok := u.records[strings.ToLower(q.Name)]
	if !ok {
		m.Rcode = dns.RcodeNameError
	}
	for _, rr := range rrs {
		if rr.Header().Rrtype == q.Qtype {
			m.Answer = append(m.Answer, dns.Copy(rr))
		}
	}
	_ = w.WriteMsg(m)
}

// topo is the fake host (this process's namespace) with its uplink into a
// fake internet namespace that runs web, echo, metadata and DNS servers.
type topo struct {
	inet netns.NsHandle
	up   string // host end of the uplink
	dns  *upstreamDNS
}

func newTopo(t *testing.T) *topo {
	t.Helper()
	tp := &topo{inet: newNS(t), up: "t" + randHex(6) + "-up", dns: &upstreamDNS{records: map[string][]dns.RR{}}}
	lo, _ := netlink.LinkByName("lo")
	_ = netlink.LinkSetUp(lo)
	veth := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: tp.up}, PeerName: "eth0", PeerNamespace: netlink.NsFd(int(tp.inet))}
	if err := netlink.LinkAdd(veth); err != nil {
		t.Fatalf("uplink veth: %v", err)
	}
	t.Cleanup(func() {
		if l, err := netlink.LinkByName(tp.up); err == nil {
			_ = netlink.LinkDel(l)
		}
	})
	up, err := netlink.LinkByName(tp.up)
	if err != nil {
		t.Fatal(err)
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(netlink.AddrAdd(up, &netlink.Addr{IPNet: mustNet(t, "198.51.100.2/24")}))
	must(netlink.AddrAdd(up, &netlink.Addr{IPNet: mustNet(t, "2001:db8:1::2/64"), Flags: unix.IFA_F_NODAD}))
	must(netlink.LinkSetUp(up))
	must(netlink.RouteAdd(&netlink.Route{LinkIndex: up.Attrs().Index, Gw: ipOf(inetUp4)}))
	must(netlink.RouteAdd(&netlink.Route{LinkIndex: up.Attrs().Index, Gw: ipOf(inetUp6)}))

	h, err := netlink.NewHandleAt(tp.inet)
	must(err)
	defer h.Close()
	ilo, err := h.LinkByName("lo")
	must(err)
	must(h.LinkSetUp(ilo))
	for _, a := range inetAddrs {
		bits := 32
		if a.Is6() {
			bits = 128
		}
		must(h.AddrAdd(ilo, &netlink.Addr{IPNet: prefixNet(netip.PrefixFrom(a, bits)), Flags: unix.IFA_F_NODAD}))
	}
	eth0, err := h.LinkByName("eth0")
	must(err)
	must(h.AddrAdd(eth0, &netlink.Addr{IPNet: mustNet(t, "198.51.100.1/24")}))
	must(h.AddrAdd(eth0, &netlink.Addr{IPNet: mustNet(t, "2001:db8:1::1/64"), Flags: unix.IFA_F_NODAD}))
	must(h.LinkSetUp(eth0))

	// Servers: TCP greeter on :80 (says which address answered), UDP
	// echo on :7, and the upstream DNS on 203.0.113.53:53.
	var tcpLn net.Listener
	var udpPCs []net.PacketConn
	var dnsU net.PacketConn
	var dnsT net.Listener
	inNS(tp.inet, func() {
		tcpLn, err = net.Listen("tcp", "[::]:80")
		if err != nil {
			return
		}
		// One socket per address: a wildcard UDP socket would answer
		// from the uplink address, which no conntrack entry expects.
		for _, a := range inetAddrs {
			var pc net.PacketConn
			if pc, err = net.ListenPacket("udp", netip.AddrPortFrom(a, 7).String()); err != nil {
				return
			}
			udpPCs = append(udpPCs, pc)
		}
		dnsU, err = net.ListenPacket("udp", "203.0.113.53:53")
		if err != nil {
			return
		}
		dnsT, err = net.Listen("tcp", "203.0.113.53:53")
	})
	must(err)
	t.Cleanup(func() {
		tcpLn.Close()
		for _, pc := range udpPCs {
			pc.Close()
		}
	})
	go serveGreeter(tcpLn)
	for _, pc := range udpPCs {
		go func() {
			buf := make([]byte, 1500)
			for {
				n, from, err := pc.ReadFrom(buf)
				if err != nil {
					return
				}
				_, _ = pc.WriteTo(append([]byte("echo:"), buf[:n]...), from)
			}
		}()
	}
	for _, s := range []*dns.Server{{PacketConn: dnsU, Handler: tp.dns}, {Listener: dnsT, Handler: tp.dns}} {
		s := s
		go func() { _ = s.ActivateAndServe() }()
		t.Cleanup(func() { _ = s.Shutdown() })
	}
	return tp
}

// serveGreeter answers every connection with "hello <local addr>\n".
func serveGreeter(ln net.Listener) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		local := c.LocalAddr().(*net.TCPAddr).AddrPort()
		fmt.Fprintf(c, "hello %s\n", netip.AddrPortFrom(local.Addr().Unmap(), local.Port()))
		c.Close()
	}
}

const denyTimeout = 300 * time.Millisecond

// dialFrom connects from ns to addr and returns the greeting line.
func dialFrom(ns netns.NsHandle, addr netip.AddrPort, timeout time.Duration) (string, error) {
	var line string
	var err error
	inNS(ns, func() {
		var c net.Conn
		c, err = net.DialTimeout("tcp", addr.String(), timeout)
		if err != nil {
			return
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(timeout))
		line, err = bufio.NewReader(c).ReadString('\n')
	})
	return strings.TrimSpace(line), err
}

// udpFrom sends msg to addr from ns and waits for one reply.
func udpFrom(ns netns.NsHandle, addr netip.AddrPort, msg string, timeout time.Duration) (string, error) {
	var reply string
	var err error
	inNS(ns, func() {
		var c net.Conn
		c, err = net.Dial("udp", addr.String())
		if err != nil {
			return
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(timeout))
		if _, err = c.Write([]byte(msg)); err != nil {
			return
		}
		buf := make([]byte, 1500)
		var n int
		n, err = c.Read(buf)
		reply = string(buf[:n])
	})
	return reply, err
}

// queryFrom asks server (from ns) for name/qtype over proto.
func queryFrom(ns netns.NsHandle, server netip.Addr, proto, name string, qtype uint16, timeout time.Duration) (*dns.Msg, error) {
	var resp *dns.Msg
	var err error
	inNS(ns, func() {
		m := new(dns.Msg)
		m.SetQuestion(dns.Fqdn(name), qtype)
		c := &dns.Client{Net: proto, Timeout: timeout}
		resp, _, err = c.Exchange(m, netip.AddrPortFrom(server, 53).String())
	})
	return resp, err
}

// listenIn starts a greeter on addr inside ns.
func listenIn(t *testing.T, ns netns.NsHandle, addr string) {
	t.Helper()
	var ln net.Listener
	var err error
	inNS(ns, func() { ln, err = net.Listen("tcp", addr) })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go serveGreeter(ln)
}

// env is a Network on the fake host with the fake internet.
type env struct {
	*topo
	n        *Network
	instance string
}

func newEnv(t *testing.T, mutate func(*Config)) *env {
	t.Helper()
	tp := newTopo(t)
	inst := "berthtest-" + randHex(8)
	cfg := Config{
		Instance:  inst,
		Subnet4:   netip.MustParsePrefix("100.97.0.0/24"),
		Upstream:  []netip.AddrPort{netip.AddrPortFrom(upstream, 53)},
		PinMinTTL: time.Second,
	}
	if mutate != nil {
		mutate(&cfg)
	}
	n, err := New(context.Background(), cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	e := &env{topo: tp, n: n, instance: inst}
	t.Cleanup(func() {
		if err := e.n.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
		if err := Destroy(inst); err != nil {
			t.Errorf("Destroy: %v", err)
		}
	})
	return e
}

// sandbox creates a namespace and attaches it in egress mode.
func (e *env) sandbox(t *testing.T, id string, rules ...Rule) (netns.NsHandle, Attachment) {
	t.Helper()
	ns := newNS(t)
	v4, v6, err := e.n.Allocate(id, nil)
	if err != nil {
		t.Fatal(err)
	}
	a := Attachment{ID: id, Mode: ModeEgress, IPv4: v4, IPv6: v6, Rules: rules}
	if err := e.n.Attach(context.Background(), a, nsPath(ns)); err != nil {
		t.Fatalf("Attach %s: %v", id, err)
	}
	t.Cleanup(func() {
		if err := e.n.Detach(context.Background(), id); err != nil {
			t.Errorf("Detach %s: %v", id, err)
		}
	})
	return ns, a
}

// waitFlow polls the flow log of id until one record satisfies ok.
func waitFlow(t *testing.T, n *Network, id string, what string, ok func(Flow) bool) Flow {
	t.Helper()
	deadline := time.Now().Add(3 * time.Second)
	for {
		for _, f := range n.FlowLog(id, 0, 0) {
			if ok(f) {
				return f
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no flow-log record for %s; log: %+v", what, n.FlowLog(id, 0, 0))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func ap(a netip.Addr, port uint16) netip.AddrPort { return netip.AddrPortFrom(a, port) }

// hostNS is a handle to the fake host namespace (this process's).
func hostNS(t *testing.T) netns.NsHandle { return hostNSHandle }

func asNS(v any) netns.NsHandle { return v.(netns.NsHandle) }
