package server

// The web console's doors: its pages' headers, the sign-in code and its
// exchange, and the bearer credential a browser's WebSocket carries in its
// subprotocol — each with the misuse it must refuse.

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/internal/console"
	"github.com/berth-sh/berth/internal/server/input"
)

func get(t *testing.T, url string, hdr map[string]string) (*http.Response, string) {
	t.Helper()
	req, _ := http.NewRequest("GET", url, nil)
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := noRedirect.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

func TestConsolePagesHeaders(t *testing.T) {
	e := newTenv(t)
	nonceRE := regexp.MustCompile(`nonce="([^"]+)"`)
	var nonces []string
	for range 2 {
		resp, body := get(t, e.tcp.URL+"/console/", nil)
		if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/html") {
			t.Fatalf("GET /console/: %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
		}
		csp := resp.Header.Get("Content-Security-Policy")
		for _, want := range []string{"default-src 'none'", "script-src 'self';", "frame-ancestors 'none'", "base-uri 'none'", "form-action 'none'", "connect-src 'self'"} {
			if !strings.Contains(csp, want) {
				t.Errorf("CSP %q lacks %q", csp, want)
			}
		}
		if strings.Contains(csp, "unsafe-inline") || strings.Contains(csp, "unsafe-eval") {
			t.Errorf("CSP %q allows inline or eval", csp)
		}
		for h, want := range map[string]string{"X-Content-Type-Options": "nosniff", "X-Frame-Options": "DENY",
			"Referrer-Policy": "no-referrer", "Cross-Origin-Opener-Policy": "same-origin", "Cache-Control": "no-store"} {
			if got := resp.Header.Get(h); got != want {
				t.Errorf("%s: %q, want %q", h, got, want)
			}
		}
		m := nonceRE.FindStringSubmatch(body)
		if m == nil || !strings.Contains(csp, "'nonce-"+m[1]+"'") {
			t.Fatalf("the page's nonce is not the CSP's: %q vs %q", m, csp)
		}
		if strings.Contains(body, "<script>") || strings.Contains(body, " on") && regexp.MustCompile(`\son[a-z]+=`).MatchString(body) {
			t.Error("the page has inline script")
		}
		nonces = append(nonces, m[1])
	}
	if nonces[0] == nonces[1] {
		t.Error("two answers carried the same nonce")
	}
	resp, _ := get(t, e.tcp.URL+"/console/app.js", nil)
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/javascript; charset=utf-8" ||
		resp.Header.Get("X-Content-Type-Options") != "nosniff" {
		t.Errorf("app.js: %d %q %q", resp.StatusCode, resp.Header.Get("Content-Type"), resp.Header.Get("X-Content-Type-Options"))
	}
	if r2, _ := get(t, e.tcp.URL+"/console/app.js", map[string]string{"If-None-Match": resp.Header.Get("ETag")}); r2.StatusCode != 304 {
		t.Errorf("app.js revalidation: %d, want 304", r2.StatusCode)
	}
	// Paths that name no asset: 404 as text (never the page, never a file
	// outside the embedded assets).
	for _, p := range []string{"/console/nosuch.js", "/console/..%2f..%2fgo.mod", "/console/%2e%2e/console.go", "/console/vendor/", "/console/codes.go"} {
		resp, body := get(t, e.tcp.URL+p, nil)
		if resp.StatusCode != 404 || strings.Contains(body, "<html") || strings.Contains(body, "package ") {
			t.Errorf("GET %s: %d %q", p, resp.StatusCode, body[:min(len(body), 80)])
		}
	}
	for _, p := range []string{"/", "/console"} {
		if resp, _ := get(t, e.tcp.URL+p, nil); resp.StatusCode != 302 || resp.Header.Get("Location") != "/console/" {
			t.Errorf("GET %s: %d to %q", p, resp.StatusCode, resp.Header.Get("Location"))
		}
	}
	// The catch-all still wants a credential.
	if resp, _ := get(t, e.tcp.URL+"/favicon.ico", nil); resp.StatusCode != 401 {
		t.Errorf("GET /favicon.ico without a key: %d", resp.StatusCode)
	}
}

func postJSON(t *testing.T, url, body string, hdr map[string]string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest("POST", url, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := noRedirect.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func TestConsoleSignInCode(t *testing.T) {
	e := newTenv(t)
	e.tenant("a")
	ka := e.key("local", "a", "admin")
	// Only the host mints codes: a tenant's admin and no credential may not.
	e.must(ka.Key, "POST", "/v1/console/codes", "{}", 403, nil)
	e.must("", "POST", "/v1/console/codes", "{}", 401, nil)
	e.srv.ConsoleURLs = []string{"http://127.0.0.1:7070"}
	var code api.ConsoleCode
	e.must("local", "POST", "/v1/console/codes", "{}", 201, &code)
	if !strings.HasPrefix(code.Code, console.CodePrefix) || len(code.URLs) != 1 ||
		code.URLs[0] != "http://127.0.0.1:7070/console/#code="+code.Code {
		t.Fatalf("code %+v", code)
	}
	exchange := e.tcp.URL + "/v1/console/session"
	body := `{"code":"` + code.Code + `"}`
	for _, c := range []struct {
		name string
		body string
		hdr  map[string]string
		want int
	}{
		{"a form post (text/plain)", body, map[string]string{"Content-Type": "text/plain"}, 400},
		{"a form post (urlencoded)", body, map[string]string{"Content-Type": "application/x-www-form-urlencoded"}, 400},
		{"another origin", body, map[string]string{"Origin": "http://evil.example"}, 403},
		{"another port of the host", body, map[string]string{"Origin": "http://" + strings.Split(e.tcp.Listener.Addr().String(), ":")[0] + ":1"}, 403},
		{"a cross-site fetch", body, map[string]string{"Sec-Fetch-Site": "cross-site"}, 403},
		{"a same-site fetch", body, map[string]string{"Sec-Fetch-Site": "same-site"}, 403},
		{"a forged code", `{"code":"` + console.CodePrefix + strings.Repeat("a", 52) + `"}`, nil, 401},
		{"an API key as the code", `{"code":"` + ka.Key + `"}`, nil, 401},
		{"no code", `{}`, nil, 401},
		{"an unknown field", `{"code":"x","tenant":"a"}`, nil, 400},
		{"an oversized body", `{"code":"` + strings.Repeat("a", input.MaxBody) + `"}`, nil, 413},
	} {
		if got, b := postJSON(t, exchange, c.body, c.hdr); got != c.want {
			t.Errorf("%s: %d %s, want %d", c.name, got, b, c.want)
		}
	}
	// The refusals above spent nothing: the real code still works, once.
	got, b := postJSON(t, exchange, body, map[string]string{"Origin": e.tcp.URL, "Sec-Fetch-Site": "same-origin"})
	if got != 201 {
		t.Fatalf("exchange: %d %s", got, b)
	}
	var sess api.ConsoleSession
	if err := json.Unmarshal([]byte(b), &sess); err != nil {
		t.Fatal(err)
	}
	if d := sess.ExpiresAt.Sub(e.clock.Now()); d < ConsoleSessionTTL-time.Minute || d > ConsoleSessionTTL+time.Minute {
		t.Errorf("the console key lives %v", d)
	}
	e.must(sess.APIKey, "GET", "/v1/tenants", "", 200, nil) // the host's scope
	// Not over TCP: a console key minting the next code would renew
	// itself for ever, out of reach of its own revocation.
	e.must(sess.APIKey, "POST", "/v1/console/codes", "{}", 403, nil)
	if got, b := postJSON(t, exchange, body, nil); got != 401 {
		t.Fatalf("a replayed code: %d %s", got, b)
	}
	// An expired code is refused, and spent.
	e.must("local", "POST", "/v1/console/codes", "{}", 201, &code)
	e.clock.Advance(console.CodeTTL + time.Second)
	if got, _ := postJSON(t, exchange, `{"code":"`+code.Code+`"}`, nil); got != 401 {
		t.Fatalf("an expired code: %d", got)
	}
	// The key dies with its lifetime, and with the console's sign-out
	// (its own revocation).
	e.must(sess.APIKey, "GET", "/v1/sandboxes", "", 200, nil)
	e.clock.Advance(ConsoleSessionTTL)
	e.must(sess.APIKey, "GET", "/v1/sandboxes", "", 401, nil)
	e.must("local", "POST", "/v1/console/codes", "{}", 201, &code)
	_, b = postJSON(t, exchange, `{"code":"`+code.Code+`"}`, nil)
	json.Unmarshal([]byte(b), &sess)
	e.must(sess.APIKey, "DELETE", "/v1/keys/"+sess.KeyID, "", 0, nil)
	e.must(sess.APIKey, "GET", "/v1/sandboxes", "", 401, nil)
}

func dialWS(t *testing.T, url string, opts *websocket.DialOptions) (*websocket.Conn, int, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, resp, err := websocket.Dial(ctx, url, opts)
	status := 0
	if resp != nil {
		status = resp.StatusCode
	}
	return c, status, err
}

func TestConsoleWebSocketBearer(t *testing.T) {
	e := newTenv(t)
	e.tenant("a")
	e.tenant("b")
	ka := e.key("local", "a", "member")
	kb := e.key("local", "b", "member")
	sb := e.sandbox(ka.Key, `{"template":"base"}`)
	ws := "ws" + strings.TrimPrefix(e.tcp.URL, "http") + "/v1/sandboxes/" + sb.ID + "/exec/ws"
	offer := func(tok string) *websocket.DialOptions {
		return &websocket.DialOptions{Subprotocols: []string{WSProtocol, BearerProtocol + tok}}
	}
	c, status, err := dialWS(t, ws, offer(ka.Key))
	if err != nil {
		t.Fatalf("dial with the bearer subprotocol: %d %v", status, err)
	}
	if c.Subprotocol() != WSProtocol {
		t.Errorf("selected subprotocol %q, want %q (never the token)", c.Subprotocol(), WSProtocol)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.Write(ctx, websocket.MessageText, []byte(`{"cmd":["echo","hi"]}`)); err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	for {
		_, msg, err := c.Read(ctx)
		if err != nil {
			t.Fatalf("read: %v (so far %q)", err, out.String())
		}
		if len(msg) > 0 && msg[0] == api.WSStdout {
			out.Write(msg[1:])
		}
		if len(msg) > 0 && (msg[0] == api.WSExit || msg[0] == api.WSError) {
			break
		}
	}
	c.CloseNow()
	if out.String() != "hi\n" {
		t.Fatalf("stdout %q", out.String())
	}
	for _, bad := range []struct {
		name string
		opts *websocket.DialOptions
		want int
	}{
		{"no credential", &websocket.DialOptions{Subprotocols: []string{WSProtocol}}, 401},
		{"a forged key", offer("berth_" + strings.Repeat("a", 52)), 401},
		{"another tenant's key", offer(kb.Key), 404},
		{"the key from another origin", &websocket.DialOptions{Subprotocols: []string{WSProtocol, BearerProtocol + ka.Key},
			HTTPHeader: http.Header{"Origin": {"http://evil.example"}}}, 403},
	} {
		c, status, err := dialWS(t, ws, bad.opts)
		if err == nil {
			c.CloseNow()
		}
		if err == nil || status != bad.want {
			t.Errorf("%s: status %d err %v, want %d", bad.name, status, err, bad.want)
		}
	}
	// The subprotocol is read on the PTY routes only: elsewhere (the
	// files watch WebSocket) it is no credential.
	watch := "ws" + strings.TrimPrefix(e.tcp.URL, "http") + "/v1/sandboxes/" + sb.ID + "/files/watch?path=/tmp"
	if c, status, err := dialWS(t, watch, offer(ka.Key)); err == nil || status != 401 {
		if err == nil {
			c.CloseNow()
		}
		t.Errorf("files watch with the bearer subprotocol: %d %v, want 401", status, err)
	}
}

func TestProxyStripsConsoleThreats(t *testing.T) {
	h := http.Header{}
	h.Add("Sec-WebSocket-Protocol", "chat, "+BearerProtocol+"berth_secret")
	h.Add("Sec-WebSocket-Protocol", BearerProtocol+"x")
	stripBearerProtocol(h)
	if got := h.Values("Sec-WebSocket-Protocol"); len(got) != 1 || got[0] != "chat" {
		t.Errorf("after stripping: %q", got)
	}
	h = http.Header{"Sec-Websocket-Protocol": {BearerProtocol + "berth_secret"}}
	stripBearerProtocol(h)
	if len(h.Values("Sec-WebSocket-Protocol")) != 0 {
		t.Errorf("a lone bearer offer survived: %q", h)
	}

	// Through the real proxy: a sandbox's answer that would widen a
	// service worker's scope over /console/ and /v1, or wipe the origin's
	// storage, loses those headers; the bearer offer never reaches it.
	e := newTenv(t)
	sb := e.sandbox("local", `{"template":"base"}`)
	e.node.Listen(sb.ID, 8000, func(c net.Conn) {
		defer c.Close()
		req, err := http.ReadRequest(bufio.NewReader(c))
		if err != nil {
			return
		}
		body := "protocols " + strings.Join(req.Header.Values("Sec-WebSocket-Protocol"), "|")
		resp := &http.Response{StatusCode: 200, ProtoMajor: 1, ProtoMinor: 1, Close: true, ContentLength: int64(len(body)),
			Header: http.Header{"Service-Worker-Allowed": {"/"}, "Clear-Site-Data": {`"storage"`}, "X-Sandbox": {"yes"}},
			Body:   io.NopCloser(strings.NewReader(body))}
		resp.Write(c)
	})
	resp, body := get(t, e.local.URL+"/v1/sandboxes/"+sb.ID+"/ports/8000/sw.js",
		map[string]string{"Sec-WebSocket-Protocol": "chat, " + BearerProtocol + "berth_secret"})
	if resp.StatusCode != 200 || resp.Header.Get("X-Sandbox") != "yes" {
		t.Fatalf("proxy: %d %v %s", resp.StatusCode, resp.Header, body)
	}
	if resp.Header.Get("Service-Worker-Allowed") != "" || resp.Header.Get("Clear-Site-Data") != "" {
		t.Errorf("the proxy passed a sandbox's %v", resp.Header)
	}
	if body != "protocols chat" {
		t.Errorf("the sandbox saw %q", body)
	}
}
