package auth

import (
	"strings"
	"testing"
	"time"
)

func testLeases() *Leases { return &Leases{key: []byte(strings.Repeat("k", 32))} }

// FuzzValidKey: an accepted key has exactly NewKey's form.
func FuzzValidKey(f *testing.F) {
	_, k := NewKey()
	for _, s := range []string{k, "berth_", "berth_" + strings.Repeat("a", 52), "berth_" + strings.Repeat("A", 52),
		"berth_" + strings.Repeat("a", 51) + "1", "berth_lease_x", "", "\x00"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if !ValidKey(s) {
			return
		}
		if len(s) != len(KeyPrefix)+52 || !strings.HasPrefix(s, KeyPrefix) {
			t.Fatalf("accepted %q", s)
		}
		for _, c := range s[len(KeyPrefix):] {
			if !(c >= 'a' && c <= 'z' || c >= '2' && c <= '7') {
				t.Fatalf("accepted %q with %q", s, c)
			}
		}
	})
}

// FuzzLeaseToken: only a token this key signed is accepted, and it names
// exactly what was signed; the fields are plain ids.
func FuzzLeaseToken(f *testing.F) {
	l := testLeases()
	f.Add(l.Token("abcdefghijklmnop"))
	f.Add(l.LeaseToken("sb1", NewLeaseID()))
	f.Add("berth_lease_sb1_c-sb1_" + strings.Repeat("0", 64))
	f.Add("berth_lease___")
	f.Add("berth_lease_sb1_" + strings.Repeat("0", 40))
	f.Fuzz(func(t *testing.T, tok string) {
		sb, id, ok := l.Check(tok)
		if !ok {
			return
		}
		if !tokenField(sb) || !tokenField(id) || l.LeaseToken(sb, id) != tok {
			t.Fatalf("accepted %q as %q %q", tok, sb, id)
		}
	})
}

// FuzzPortToken: only a token this key signed is accepted, and it
// round-trips to the same token.
func FuzzPortToken(f *testing.F) {
	l := testLeases()
	exp := time.Unix(2000000000, 0)
	f.Add(l.MintPort(PortToken{Sandbox: "sb1", Port: 8080, Expires: exp, ID: "p-abc"}))
	f.Add(l.MintPort(PortToken{Sandbox: "sb1", Port: 1, Expires: exp, ID: "p-1"}))
	f.Add("berth_port_sb1_08080_2000000000_-_" + strings.Repeat("0", 64))
	f.Add("berth_port_sb1_8080_-1_-_x")
	f.Add("berth_port_____")
	f.Fuzz(func(t *testing.T, tok string) {
		pt, ok := l.CheckPort(tok)
		if !ok {
			return
		}
		if pt.Port < 1 || pt.Port > 65535 || l.MintPort(pt) != tok {
			t.Fatalf("accepted %q as %+v", tok, pt)
		}
	})
}

// TestTokensRefuseOtherKeys: a token signed under another daemon's key,
// or with any field changed, is refused.
func TestTokensRefuseOtherKeys(t *testing.T) {
	l, other := testLeases(), &Leases{key: []byte(strings.Repeat("o", 32))}
	tok := other.LeaseToken("sb1", "l-1")
	if _, _, ok := l.Check(tok); ok {
		t.Error("accepted another key's lease token")
	}
	good := l.LeaseToken("sb1", "l-1")
	if _, _, ok := l.Check(strings.Replace(good, "sb1", "sb2", 1)); ok {
		t.Error("accepted a lease token moved to another sandbox")
	}
	pt := l.MintPort(PortToken{Sandbox: "sb1", Port: 80, Expires: time.Unix(2000000000, 0), ID: "p-2"})
	if _, ok := l.CheckPort(strings.Replace(pt, "_80_", "_81_", 1)); ok {
		t.Error("accepted a port token moved to another port")
	}
	if _, ok := other.CheckPort(pt); ok {
		t.Error("accepted another key's port token")
	}
}
