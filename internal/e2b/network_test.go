package e2b

import (
	"net/netip"
	"slices"
	"testing"
)

// TestEgressAllow: E2B's deny list with exceptions becomes the allow list
// that reaches exactly the same addresses.
func TestEgressAllow(t *testing.T) {
	reach := func(allow []string, a string) bool {
		addr := netip.MustParseAddr(a)
		for _, r := range allow {
			if p, err := netip.ParsePrefix(r); err == nil && p.Contains(addr) {
				return true
			}
			if r == a {
				return true
			}
		}
		return false
	}
	for _, c := range []struct {
		allowOut, denyOut []string
		yes, no           []string
	}{
		{nil, nil, []string{"8.8.8.8", "1.1.1.1", "2001:db8::1"}, nil},
		{nil, []string{"8.8.8.8"}, []string{"8.8.8.9", "8.8.8.7", "1.1.1.1", "255.255.255.255", "0.0.0.0", "2001:db8::1"}, []string{"8.8.8.8"}},
		{nil, []string{"10.0.0.0/8", "192.168.1.0/24"}, []string{"11.0.0.1", "9.255.255.255", "192.168.2.1"}, []string{"10.1.2.3", "192.168.1.7"}},
		{[]string{"1.1.1.1"}, []string{"0.0.0.0/0"}, []string{"1.1.1.1"}, []string{"8.8.8.8", "1.1.1.2", "2001:db8::1"}},
		{[]string{"8.8.8.8"}, []string{"8.8.8.0/24"}, []string{"8.8.8.8", "8.8.9.1"}, []string{"8.8.8.7"}},
		{nil, []string{"2001:db8::1"}, []string{"2001:db8::2", "8.8.8.8"}, []string{"2001:db8::1"}},
		{nil, []string{"::ffff:8.8.8.8"}, []string{"8.8.8.9"}, []string{"8.8.8.8"}},
	} {
		allow, err := egressAllow(c.allowOut, c.denyOut)
		if err != nil {
			t.Fatalf("%v %v: %v", c.allowOut, c.denyOut, err)
		}
		for _, a := range c.yes {
			if !reach(allow, a) {
				t.Errorf("allowOut %v denyOut %v: %s unreachable in %v", c.allowOut, c.denyOut, a, allow)
			}
		}
		for _, a := range c.no {
			if reach(allow, a) {
				t.Errorf("allowOut %v denyOut %v: %s reachable in %v", c.allowOut, c.denyOut, a, allow)
			}
		}
	}
	if allow, _ := egressAllow(nil, []string{"8.8.8.8"}); len(allow) != 33 || !slices.Contains(allow, "::/0") {
		t.Errorf("one denied IPv4 address: %d rules %v, want its 32 neighbours and ::/0", len(allow), allow)
	}
	for _, bad := range []string{"example.com", "8.8.8.8/33", "fe80::1%eth0", ""} {
		if _, err := egressAllow(nil, []string{bad}); err == nil {
			t.Errorf("denyOut %q accepted", bad)
		}
	}
}

func FuzzEgressAllow(f *testing.F) {
	f.Add("8.8.8.8", "1.2.3.4")
	f.Add("10.0.0.0/8", "10.1.1.1")
	f.Add("::1", "::2")
	f.Fuzz(func(t *testing.T, deny, probe string) {
		allow, err := egressAllow(nil, []string{deny})
		if err != nil {
			return
		}
		a, err := netip.ParseAddr(probe)
		if err != nil {
			return
		}
		a = a.Unmap()
		d, derr := netip.ParsePrefix(deny)
		if derr != nil {
			da := netip.MustParseAddr(deny).Unmap()
			d = netip.PrefixFrom(da, da.BitLen())
		}
		if d.Addr().Is4In6() {
			d = netip.PrefixFrom(d.Addr().Unmap(), d.Bits()-96)
		}
		denied := d.Masked().Contains(a) || (d.Masked() == all4)
		in := 0
		for _, r := range allow {
			if netip.MustParsePrefix(r).Contains(a) {
				in++
			}
		}
		if denied && in != 0 || !denied && in != 1 {
			t.Fatalf("deny %s: %s covered %d times by %v", deny, a, in, allow)
		}
	})
}
