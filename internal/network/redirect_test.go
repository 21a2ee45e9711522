package network

import (
	"context"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/google/nftables"
	"github.com/miekg/dns"

	"github.com/berth-sh/berth/internal/secrets/egressproxy"
)

// TestEgressProxyRedirect: a sandbox whose attachment names a redirect
// host has its TCP 443 to that host's pinned addresses DNATed to the
// proxy port on the gateway, where SO_ORIGINAL_DST gives the real
// destination; its port 80, and every port of a sandbox without redirect,
// go straight out; the proxy port is not reachable directly.
func TestEgressProxyRedirect(t *testing.T) {
	requireNetNS(t)
	const proxyPort = 18443
	e := newEnv(t, func(c *Config) { c.ProxyPort = proxyPort })
	e.dns.set("allowed.example.com", "allowed.example.com. 30 IN A 203.0.113.11", "allowed.example.com. 30 IN AAAA 2001:db8::11")
	listenIn(t, e.inet, "[::]:443")
	gw4, _ := e.n.Gateways()

	// The proxy stand-in: answers with the original destination.
	ln, err := net.Listen("tcp", netipJoin(gw4, proxyPort))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			dst, err := egressproxy.OriginalDst(c)
			fmt.Fprintf(c, "proxy %s %v\n", dst, err)
			c.Close()
		}
	}()

	ns := newNS(t)
	v4, v6, err := e.n.Allocate("sb-redir", nil)
	if err != nil {
		t.Fatal(err)
	}
	a := Attachment{ID: "sb-redir", Mode: ModeEgress, IPv4: v4, IPv6: v6,
		Rules: []Rule{domain("allowed.example.com")}, Redirect: []string{"Allowed.Example.com"}}
	if err := e.n.Attach(context.Background(), a, nsPath(ns)); err != nil {
		t.Fatal(err)
	}
	detached := false
	t.Cleanup(func() {
		if !detached {
			_ = e.n.Detach(context.Background(), a.ID)
		}
	})
	plain, _ := e.sandbox(t, "sb-plain", domain("allowed.example.com"))

	for _, s := range []any{ns, plain} {
		if resp, err := queryFrom(asNS(s), gw4, "udp", "allowed.example.com", 1, 2*time.Second); err != nil || len(resp.Answer) != 1 {
			t.Fatalf("query: %v %v", resp, err)
		}
	}
	// The redirect is IPv4 only: a redirected name has no AAAA for the
	// sandbox (so nothing of it is pinned over IPv6); others keep theirs.
	if resp, err := queryFrom(ns, gw4, "udp", "allowed.example.com", dns.TypeAAAA, 2*time.Second); err != nil || len(resp.Answer) != 0 {
		t.Fatalf("AAAA of a redirected name: %v %v", resp, err)
	}
	if resp, err := queryFrom(asNS(plain), gw4, "udp", "allowed.example.com", dns.TypeAAAA, 2*time.Second); err != nil || len(resp.Answer) != 1 {
		t.Fatalf("AAAA for a sandbox without redirect: %v %v", resp, err)
	}
	if line, err := dialFrom(ns, ap(webB, 443), 2*time.Second); err != nil || line != "proxy 203.0.113.11:443 <nil>" {
		t.Fatalf("redirected 443: %q %v", line, err)
	}
	if line, err := dialFrom(ns, ap(webB, 80), 2*time.Second); err != nil || line != "hello 203.0.113.11:80" {
		t.Fatalf("port 80 must not be redirected: %q %v", line, err)
	}
	if line, err := dialFrom(asNS(plain), ap(webB, 443), 2*time.Second); err != nil || line != "hello 203.0.113.11:443" {
		t.Fatalf("a sandbox without redirect: %q %v", line, err)
	}
	if line, err := dialFrom(ns, ap(gw4, proxyPort), denyTimeout); err == nil {
		t.Fatalf("the proxy port is reachable directly: %q", line)
	}
	if line, err := dialFrom(asNS(plain), ap(gw4, proxyPort), denyTimeout); err == nil {
		t.Fatalf("the proxy port is reachable from another sandbox: %q", line)
	}

	if err := e.n.Detach(context.Background(), a.ID); err != nil {
		t.Fatal(err)
	}
	detached = true
	c, err := nftables.New()
	if err != nil {
		t.Fatal(err)
	}
	chains, err := c.ListChains()
	if err != nil {
		t.Fatal(err)
	}
	for _, ch := range chains {
		if ch.Name == e.n.nm.rdChain(sandboxTag(a.ID)) {
			t.Fatalf("chain %s left after Detach", ch.Name)
		}
	}
	els, err := c.GetSetElements(e.n.redirectMap())
	if err != nil || len(els) != 0 {
		t.Fatalf("rd4 after Detach: %v %v", els, err)
	}
}

func netipJoin(a interface{ String() string }, port int) string {
	return net.JoinHostPort(a.String(), fmt.Sprint(port))
}
