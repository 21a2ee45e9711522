package server

import (
	"slices"
	"strings"
	"testing"

	"github.com/berth-sh/berth/api"
)

// TestWhoAmI: GET /v1/whoami tells each credential its own tenant, scopes
// and role, and nothing else: never the key, never another's; a lease
// token and no credential are refused.
func TestWhoAmI(t *testing.T) {
	e := newTenv(t)
	e.tenant("a")
	for _, c := range []struct {
		role   string
		scopes []string
		want   string
		host   bool
	}{
		{"viewer", nil, "viewer", false},
		{"member", nil, "member", false},
		{"member", []string{"sandboxes:read", "sandboxes:write"}, "member", false},
		{"admin", nil, "admin", false},
		{"admin", []string{"keys", "sandboxes:read"}, "admin", false},
	} {
		k := e.key("local", "a", c.role, c.scopes...)
		var w api.WhoAmI
		code, body := e.do(k.Key, "GET", "/v1/whoami", "")
		e.must(k.Key, "GET", "/v1/whoami", "", 200, &w)
		if w.Tenant != "a" || w.KeyID != k.ID || w.Actor != "key:"+k.ID || w.Role != c.want || w.Host != c.host ||
			!slices.Equal(w.Scopes, k.Scopes) {
			t.Errorf("%s %v: %+v, want tenant a, key %s, role %s, scopes %v", c.role, c.scopes, w, k.ID, c.want, k.Scopes)
		}
		if code != 200 || strings.Contains(body, k.Key) {
			t.Errorf("the answer carries the key: %d %s", code, body)
		}
	}
	// The host's key (the unix socket's trust here) is the host.
	var host api.WhoAmI
	e.must("local", "GET", "/v1/whoami", "", 200, &host)
	if !host.Host || host.Tenant != "" || host.Role != "admin" {
		t.Errorf("the host: %+v", host)
	}
	// A key without sandboxes:read, a lease token, nothing: refused.
	k := e.key("local", "a", "admin", "keys")
	e.must(k.Key, "GET", "/v1/whoami", "", 403, nil)
	m := e.key("local", "a", "member")
	sb := e.sandbox(m.Key, `{"template":"base"}`)
	e.must(sb.LeaseToken, "GET", "/v1/whoami", "", 403, nil)
	e.must("", "GET", "/v1/whoami", "", 401, nil)
	e.must(m.Key, "POST", "/v1/whoami", "", 404, nil) // read-only: no other method
}
