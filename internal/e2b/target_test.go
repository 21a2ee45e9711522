package e2b

import (
	"io"
	"net/url"
	"path"
	"slices"
	"strings"
	"testing"

	"github.com/berth-sh/berth/internal/access"
	"github.com/berth-sh/berth/internal/engine"
	"github.com/berth-sh/berth/internal/sandbox"
	"github.com/berth-sh/berth/internal/server/input"
	"github.com/berth-sh/berth/internal/store"
)

type createRequestT = engine.CreateRequest

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
		// api.{domain} is the control API (the SDK's URL under E2B_DOMAIN),
		// unless headers name a target.
		{host: "api.e2b.test", domain: "e2b.test", ok: false},
		{host: "API.e2b.test:443", domain: "e2b.test", id: "abc", port: "49983", want: Target{"abc", 49983}, ok: true},
		{host: "xapi.e2b.test", domain: "e2b.test", ok: true, bad: true},
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

func TestCreateRequest(t *testing.T) {
	sec := func(v int64) *int64 { return &v }
	yes, no := true, false
	for _, tc := range []struct {
		name string
		in   newSandbox
		bad  bool
		chk  func(t *testing.T, got *createRequestT)
	}{
		{name: "base is the default", in: newSandbox{TemplateID: "base"}, chk: func(t *testing.T, r *createRequestT) {
			if r.Template != "" || r.Timeout != DefaultTimeout {
				t.Errorf("%+v", r)
			}
		}},
		{name: "timeout and metadata", in: newSandbox{TemplateID: "py", Timeout: sec(60), Metadata: map[string]string{"a": "b"}},
			chk: func(t *testing.T, r *createRequestT) {
				if r.Template != "py" || r.Timeout.Seconds() != 60 || r.Labels["a"] != "b" {
					t.Errorf("%+v", r)
				}
			}},
		{name: "autoPause is the idle policy", in: newSandbox{Timeout: sec(30), AutoPause: &yes},
			chk: func(t *testing.T, r *createRequestT) {
				if r.Timeout != 0 || r.Policy.IdleTimeout.Seconds() != 30 || r.Policy.OnIdle != "pause" {
					t.Errorf("%+v", r)
				}
			}},
		{name: "allowOut is egress", in: newSandbox{Network: &networkConfig{AllowOut: []string{"pypi.org"}, DenyOut: []string{"0.0.0.0/0"}}},
			chk: func(t *testing.T, r *createRequestT) {
				if r.Network != "egress" || len(r.Allow) != 1 {
					t.Errorf("%+v", r)
				}
			}},
		{name: "no internet", in: newSandbox{AllowInternetAccess: &no}, chk: func(t *testing.T, r *createRequestT) {
			if r.Network != "none" {
				t.Errorf("%+v", r)
			}
		}},
		{name: "zero timeout", in: newSandbox{Timeout: sec(0)}, bad: true},
		{name: "huge timeout", in: newSandbox{Timeout: sec(1 << 40)}, bad: true},
		{name: "saturated timeout", in: newSandbox{Timeout: sec(1 << 62)}, bad: true},
		{name: "huge idle timeout", in: newSandbox{Timeout: sec(1 << 40), AutoPause: &yes}, bad: true},
		// REST's rules: a template or env REST refuses is refused here.
		{name: "template with ESC", in: newSandbox{TemplateID: "a\x1bb"}, bad: true},
		{name: "env name with ESC", in: newSandbox{EnvVars: map[string]string{"A\x1bB": "1"}}, bad: true},
		{name: "metadata with ESC", in: newSandbox{Metadata: map[string]string{"a": "x\x1by"}}, bad: true},
		{name: "denyOut of one host", in: newSandbox{Network: &networkConfig{DenyOut: []string{"1.1.1.1"}}},
			chk: func(t *testing.T, r *createRequestT) {
				// Everything but 1.1.1.1: its 32 neighbour prefixes and IPv6.
				if r.Network != "egress" || len(r.Allow) != 33 || !slices.Contains(r.Allow, "1.1.1.0/32") || slices.Contains(r.Allow, "0.0.0.0/0") {
					t.Errorf("%+v", r)
				}
			}},
		{name: "maskRequestHost", in: newSandbox{Network: &networkConfig{MaskRequestHost: str("h.example:${PORT}")}},
			chk: func(t *testing.T, r *createRequestT) {
				if r.MaskRequestHost != "h.example:${PORT}" {
					t.Errorf("%+v", r)
				}
			}},
		{name: "maskRequestHost with a newline", in: newSandbox{Network: &networkConfig{MaskRequestHost: str("h\r\nX-Evil: 1")}}, bad: true},
		{name: "maskRequestHost empty", in: newSandbox{Network: &networkConfig{MaskRequestHost: str("")}}, bad: true},
		{name: "maskRequestHost with a path", in: newSandbox{Network: &networkConfig{MaskRequestHost: str("h/x")}}, bad: true},
		{name: "denyOut of a name", in: newSandbox{Network: &networkConfig{DenyOut: []string{"example.com"}}}, bad: true},
		{name: "no internet but allowOut", in: newSandbox{AllowInternetAccess: &no, Network: &networkConfig{AllowOut: []string{"10.0.0.1"}}},
			chk: func(t *testing.T, r *createRequestT) {
				if r.Network != "egress" || !slices.Equal(r.Allow, []string{"10.0.0.1"}) {
					t.Errorf("%+v", r)
				}
			}},
		{name: "insecure", in: newSandbox{Secure: &no}, bad: true},
		// The SDK starts the gateway itself: a create like any other.
		{name: "mcp", in: newSandbox{MCP: []byte(`{"x":1}`)}, chk: func(t *testing.T, r *createRequestT) {
			if r.Template != "" || r.Network != "" {
				t.Errorf("%+v", r)
			}
		}},
		{name: "autoResume alone", in: newSandbox{AutoResume: &struct{ Enabled bool }{true}}, bad: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// The door translates; the gate validates with REST's rules.
			c, err := createRequest(&tc.in)
			if err == nil {
				err = access.Check(input.Request(&c.rest))
			}
			if (err != nil) != tc.bad {
				t.Fatalf("err = %v, want bad %v", err, tc.bad)
			}
			if err == nil && tc.chk != nil {
				tc.chk(t, c.engine())
			}
		})
	}
}

// FuzzListFilter: the SDK's list query never panics, and what it accepts
// selects only E2B's states (running and paused, a stopped sandbox only
// when its root persisted), never a warm-pool member, its labels what the
// query named.
func FuzzListFilter(f *testing.F) {
	f.Add("state=running,paused&metadata=a%3Db%26c%3Dd")
	f.Add("metadata=%25zz")
	f.Add("startedAfter=2026-01-02T03:04:05.678Z&template=base&order=asc&state=paused")
	f.Add("order=sideways")
	f.Fuzz(func(t *testing.T, q string) {
		v, err := url.ParseQuery(q)
		if err != nil {
			return
		}
		lf, none, err := listQuery(v)
		if err != nil {
			return
		}
		if !lf.NoPool || lf.IncludeDeleted || lf.Owner != (store.Owner{}) {
			t.Fatalf("filter %+v", lf)
		}
		for _, s := range lf.States {
			if s != sandbox.StateRunning && s != sandbox.StateCreating && s != sandbox.StateStarting && s != sandbox.StatePaused {
				t.Fatalf("accepted state %q", s)
			}
		}
		for _, s := range lf.KeptRootStates {
			if s != sandbox.StateStopped && s != sandbox.StateStopping {
				t.Fatalf("accepted kept-root state %q", s)
			}
		}
		if !none && sandbox.CheckLabels(lf.Labels) != nil {
			t.Fatalf("labels %q go to the store unchecked", lf.Labels)
		}
	})
}

// FuzzUserOf: the Basic header's user is a plain passwd name or refused.
func FuzzUserOf(f *testing.F) {
	f.Add("Basic dXNlcjo=")
	f.Add("Basic cm9vdDp4")
	f.Add("Bearer x")
	f.Fuzz(func(t *testing.T, h string) {
		u, err := userOf(map[string][]string{"Authorization": {h}})
		if err != nil {
			return
		}
		if strings.ContainsAny(u, ":/\x00 \n") || len(u) > 32 {
			t.Fatalf("accepted user %q", u)
		}
	})
}

// FuzzAbsPath: an accepted path is absolute and clean.
func FuzzAbsPath(f *testing.F) {
	f.Add("a/../../b", "user")
	f.Add("~/x", "")
	f.Fuzz(func(t *testing.T, p, user string) {
		if _, err := checkUser(user); err != nil {
			return
		}
		got, err := absPath(p, user)
		if err != nil {
			return
		}
		if !strings.HasPrefix(got, "/") || path.Clean(got) != got || strings.Contains(got, "\x00") {
			t.Fatalf("absPath(%q, %q) = %q", p, user, got)
		}
	})
}

// FuzzAcceptsGzip: Accept-Encoding is read without panicking, gzip named
// alone is accepted, and gzip;q=0 never is.
func FuzzAcceptsGzip(f *testing.F) {
	for _, s := range []string{"gzip", "br, gzip;q=0.5", "gzip;q=0", "deflate", "", "GZIP ; q=1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, h string) {
		got := acceptsGzip(h)
		if strings.TrimSpace(h) == "gzip" && !got {
			t.Fatalf("acceptsGzip(%q) = false", h)
		}
		if strings.ReplaceAll(h, " ", "") == "gzip;q=0" && got {
			t.Fatalf("acceptsGzip(%q) = true", h)
		}
	})
}

// TestBoundedReader: an inflating upload stops with 413 past its bound.
func TestBoundedReader(t *testing.T) {
	b := &boundedReader{r: strings.NewReader(strings.Repeat("x", 100)), left: 10}
	_, err := io.ReadAll(b)
	if st := statusOf(err); st != 413 {
		t.Fatalf("reading 100 bytes through a 10-byte bound: %v (status %d)", err, st)
	}
	b = &boundedReader{r: strings.NewReader("0123456789"), left: 10}
	if got, err := io.ReadAll(b); err != nil || string(got) != "0123456789" {
		t.Fatalf("exactly the bound: %q %v", got, err)
	}
}

// TestAbsPathIsRESTsRule: the door's file paths meet the REST file
// routes' rule (sandbox.CheckFilePath): given, within PATH_MAX, no
// control characters.
func TestAbsPathIsRESTsRule(t *testing.T) {
	long := "/" + strings.Repeat("a", sandbox.MaxFilePathBytes)
	for _, p := range []string{"", "/tmp/a\x1bb", "x\x00", long} {
		if got, err := absPath(p, "user"); err == nil {
			t.Errorf("absPath(%.20q) = %.20q, want refused", p, got)
		} else if rest := sandbox.CheckFilePath("path", p); rest == nil {
			t.Errorf("REST accepts %.20q, which the door refuses: %v", p, err)
		}
	}
	if got, err := absPath("~/x", "user"); err != nil || got != "/home/user/x" {
		t.Errorf("absPath(~/x) = %q, %v", got, err)
	}
}

func str(s string) *string { return &s }
