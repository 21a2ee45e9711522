package e2b

import (
	"strings"
	"testing"
)

func TestParseTarget(t *testing.T) {
	for _, tc := range []struct {
		host, domain, id, port string
		want                   Target
		ok, bad                bool
	}{
		{host: "127.0.0.1:3000", ok: false},
		{host: "49983-abc123.e2b.test", domain: "e2b.test", want: Target{"abc123", 49983}, ok: true},
		{host: "49983-ABC123.E2B.test:443", domain: "e2b.test", want: Target{"abc123", 49983}, ok: true},
		{host: "8080-abc.e2b.test.", domain: "e2b.test", want: Target{"abc", 8080}, ok: true},
		{host: "x.8080-abc.e2b.test", domain: "e2b.test", ok: true, bad: true},
		{host: "0-abc.e2b.test", domain: "e2b.test", ok: true, bad: true},
		{host: "65536-abc.e2b.test", domain: "e2b.test", ok: true, bad: true},
		{host: "080-abc.e2b.test", domain: "e2b.test", ok: true, bad: true},
		{host: "api.e2b.test", domain: "e2b.test", ok: true, bad: true},
		{host: "evil.test", domain: "e2b.test", ok: false},
		{host: "h", id: "abc", port: "49983", want: Target{"abc", 49983}, ok: true},
		{host: "h", id: "abc", port: "+1", ok: true, bad: true},
		{host: "h", id: "../x", port: "1", ok: true, bad: true},
		{host: "h", id: "", port: "1", ok: true, bad: true},
		{host: "h", id: "abc", port: "", ok: true, bad: true},
		// The host name wins over the headers: one route per request.
		{host: "1-aaa.e2b.test", domain: "e2b.test", id: "bbb", port: "2", want: Target{"aaa", 1}, ok: true},
	} {
		got, ok, err := ParseTarget(tc.host, tc.domain, tc.id, tc.port)
		if ok != tc.ok || (err != nil) != tc.bad || !tc.bad && got != tc.want {
			t.Errorf("ParseTarget(%q, %q, %q, %q) = %+v, %v, %v; want %+v, %v, bad %v",
				tc.host, tc.domain, tc.id, tc.port, got, ok, err, tc.want, tc.ok, tc.bad)
		}
	}
}

// FuzzParseTarget: whatever the host and headers, an accepted target has
// a valid id and port, and the id never carries a path or host separator.
func FuzzParseTarget(f *testing.F) {
	f.Add("49983-abc.e2b.test", "e2b.test", "", "")
	f.Add("h:1", "", "abc", "49983")
	f.Add("1-a.b.e2b.test", "e2b.test", "x", "0")
	f.Fuzz(func(t *testing.T, host, domain, id, port string) {
		tg, ok, err := ParseTarget(host, strings.ToLower(domain), id, port)
		if err != nil || !ok {
			if tg != (Target{}) {
				t.Fatalf("refused target %+v has a value", tg)
			}
			return
		}
		if !validID(tg.Sandbox) || tg.Port < 1 || tg.Port > 65535 || strings.ContainsAny(tg.Sandbox, "/.:%") {
			t.Fatalf("accepted bad target %+v", tg)
		}
	})
}
