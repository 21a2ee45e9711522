package network

import (
	"context"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/nftables"
	"github.com/miekg/dns"
	"github.com/vishvananda/netlink"
)

func cidr(s string, proto string, ports ...uint16) Rule {
	return Rule{CIDR: netip.MustParsePrefix(s), Proto: proto, Ports: ports}
}

func domain(d string) Rule { return Rule{Domain: d} }

// TestEgress drives one narrow and one wide sandbox through every case of
// the policy: what is allowed is reachable, everything else is dropped
// (and logged), in IPv4 and IPv6, TCP and UDP.
func TestEgress(t *testing.T) {
	requireNetNS(t)
	e := newEnv(t, nil)
	e.dns.set("allowed.example.com", "allowed.example.com. 30 IN A 203.0.113.11", "allowed.example.com. 30 IN AAAA 2001:db8:2::20")
	e.dns.set("evil.example.com", "evil.example.com. 30 IN A 203.0.113.20")
	e.dns.set("moving.example.com", "moving.example.com. 1 IN A 203.0.113.12")
	e.dns.set("a.wild.example.com", "a.wild.example.com. 30 IN A 203.0.113.11")

	narrowRules := []Rule{
		cidr("203.0.113.10/32", "tcp", 80),
		cidr("2001:db8:2::10/128", ""),
		domain("allowed.example.com"),
		domain("moving.example.com"),
		domain("*.wild.example.com"),
	}
	narrow, na := e.sandbox(t, "sb-narrow", narrowRules...)
	// The wide sandbox allows all of IPv4 and IPv6: protected
	// destinations must stay unreachable all the same.
	wide, wa := e.sandbox(t, "sb-wide", cidr("0.0.0.0/0", ""), cidr("::/0", ""))
	gw4, gw6 := e.n.Gateways()

	// The "control API": a listener on every host address.
	listenIn(t, hostNS(t), "[::]:8080")
	listenIn(t, wide, "[::]:9000")
	listenIn(t, narrow, "[::]:9000")

	reach := func(t *testing.T, ns any, to netip.AddrPort) {
		t.Helper()
		line, err := dialFrom(asNS(ns), to, 2*time.Second)
		if err != nil {
			t.Fatalf("dial %s: %v", to, err)
		}
		if want := "hello " + to.String(); line != want {
			t.Fatalf("dial %s: got %q want %q", to, line, want)
		}
	}
	unreachable := func(t *testing.T, ns any, id string, to netip.AddrPort, reason string) {
		t.Helper()
		if line, err := dialFrom(asNS(ns), to, denyTimeout); err == nil {
			t.Fatalf("dial %s: reached (%q), want dropped", to, line)
		}
		if reason != "" {
			waitFlow(t, e.n, id, "deny "+to.String(), func(f Flow) bool {
				return f.Kind == "conn" && f.Decision == Deny && f.Dst == to && f.Rule == reason && f.Proto == "tcp"
			})
		}
	}

	t.Run("resolv.conf", func(t *testing.T) {
		rc := e.n.ResolvConf()
		if !strings.Contains(rc, "nameserver "+gw4.String()) || !strings.Contains(rc, "nameserver "+gw6.String()) {
			t.Fatalf("resolv.conf %q", rc)
		}
	})
	t.Run("allowed IP reachable and logged", func(t *testing.T) {
		reach(t, narrow, ap(webA, 80))
		f := waitFlow(t, e.n, na.ID, "allow", func(f Flow) bool {
			return f.Decision == Allow && f.Dst == ap(webA, 80)
		})
		if f.Rule != "203.0.113.10/32 tcp port 80" || f.Src.Addr() != na.IPv4 || f.Proto != "tcp" {
			t.Fatalf("allow record %+v", f)
		}
	})
	t.Run("allowed IPv6 reachable", func(t *testing.T) {
		reach(t, narrow, ap(web6A, 80))
	})
	t.Run("allowed domain resolves and is reachable", func(t *testing.T) {
		// Not reachable before the name was resolved.
		unreachable(t, narrow, na.ID, ap(webB, 80), reasonNoRule)
		for _, proto := range []string{"udp", "tcp"} {
			resp, err := queryFrom(narrow, gw4, proto, "Allowed.Example.com", dns.TypeA, 2*time.Second)
			if err != nil || resp.Rcode != dns.RcodeSuccess || len(resp.Answer) != 1 {
				t.Fatalf("query over %s: %v %v", proto, resp, err)
			}
		}
		resp, err := queryFrom(narrow, gw6, "udp", "allowed.example.com", dns.TypeAAAA, 2*time.Second)
		if err != nil || resp.Rcode != dns.RcodeSuccess || len(resp.Answer) != 1 {
			t.Fatalf("AAAA query: %v %v", resp, err)
		}
		reach(t, narrow, ap(webB, 80))
		reach(t, narrow, ap(web6B, 80))
		f := waitFlow(t, e.n, na.ID, "allow by name", func(f Flow) bool { return f.Decision == Allow && f.Dst == ap(webB, 80) })
		if f.Name != "allowed.example.com" || f.Rule != "allowed.example.com" {
			t.Fatalf("record %+v", f)
		}
		waitFlow(t, e.n, na.ID, "dns allow", func(f Flow) bool {
			return f.Kind == "dns" && f.Decision == Allow && f.Name == "allowed.example.com" && slices.Contains(f.Answers, webB)
		})
		// The egress proxy's check: the name and the address it resolved
		// to, for this sandbox only.
		if !e.n.Pinned(na.ID, "allowed.example.com", webB) || !e.n.Pinned(na.ID, "allowed.example.com", web6B) {
			t.Fatal("Pinned: the resolved name/address pair is not pinned")
		}
		if e.n.Pinned(na.ID, "evil.example.com", webB) || e.n.Pinned(na.ID, "allowed.example.com", webA) || e.n.Pinned(wa.ID, "allowed.example.com", webB) {
			t.Fatal("Pinned answers for another name, address or sandbox")
		}
	})
	t.Run("wildcard domain", func(t *testing.T) {
		resp, err := queryFrom(narrow, gw4, "udp", "a.wild.example.com", dns.TypeA, 2*time.Second)
		if err != nil || resp.Rcode != dns.RcodeSuccess {
			t.Fatalf("query: %v %v", resp, err)
		}
		resp, err = queryFrom(narrow, gw4, "udp", "wild.example.com", dns.TypeA, 2*time.Second)
		if err != nil || resp.Rcode != dns.RcodeNameError {
			t.Fatalf("*.wild must not match the apex: %v %v", resp, err)
		}
	})
	t.Run("non-allowed domain is NXDOMAIN", func(t *testing.T) {
		before := e.dns.count()
		resp, err := queryFrom(narrow, gw4, "udp", "evil.example.com", dns.TypeA, 2*time.Second)
		if err != nil || resp.Rcode != dns.RcodeNameError || len(resp.Answer) != 0 {
			t.Fatalf("query: %v %v", resp, err)
		}
		if e.dns.count() != before {
			t.Fatal("a non-allowed name reached the upstream")
		}
		waitFlow(t, e.n, na.ID, "dns deny", func(f Flow) bool {
			return f.Kind == "dns" && f.Decision == Deny && f.Name == "evil.example.com" && f.Rule == reasonNotAllowed
		})
		unreachable(t, narrow, na.ID, ap(webDeny, 80), reasonNoRule)
	})
	t.Run("non-allowed IP dropped", func(t *testing.T) {
		unreachable(t, narrow, na.ID, ap(webDeny, 80), reasonNoRule)
	})
	t.Run("IPv6 non-allowed dropped", func(t *testing.T) {
		unreachable(t, narrow, na.ID, ap(web6Deny, 80), reasonNoRule)
	})
	t.Run("UDP non-allowed dropped", func(t *testing.T) {
		// Sanity: the wide sandbox gets its echo back.
		if r, err := udpFrom(wide, ap(webDeny, 7), "x", 2*time.Second); err != nil || r != "echo:x" {
			t.Fatalf("wide UDP echo: %q %v", r, err)
		}
		// 203.0.113.10 is allowed for tcp/80 only.
		for _, to := range []netip.AddrPort{ap(webDeny, 7), ap(webA, 7), ap(web6Deny, 7)} {
			if r, err := udpFrom(narrow, to, "x", denyTimeout); err == nil {
				t.Fatalf("UDP to %s answered %q", to, r)
			}
			waitFlow(t, e.n, na.ID, "udp deny", func(f Flow) bool {
				return f.Proto == "udp" && f.Decision == Deny && f.Dst == to
			})
		}
	})
	t.Run("DNS straight to the upstream dropped", func(t *testing.T) {
		for _, ns := range []any{narrow, wide} {
			for _, proto := range []string{"udp", "tcp"} {
				if resp, err := queryFrom(asNS(ns), upstream, proto, "allowed.example.com", dns.TypeA, denyTimeout); err == nil {
					t.Fatalf("direct DNS over %s answered: %v", proto, resp)
				}
			}
		}
		waitFlow(t, e.n, wa.ID, "dns deny", func(f Flow) bool {
			return f.Kind == "conn" && f.Decision == Deny && f.Dst == ap(upstream, 53) && f.Rule == reasonDNS
		})
	})
	t.Run("metadata unreachable", func(t *testing.T) {
		unreachable(t, wide, wa.ID, ap(metadata, 80), reasonProtected)
		unreachable(t, narrow, na.ID, ap(metadata, 80), reasonProtected)
	})
	t.Run("host unreachable except the resolver", func(t *testing.T) {
		for _, to := range []netip.AddrPort{ap(gw4, 8080), ap(gw6, 8080), ap(hostUp4, 8080), ap(hostUp6, 8080)} {
			unreachable(t, wide, wa.ID, to, reasonHost)
		}
		if _, err := dialFrom(hostNS(t), ap(hostUp4, 8080), time.Second); err != nil {
			t.Fatalf("control listener not up: %v", err)
		}
	})
	t.Run("other sandbox unreachable", func(t *testing.T) {
		unreachable(t, wide, wa.ID, ap(na.IPv4, 9000), reasonProtected)
		unreachable(t, wide, wa.ID, ap(na.IPv6, 9000), reasonProtected)
		unreachable(t, narrow, na.ID, ap(wa.IPv4, 9000), reasonProtected)
	})
	t.Run("daemon reaches a sandbox port", func(t *testing.T) {
		c, err := e.n.Dial(context.Background(), wa.ID, 9000)
		if err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, 64)
		k, _ := c.Read(buf)
		c.Close()
		if !strings.HasPrefix(string(buf[:k]), "hello "+wa.IPv4.String()) {
			t.Fatalf("got %q", buf[:k])
		}
	})
	t.Run("name whose address changes is followed after its TTL", func(t *testing.T) {
		resp, err := queryFrom(narrow, gw4, "udp", "moving.example.com", dns.TypeA, 2*time.Second)
		if err != nil || len(resp.Answer) != 1 {
			t.Fatalf("query: %v %v", resp, err)
		}
		reach(t, narrow, ap(moveOld, 80))
		unreachable(t, narrow, na.ID, ap(moveNew, 80), "")
		e.dns.set("moving.example.com", "moving.example.com. 1 IN A 203.0.113.13")
		time.Sleep(1200 * time.Millisecond)
		unreachable(t, narrow, na.ID, ap(moveOld, 80), reasonNoRule)
		resp, err = queryFrom(narrow, gw4, "udp", "moving.example.com", dns.TypeA, 2*time.Second)
		if err != nil || len(resp.Answer) != 1 || resp.Answer[0].(*dns.A).A.String() != moveNew.String() {
			t.Fatalf("query: %v %v", resp, err)
		}
		reach(t, narrow, ap(moveNew, 80))
		// A repeated answer refreshes the pin rather than failing.
		for range 3 {
			if _, err := queryFrom(narrow, gw4, "udp", "moving.example.com", dns.TypeA, 2*time.Second); err != nil {
				t.Fatal(err)
			}
		}
		reach(t, narrow, ap(moveNew, 80))
	})
	t.Run("rules change live", func(t *testing.T) {
		unreachable(t, narrow, na.ID, ap(webDeny, 80), reasonNoRule)
		if err := e.n.SetRules(na.ID, append(slices.Clone(narrowRules), cidr("203.0.113.20/32", "tcp"))); err != nil {
			t.Fatal(err)
		}
		reach(t, narrow, ap(webDeny, 80))
		// Pins of domain rules that stayed survive the update.
		reach(t, narrow, ap(webB, 80))
		if err := e.n.SetRules(na.ID, narrowRules[:1]); err != nil {
			t.Fatal(err)
		}
		unreachable(t, narrow, na.ID, ap(webDeny, 80), reasonNoRule)
		unreachable(t, narrow, na.ID, ap(webB, 80), reasonNoRule)
		resp, err := queryFrom(narrow, gw4, "udp", "allowed.example.com", dns.TypeA, 2*time.Second)
		if err != nil || resp.Rcode != dns.RcodeNameError {
			t.Fatalf("removed domain still resolves: %v %v", resp, err)
		}
		if err := e.n.SetRules(na.ID, narrowRules); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("explicit rule opens a protected address", func(t *testing.T) {
		if err := e.n.SetRules(wa.ID, []Rule{cidr("169.254.169.254/32", "tcp", 80)}); err != nil {
			t.Fatal(err)
		}
		reach(t, wide, ap(metadata, 80))
		unreachable(t, wide, wa.ID, ap(webA, 80), reasonNoRule)
	})
	t.Run("flow log paging", func(t *testing.T) {
		all := e.n.FlowLog(na.ID, 0, 0)
		if len(all) < 5 {
			t.Fatalf("only %d records", len(all))
		}
		page := e.n.FlowLog(na.ID, all[1].Seq, 2)
		if len(page) != 2 || page[0].Seq != all[2].Seq || page[1].Seq != all[3].Seq {
			t.Fatalf("page %+v", page)
		}
	})
}

func (u *upstreamDNS) count() int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.queries
}

// TestModeNone: only lo, up, and nothing on the host.
func TestModeNone(t *testing.T) {
	requireNetNS(t)
	e := newEnv(t, nil)
	ifs0, sets0, err := e.n.Resources()
	if err != nil {
		t.Fatal(err)
	}
	ns := newNS(t)
	if err := e.n.Attach(context.Background(), Attachment{ID: "none-1", Mode: ModeNone}, nsPath(ns)); err != nil {
		t.Fatal(err)
	}
	h, err := netlink.NewHandleAt(ns)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	links, err := h.LinkList()
	if err != nil {
		t.Fatal(err)
	}
	if len(links) != 1 || links[0].Attrs().Name != "lo" || links[0].Attrs().Flags&1 == 0 {
		t.Fatalf("links in a mode-none sandbox: %+v", links)
	}
	ifs1, sets1, _ := e.n.Resources()
	if !slices.Equal(ifs0, ifs1) || !slices.Equal(sets0, sets1) {
		t.Fatalf("mode none changed the host: %v %v", ifs1, sets1)
	}
	if err := e.n.Detach(context.Background(), "none-1"); err != nil {
		t.Fatal(err)
	}
}

// TestChurn: 200 attach/detach cycles leave nothing behind.
func TestChurn(t *testing.T) {
	requireNetNS(t)
	e := newEnv(t, nil)
	e.dns.set("allowed.example.com", "allowed.example.com. 30 IN A 203.0.113.11")
	ifs0, sets0, err := e.n.Resources()
	if err != nil {
		t.Fatal(err)
	}
	if len(ifs0) != 1 {
		t.Fatalf("baseline interfaces %v", ifs0)
	}
	ns := newNS(t)
	ctx := context.Background()
	start := time.Now()
	const cycles = 200
	for i := range cycles {
		id := "churn-" + randHex(8)
		v4, v6, err := e.n.Allocate(id, nil)
		if err != nil {
			t.Fatal(err)
		}
		a := Attachment{ID: id, Mode: ModeEgress, IPv4: v4, IPv6: v6, Rules: []Rule{
			cidr("203.0.113.10/32", "tcp", 80, 443), domain("allowed.example.com"), domain("*.example.org"),
		}}
		if err := e.n.Attach(ctx, a, nsPath(ns)); err != nil {
			t.Fatalf("cycle %d: %v", i, err)
		}
		if i%50 == 0 { // exercise the pin path too
			if resp, err := queryFrom(ns, v4Gateway(e), "udp", "allowed.example.com", dns.TypeA, 2*time.Second); err != nil || len(resp.Answer) != 1 {
				t.Fatalf("cycle %d query: %v %v", i, resp, err)
			}
		}
		if err := e.n.Detach(ctx, id); err != nil {
			t.Fatalf("cycle %d detach: %v", i, err)
		}
	}
	t.Logf("%d attach/detach cycles in %v", cycles, time.Since(start))
	ifs1, sets1, err := e.n.Resources()
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(ifs0, ifs1) {
		t.Fatalf("interfaces leaked: %v", ifs1)
	}
	if !slices.Equal(sets0, sets1) {
		t.Fatalf("nft objects leaked: before %v after %v", sets0, sets1)
	}
	h, _ := netlink.NewHandleAt(ns)
	defer h.Close()
	if links, _ := h.LinkList(); len(links) != 1 {
		t.Fatalf("sandbox namespace still has %d links", len(links))
	}
	neigh, _ := netlink.NeighList(0, 0)
	for _, nb := range neigh {
		if nb.State == netlink.NUD_PERMANENT {
			t.Fatalf("neighbour entry leaked: %+v", nb)
		}
	}
}

func v4Gateway(e *env) netip.Addr { g, _ := e.n.Gateways(); return g }

// TestRestartAdoptAndPrune: a new Network adopts the bridge and tables of
// the old one; Adopt restores a live sandbox, Prune removes the rest.
func TestRestartAdoptAndPrune(t *testing.T) {
	requireNetNS(t)
	e := newEnv(t, nil)
	keep, ka := e.sandbox(t, "keep", cidr("203.0.113.10/32", "tcp"))
	_, _ = e.sandbox(t, "gone")
	reachOK := func() {
		t.Helper()
		if _, err := dialFrom(keep, ap(webA, 80), 2*time.Second); err != nil {
			t.Fatalf("keep lost its network: %v; flows %+v", err, e.n.FlowLog("keep", 0, 0))
		}
	}
	reachOK()
	if err := e.n.Close(); err != nil {
		t.Fatal(err)
	}
	n2, err := New(context.Background(), e.n.cfg)
	if err != nil {
		t.Fatalf("second New: %v", err)
	}
	e.n = n2
	reachOK()
	if err := n2.Adopt(context.Background(), ka); err != nil {
		t.Fatal(err)
	}
	reachOK()
	removed, err := n2.Prune(context.Background(), func(id string) bool { return id == "keep" })
	if err != nil || !slices.Equal(removed, []string{"gone"}) {
		t.Fatalf("Prune: %v %v", removed, err)
	}
	reachOK()
	if _, err := queryFrom(keep, v4Gateway(e), "udp", "x.example.com", dns.TypeA, 2*time.Second); err != nil {
		t.Fatalf("resolver does not serve the adopted sandbox: %v", err)
	}
	ifs, _, _ := n2.Resources()
	if len(ifs) != 2 {
		t.Fatalf("interfaces after prune: %v", ifs)
	}
}

// TestDestroy removes the bridge, veths and both tables.
func TestDestroy(t *testing.T) {
	requireNetNS(t)
	e := newEnv(t, nil)
	e.sandbox(t, "d1", cidr("203.0.113.10/32", ""))
	if err := e.n.Close(); err != nil {
		t.Fatal(err)
	}
	if err := Destroy(e.instance); err != nil {
		t.Fatal(err)
	}
	ifs, sets, err := e.n.Resources()
	if err != nil || len(ifs) != 0 || len(sets) != 0 {
		t.Fatalf("after Destroy: %v %v %v", ifs, sets, err)
	}
	c, _ := nftables.New()
	tables, _ := c.ListTables()
	for _, tb := range tables {
		if tb.Name == e.instance {
			t.Fatalf("table %s survived", tb.Name)
		}
	}
	if err := Destroy(e.instance); err != nil {
		t.Fatalf("second Destroy: %v", err)
	}
}
