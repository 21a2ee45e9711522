package server

import (
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/berth-sh/berth/internal/auth"
)

// FuzzStripPortToken: whatever Cookie header and query a browser sends,
// nothing the proxy forwards carries the port token's cookie or
// parameter, and the other cookies are kept.
func FuzzStripPortToken(f *testing.F) {
	f.Add("a=1; berth_port_token=x; b=2", "berth_port_token=y&q=1")
	f.Add("berth_port_token=x", "")
	f.Add(";;;  berth_port_token =x;berth_port_token", "%zz")
	f.Add("", "berth_port_token&berth_port_token=2")
	f.Fuzz(func(t *testing.T, cookie, query string) {
		h := http.Header{}
		h.Set("Cookie", cookie)
		u := &url.URL{Path: "/", RawQuery: query}
		stripPortToken(h, u)
		r := &http.Request{Header: h}
		for _, c := range r.Cookies() {
			if c.Name == auth.PortTokenParam {
				t.Fatalf("cookie %q kept %v", cookie, c)
			}
		}
		for _, line := range h.Values("Cookie") {
			for part := range strings.SplitSeq(line, ";") {
				if name, _, _ := strings.Cut(part, "="); strings.TrimSpace(name) == auth.PortTokenParam {
					t.Fatalf("cookie %q kept %q", cookie, line)
				}
			}
		}
		if q, err := url.ParseQuery(u.RawQuery); err == nil && q.Has(auth.PortTokenParam) {
			t.Fatalf("query %q kept the token: %q", query, u.RawQuery)
		}
	})
}
