package egressrule

import (
	"net/netip"
	"testing"
)

func TestRules(t *testing.T) {
	good := []Rule{
		{CIDR: netip.MustParsePrefix("10.0.0.0/8")},
		{Domain: "*.PyPI.org."},
		{Domain: "example.com", Ports: []uint16{443, 80, 443}, Proto: "tcp"},
	}
	if err := ValidateAll(good); err != nil {
		t.Fatal(err)
	}
	for _, r := range []Rule{
		{},
		{CIDR: netip.MustParsePrefix("10.0.0.0/8"), Domain: "x.org"},
		{Domain: "a.*.org"},
		{Domain: "bad name"},
		{Domain: "x.org", Proto: "icmp"},
		{Domain: "x.org", Ports: []uint16{0}},
	} {
		if r.Validate() == nil {
			t.Errorf("%+v validated", r)
		}
	}
	if s := good[2].String(); s != "example.com tcp port 80,443" {
		t.Fatalf("String %q", s)
	}
	if good[1].String() != "*.pypi.org" {
		t.Fatal(good[1].String())
	}
	for _, c := range []struct {
		pat, name string
		want      bool
	}{
		{"*.pypi.org", "files.pypi.org", true},
		{"*.pypi.org", "a.b.pypi.org", true},
		{"*.pypi.org", "pypi.org", false},
		{"*.pypi.org", "evilpypi.org", false},
		{"pypi.org", "pypi.org", true},
		{"pypi.org", "x.pypi.org", false},
	} {
		if got := MatchDomain(c.pat, c.name); got != c.want {
			t.Errorf("MatchDomain(%q, %q) = %v", c.pat, c.name, got)
		}
	}
	r := Rule{CIDR: netip.MustParsePrefix("203.0.113.0/24"), Ports: []uint16{53}}
	if !r.matchesFlow(netip.MustParseAddrPort("203.0.113.9:53"), protoUDP) || r.matchesFlow(netip.MustParseAddrPort("203.0.113.9:54"), protoUDP) {
		t.Fatal("matchesFlow")
	}
}

func TestAllowsTCP(t *testing.T) {
	rules := []Rule{{Domain: "api.test.example"}, {Domain: "*.svc.example", Ports: []uint16{443}, Proto: "tcp"}, {Domain: "dns.example", Ports: []uint16{443}, Proto: "udp"}}
	for _, c := range []struct {
		host string
		want bool
	}{{"api.test.example", true}, {"x.svc.example", true}, {"svc.example", false}, {"dns.example", false}, {"other.test.example", false}} {
		if got := AllowsTCP(rules, c.host, 443); got != c.want {
			t.Errorf("AllowsTCP(%s) = %v, want %v", c.host, got, c.want)
		}
	}
	if AllowsTCP(rules, "x.svc.example", 80) {
		t.Error("a rule for port 443 allows 80")
	}
}
