package network

import (
	"fmt"
	"net/netip"
	"testing"
	"time"
)

func TestRing(t *testing.T) {
	r := newRing(3)
	for i := 0; i < 5; i++ {
		r.add(Flow{Name: string(rune('a' + i))})
	}
	all := r.after(0, 0)
	if len(all) != 3 || all[0].Seq != 3 || all[2].Seq != 5 || all[2].Name != "e" {
		t.Fatalf("%+v", all)
	}
	if got := r.after(4, 10); len(got) != 1 || got[0].Seq != 5 {
		t.Fatalf("%+v", got)
	}
	if got := r.after(3, 1); len(got) != 1 || got[0].Seq != 4 {
		t.Fatalf("%+v", got)
	}
	if got := r.after(9, 0); len(got) != 0 {
		t.Fatalf("%+v", got)
	}
}

func TestAllocateAndNames(t *testing.T) {
	cfg := Config{Instance: "berth-1a2b3c4d", Subnet4: netip.MustParsePrefix("100.96.0.0/29"), Upstream: []netip.AddrPort{netip.MustParseAddrPort("192.0.2.1:53")}}
	if err := cfg.setDefaults(); err != nil {
		t.Fatal(err)
	}
	nm, err := newNames(cfg.Instance)
	if err != nil {
		t.Fatal(err)
	}
	if len(nm.veth(sandboxTag("x"))) > 15 || len(nm.bridge) > 15 {
		t.Fatal("interface name too long")
	}
	if _, err := newNames("bad name"); err == nil {
		t.Fatal("bad instance accepted")
	}
	n := &Network{cfg: cfg, nm: nm, byAddr: map[netip.Addr]*sandbox{}}
	taken := map[netip.Addr]bool{}
	for i := 0; i < 5; i++ { // /29: 8 addresses, minus network, gateway, broadcast
		v4, v6, err := n.Allocate(randHex(6), func(a netip.Addr) bool { return taken[a] })
		if err != nil {
			t.Fatal(err)
		}
		if taken[v4] || !cfg.Subnet4.Contains(v4) || !cfg.Subnet6.Contains(v6) || v4 == cfg.Subnet4.Addr().Next() {
			t.Fatalf("bad allocation %s %s", v4, v6)
		}
		taken[v4] = true
	}
	if _, _, err := n.Allocate("full", func(a netip.Addr) bool { return taken[a] }); err == nil {
		t.Fatal("allocated from a full subnet")
	}
	a1, _, _ := n.Allocate("same", nil)
	a2, _, _ := n.Allocate("same", nil)
	if a1 != a2 {
		t.Fatal("allocation not stable for an id")
	}
	if p := ula("x"); p.Bits() != 64 || p.Addr().As16()[0] != 0xfd {
		t.Fatal(p)
	}
}

func TestAutoSubnet4(t *testing.T) {
	none := func(netip.Prefix) bool { return false }
	if p, err := autoSubnet4("a", none); err != nil || p != DefaultSubnet4 {
		t.Fatalf("free default: %v %v", p, err)
	}
	// The default taken (another daemon's bridge): a /16 of 100.64/10,
	// stable per instance, and not the same for every instance.
	def := func(p netip.Prefix) bool { return p.Overlaps(DefaultSubnet4) }
	a, err := autoSubnet4("berth-aaaa", def)
	if err != nil || a == DefaultSubnet4 || a.Bits() != 16 || !netip.MustParsePrefix("100.64.0.0/10").Contains(a.Addr()) {
		t.Fatalf("taken default: %v %v", a, err)
	}
	if again, _ := autoSubnet4("berth-aaaa", def); again != a {
		t.Fatalf("not stable: %v then %v", a, again)
	}
	seen := map[netip.Prefix]bool{}
	for i := range 8 {
		p, _ := autoSubnet4(fmt.Sprintf("berth-%d", i), def)
		seen[p] = true
	}
	if len(seen) < 4 {
		t.Errorf("8 instances share %d subnets", len(seen))
	}
	// Everything taken but one: that one.
	want := netip.MustParsePrefix("100.101.0.0/16")
	if p, err := autoSubnet4("x", func(p netip.Prefix) bool { return p != want }); err != nil || p != want {
		t.Fatalf("last free: %v %v", p, err)
	}
	if _, err := autoSubnet4("x", func(netip.Prefix) bool { return true }); err == nil {
		t.Fatal("all taken: no error")
	}
}

func TestPins(t *testing.T) {
	now := time.Unix(1000, 0)
	p := pins{}
	a, b := netip.MustParseAddr("192.0.2.1"), netip.MustParseAddr("192.0.2.2")
	p.add("api.test.example", []netip.Addr{a}, now.Add(time.Minute), now)
	if !p.has("API.test.example.", a, now) {
		t.Fatal("pinned name/address not found")
	}
	if p.has("other.test.example", a, now) || p.has("api.test.example", b, now) {
		t.Fatal("a pin answers for another name or address")
	}
	if p.has("api.test.example", a, now.Add(time.Minute)) {
		t.Fatal("an expired pin still holds")
	}
	for i := 0; i < maxPinsPerSandbox+10; i++ {
		p.add(fmt.Sprintf("h%d.example", i), []netip.Addr{a}, now.Add(time.Minute), now)
	}
	if len(p) > maxPinsPerSandbox {
		t.Fatalf("pins grew to %d, bound %d", len(p), maxPinsPerSandbox)
	}
}

// ClampTTL is the local resolver's TTL policy, shared with the
// Kubernetes backend's: the answer's TTL at most the cap, the pin at
// least the floor.
func TestClampTTL(t *testing.T) {
	for _, c := range []struct {
		ttl    uint32
		answer uint32
		pin    time.Duration
	}{{0, 0, 5 * time.Second}, {3, 3, 5 * time.Second}, {60, 60, time.Minute}, {7200, 3600, time.Hour}} {
		a, p := ClampTTL(c.ttl, 5*time.Second, time.Hour)
		if a != c.answer || p != c.pin {
			t.Errorf("ClampTTL(%d) = %d, %v; want %d, %v", c.ttl, a, p, c.answer, c.pin)
		}
	}
	now := time.Now()
	p := Pins{}
	p.Add("a.test", []netip.Addr{netip.MustParseAddr("192.0.2.1")}, now.Add(time.Minute), now, 10)
	p.Add("b.test", []netip.Addr{netip.MustParseAddr("192.0.2.2")}, now.Add(-time.Minute), now, 10)
	if !p.Prune(now, func(k PinKey) bool { return true }) || len(p) != 1 {
		t.Errorf("prune kept %v", p)
	}
	if !p.Prune(now, func(k PinKey) bool { return k.Name != "a.test" }) || len(p) != 0 {
		t.Errorf("prune by name kept %v", p)
	}
}
