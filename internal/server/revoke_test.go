package server

// Revocation is live: every kind of long-lived connection ends within 5 s
// of its credential's revocation (live.go).

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	mcpsdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/internal/server/admin"
)

// revokeWithin is the bound the issue sets: a connection must end within
// it of its credential's revocation.
const revokeWithin = 5 * time.Second

// wsOpen dials a WebSocket route with cred as the bearer.
func (e *tenv) wsOpen(cred, path string, opts *websocket.DialOptions) *websocket.Conn {
	e.t.Helper()
	if opts == nil {
		opts = &websocket.DialOptions{HTTPHeader: http.Header{"Authorization": {"Bearer " + cred}}}
	}
	c, status, err := dialWS(e.t, "ws"+strings.TrimPrefix(e.tcp.URL, "http")+path, opts)
	if err != nil {
		e.t.Fatalf("dial %s: %d %v", path, status, err)
	}
	e.t.Cleanup(func() { c.CloseNow() })
	return c
}

// wsEnds reports whether c is closed by the server within d (every
// message up to then is read and dropped).
func wsEnds(c *websocket.Conn, d time.Duration) bool {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	for {
		if _, _, err := c.Read(ctx); err != nil {
			return ctx.Err() == nil
		}
	}
}

// bodyEnds reports whether r ends (EOF or error) within d.
func bodyEnds(r io.Reader, d time.Duration) bool {
	done := make(chan struct{})
	go func() {
		io.Copy(io.Discard, r)
		close(done)
	}()
	select {
	case <-done:
		return true
	case <-time.After(d):
		return false
	}
}

// TestRevocationEndsStreams: an exec WebSocket (PTY), a process attach
// WebSocket, a streamed exec, an event stream and an MCP session opened
// with a key all end when the key is revoked; a console's terminal ends
// when it signs out (revokes its own key); a port-token connection
// through the proxy ends when the port token is revoked. Before the fix
// only the event stream ended.
func TestRevocationEndsStreams(t *testing.T) {
	e := newTenv(t)
	e.tenant("a")
	owner := e.key("local", "a", "admin")
	sb := e.sandbox(owner.Key, `{"template":"base"}`)

	t.Run("exec websocket", func(t *testing.T) {
		k := e.key("local", "a", "member")
		c := e.wsOpen(k.Key, "/v1/sandboxes/"+sb.ID+"/exec/ws", nil)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := c.Write(ctx, websocket.MessageText, []byte(`{"cmd":["cat"],"tty":true}`)); err != nil {
			t.Fatal(err)
		}
		if err := c.Write(ctx, websocket.MessageBinary, append([]byte{api.WSStdin}, "ping\n"...)); err != nil {
			t.Fatal(err)
		}
		// The PTY echoes: the command is running.
		for {
			_, msg, err := c.Read(ctx)
			if err != nil {
				t.Fatalf("before revocation: %v", err)
			}
			if len(msg) > 0 && msg[0] == api.WSStdout && strings.Contains(string(msg[1:]), "ping") {
				break
			}
		}
		e.must("local", "DELETE", "/v1/keys/"+k.ID, "", 200, nil)
		if !wsEnds(c, revokeWithin) {
			t.Fatal("the exec WebSocket outlived its key's revocation")
		}
	})

	t.Run("process websocket", func(t *testing.T) {
		k := e.key("local", "a", "member")
		var p api.Process
		e.must(k.Key, "POST", "/v1/sandboxes/"+sb.ID+"/processes", `{"cmd":["sleep","30"]}`, 0, &p)
		c := e.wsOpen(k.Key, "/v1/sandboxes/"+sb.ID+"/processes/"+p.ID+"/ws", nil)
		e.must("local", "DELETE", "/v1/keys/"+k.ID, "", 200, nil)
		if !wsEnds(c, revokeWithin) {
			t.Fatal("the process WebSocket outlived its key's revocation")
		}
		e.must(owner.Key, "POST", "/v1/sandboxes/"+sb.ID+"/processes/"+p.ID+"/kill", `{}`, 0, nil)
	})

	t.Run("streamed exec", func(t *testing.T) {
		k := e.key("local", "a", "member")
		req, _ := http.NewRequest("POST", e.tcp.URL+"/v1/sandboxes/"+sb.ID+"/exec",
			strings.NewReader(`{"cmd":["sh","-c","echo started; exec sleep 30"]}`))
		req.Header.Set("Authorization", "Bearer "+k.Key)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/x-ndjson")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if resp.StatusCode != 200 {
			b, _ := io.ReadAll(resp.Body)
			t.Fatalf("exec: %d %s", resp.StatusCode, b)
		}
		e.must("local", "DELETE", "/v1/keys/"+k.ID, "", 200, nil)
		if !bodyEnds(resp.Body, revokeWithin) {
			t.Fatal("the streamed exec outlived its key's revocation")
		}
	})

	t.Run("lease expiry", func(t *testing.T) {
		// No revocation here kicks the watcher: its tick sees the expiry.
		var l api.Lease
		e.must(owner.Key, "POST", "/v1/sandboxes/"+sb.ID+"/leases", `{"scopes":["exec"],"ttl_seconds":60}`, 201, &l)
		c := e.wsOpen(l.Token, "/v1/sandboxes/"+sb.ID+"/exec/ws", nil)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := c.Write(ctx, websocket.MessageText, []byte(`{"cmd":["cat"],"tty":true}`)); err != nil {
			t.Fatal(err)
		}
		e.clock.Advance(61 * time.Second)
		if !wsEnds(c, revokeWithin) {
			t.Fatal("the lease's terminal outlived the lease's expiry")
		}
	})

	t.Run("event stream", func(t *testing.T) {
		k := e.key("local", "a", "member")
		st := e.openStream(k.Key, "/v1/events", "")
		e.must("local", "DELETE", "/v1/keys/"+k.ID, "", 200, nil)
		if !st.ended(revokeWithin) {
			t.Fatal("the event stream outlived its key's revocation")
		}
	})

	t.Run("console sign-out", func(t *testing.T) {
		var code api.ConsoleCode
		e.must("local", "POST", "/v1/console/codes", "{}", 201, &code)
		_, b := postJSON(t, e.tcp.URL+"/v1/console/session", `{"code":"`+code.Code+`"}`, nil)
		var sess api.ConsoleSession
		if err := json.Unmarshal([]byte(b), &sess); err != nil {
			t.Fatal(b)
		}
		c := e.wsOpen("", "/v1/sandboxes/"+sb.ID+"/exec/ws",
			&websocket.DialOptions{Subprotocols: []string{WSProtocol, BearerProtocol + sess.APIKey}})
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := c.Write(ctx, websocket.MessageText, []byte(`{"cmd":["cat"],"tty":true}`)); err != nil {
			t.Fatal(err)
		}
		// What the console's sign-out does: revoke its own key.
		e.must(sess.APIKey, "DELETE", "/v1/keys/"+sess.KeyID, "", 200, nil)
		if !wsEnds(c, revokeWithin) {
			t.Fatal("the console's terminal outlived its sign-out")
		}
	})

	t.Run("mcp session", func(t *testing.T) {
		k := e.key("local", "a", "member")
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		hc := &http.Client{Transport: bearer{k.Key, http.DefaultTransport}}
		cs, err := mcpsdk.NewClient(&mcpsdk.Implementation{Name: "test", Version: "1"}, nil).Connect(ctx,
			&mcpsdk.StreamableClientTransport{Endpoint: e.tcp.URL + "/v1/mcp", HTTPClient: hc, MaxRetries: -1}, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer cs.Close()
		if _, err := cs.ListTools(ctx, nil); err != nil {
			t.Fatal(err)
		}
		for deadline := time.Now().Add(10 * time.Second); e.srv.mcp.handler.Sessions() != 1; {
			if time.Now().After(deadline) {
				t.Fatalf("%d MCP sessions, want 1", e.srv.mcp.handler.Sessions())
			}
			time.Sleep(10 * time.Millisecond)
		}
		e.must("local", "DELETE", "/v1/keys/"+k.ID, "", 200, nil)
		deadline := time.Now().Add(revokeWithin)
		for e.srv.mcp.handler.Sessions() != 0 {
			if time.Now().After(deadline) {
				t.Fatal("the MCP session outlived its key's revocation")
			}
			time.Sleep(20 * time.Millisecond)
		}
	})

	t.Run("port token", func(t *testing.T) {
		// A port that answers and then holds the connection open.
		e.node.Listen(sb.ID, 7000, func(c net.Conn) {
			defer c.Close()
			if _, err := http.ReadRequest(bufio.NewReader(c)); err != nil {
				return
			}
			io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n")
			io.Copy(io.Discard, c) // until the proxy lets go
		})
		var pt api.PortToken
		e.must(owner.Key, "POST", "/v1/sandboxes/"+sb.ID+"/ports/7000/token", `{"ttl_seconds":600}`, 201, &pt)
		if pt.ID == "" {
			t.Fatalf("port token without an id: %+v", pt)
		}
		req, _ := http.NewRequest("GET", e.tcp.URL+admin.PortPath(sb.ID, 7000), nil)
		req.Header.Set(PortTokenHeader, pt.Token)
		resp, err := noRedirect.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("through the port token: %d", resp.StatusCode)
		}
		buf := make([]byte, 5)
		if _, err := io.ReadFull(resp.Body, buf); err != nil || string(buf) != "hello" {
			t.Fatalf("first bytes: %q %v", buf, err)
		}
		e.must(owner.Key, "DELETE", "/v1/sandboxes/"+sb.ID+"/port-tokens/"+pt.ID, "", 200, nil)
		if !bodyEnds(resp.Body, revokeWithin) {
			t.Fatal("the port-token connection outlived the token's revocation")
		}
	})
}

// bearer adds a bearer credential to every request.
type bearer struct {
	key  string
	base http.RoundTripper
}

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.key)
	return b.base.RoundTrip(r)
}

// TestProcessWebSocketMissingProcess: attaching to a process the sandbox
// does not have is refused at the upgrade (404 not_found), not after it
// with an error frame.
func TestProcessWebSocketMissingProcess(t *testing.T) {
	e := newTenv(t)
	e.tenant("a")
	k := e.key("local", "a", "member")
	sb := e.sandbox(k.Key, `{"template":"base"}`)
	opts := &websocket.DialOptions{HTTPHeader: http.Header{"Authorization": {"Bearer " + k.Key}}}
	for _, path := range []string{"/v1/sandboxes/" + sb.ID + "/processes/no-such-process/ws", "/v1/sandboxes/no-such-sandbox/processes/p/ws"} {
		c, status, err := dialWS(t, "ws"+strings.TrimPrefix(e.tcp.URL, "http")+path, opts)
		if err == nil {
			c.CloseNow()
			t.Fatalf("%s: upgraded; want a 404 before the upgrade", path)
		}
		if status != http.StatusNotFound {
			t.Fatalf("%s: status %d (%v), want 404", path, status, err)
		}
	}
}
