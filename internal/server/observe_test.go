package server

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/internal/webhook"
)

// TestWebhooksRoute: GET /v1/webhooks shows the host's administrator the
// real deliverer's endpoint with its credentials redacted, never the
// secret, and its deliveries as they happen; every tenant's key (admin
// included), a lease token and no credential are refused.
func TestWebhooksRoute(t *testing.T) {
	e := newTenv(t)
	var none []api.Webhook
	e.must("local", "GET", "/v1/webhooks", "", 200, &none)
	if len(none) != 0 {
		t.Fatalf("no webhook configured, yet %+v", none)
	}

	recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	t.Cleanup(recv.Close)
	raw := strings.Replace(recv.URL, "http://", "http://hook-user:hook-pass@", 1) + "/hook/in?token=tok-123&x=1"
	d := webhook.New(webhook.Config{URL: raw, Secret: "s3cret-value", Poll: 20 * time.Millisecond, Encode: EventJSON}, e.st)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { d.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	e.srv.Webhooks = []WebhookSource{d}

	e.tenant("a")
	m := e.key("local", "a", "member")
	sb := e.sandbox(m.Key, `{"template":"base"}`)
	var got []api.Webhook
	var body string
	for i := 0; ; i++ {
		var code int
		code, body = e.do("local", "GET", "/v1/webhooks", "")
		e.must("local", "GET", "/v1/webhooks", "", 200, &got)
		if code == 200 && len(got) == 1 && got[0].Delivered > 0 {
			break
		}
		if i == 500 {
			t.Fatalf("no delivery shown after creating %s: %s", sb.ID, body)
		}
		time.Sleep(20 * time.Millisecond)
	}
	w := got[0]
	want := "http://redacted@" + strings.TrimPrefix(recv.URL, "http://") + "/hook/in?token=redacted&x=redacted"
	if w.URL != want || !w.Signed || w.LastEventID == 0 || w.Recent[0].Status != 200 || w.Recent[0].Error != "" {
		t.Errorf("webhook: %+v, want url %s, signed, a cursor and a 200", w, want)
	}
	for _, secret := range []string{"hook-user", "hook-pass", "tok-123", "s3cret-value"} {
		if strings.Contains(body, secret) {
			t.Errorf("the answer shows %q: %s", secret, body)
		}
	}

	for _, role := range []string{"viewer", "member", "admin"} {
		k := e.key("local", "a", role)
		e.must(k.Key, "GET", "/v1/webhooks", "", 403, nil)
	}
	e.must(sb.LeaseToken, "GET", "/v1/webhooks", "", 403, nil)
	e.must("", "GET", "/v1/webhooks", "", 401, nil)
	e.must("local", "DELETE", "/v1/webhooks", "", 404, nil) // read-only
}

// TestRedactWebhookURL: what may be a credential in a URL never shows.
func TestRedactWebhookURL(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"https://hooks.example/in", "https://hooks.example/in"},
		{"https://u:p@hooks.example/in", "https://redacted@hooks.example/in"},
		{"https://tok@hooks.example/in", "https://redacted@hooks.example/in"},
		{"https://hooks.example/in?sig=abc&sig=def#frag", "https://hooks.example/in?sig=redacted"},
		{"not a url", "(not a URL)"},
		{"", "(not a URL)"},
	} {
		if got := webhook.Redact(c.in); got != c.want {
			t.Errorf("Redact(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

// TestSandboxUsage: GET /v1/sandboxes/{id}/usage is the engine's
// ResourceUse for the caller's own running sandbox; another tenant's is
// not found, a stopped one its state and zeros, a lease is refused.
func TestSandboxUsage(t *testing.T) {
	e := newTenv(t)
	e.tenant("a")
	e.tenant("b")
	m := e.key("local", "a", "member")
	v := e.key("local", "a", "viewer")
	other := e.key("local", "b", "admin")
	sb := e.sandbox(m.Key, `{"template":"base","persistent":true,"resources":{"cpus":2,"memory_bytes":268435456}}`)
	var u api.SandboxUsage
	e.must(v.Key, "GET", "/v1/sandboxes/"+sb.ID+"/usage", "", 200, &u)
	if u.State != "running" || u.CPUs != 2 || u.MemoryLimitBytes != 268435456 || u.Time.IsZero() || u.CPUPercent < 0 || u.CPUPercent > 100 {
		t.Errorf("usage: %+v", u)
	}
	e.must(other.Key, "GET", "/v1/sandboxes/"+sb.ID+"/usage", "", 404, nil)
	e.must(sb.LeaseToken, "GET", "/v1/sandboxes/"+sb.ID+"/usage", "", 403, nil)
	e.must(m.Key, "POST", "/v1/sandboxes/"+sb.ID+"/stop", "", 200, nil)
	var stopped api.SandboxUsage
	e.must(v.Key, "GET", "/v1/sandboxes/"+sb.ID+"/usage", "", 200, &stopped)
	if stopped.State != "stopped" || stopped.CPUs != 0 || stopped.MemoryBytes != 0 {
		t.Errorf("a stopped sandbox's usage: %+v", stopped)
	}
}
