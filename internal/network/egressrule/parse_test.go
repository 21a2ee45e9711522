package egressrule

import "testing"

func TestParseRule(t *testing.T) {
	good := map[string]string{
		"10.0.0.0/8":                "10.0.0.0/8",
		"1.1.1.1":                   "1.1.1.1/32",
		"2001:db8::1":               "2001:db8::1/128",
		"[2001:db8::1]:443":         "2001:db8::1/128 port 443",
		"pypi.org:443":              "pypi.org port 443",
		"tcp://*.github.com:443,22": "*.github.com tcp port 22,443",
		"udp://10.1.2.3:53":         "10.1.2.3/32 udp port 53",
		"Example.COM.":              "example.com",
	}
	for in, want := range good {
		r, err := Parse(in)
		if err != nil || r.String() != want {
			t.Errorf("%q: got %q %v, want %q", in, r.String(), err, want)
		}
	}
	for _, bad := range []string{"", "pypi.org:0", "pypi.org:x", "[::1", "ftp://x", "a b", "1.2.3.4:70000"} {
		if _, err := Parse(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

func FuzzParseRule(f *testing.F) {
	for _, s := range []string{"10.0.0.0/8", "[::1]:1", "tcp://*.a.b:1,2", "x:y:z", "\x00"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		r, err := Parse(s)
		if err == nil {
			if _, err := Parse(r.String()); err != nil && r.Proto == "" && len(r.Ports) == 0 {
				t.Fatalf("canonical form %q of %q does not parse: %v", r.String(), s, err)
			}
		}
	})
}
