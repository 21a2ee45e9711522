package server

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/internal/access"
	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/internal/server/input"
	"github.com/berth-sh/berth/internal/server/rest"
)

// syncBuf is a log sink tests read while the server writes.
type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuf) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// edgeServer serves a small trusted route table over a real loopback
// listener wrapped like the daemon's, and returns its address and log.
func edgeServer(t *testing.T, maxPerClient int, hs *http.Server) (string, *syncBuf) {
	t.Helper()
	logs := &syncBuf{}
	s := &Server{log: slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})), metrics: newMetrics(),
		WriteTimeout: time.Minute, BodyTimeout: time.Minute}
	hf := func(f http.HandlerFunc) http.Handler { return f }
	s.mount([]Route{
		{Pattern: "GET /ok", Op: access.Health, h: hf(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok\n") })},
		{Pattern: "GET /fail", Op: access.Health, h: hf(func(w http.ResponseWriter, r *http.Request) {
			rest.Error(w, errors.New("disk /var/lib/berth/secret-path exploded"))
		})},
		{Pattern: "GET /panic", Op: access.Health, h: hf(func(w http.ResponseWriter, r *http.Request) { panic("boom") })},
		{Pattern: "GET /unavailable", Op: access.Health, h: hf(func(w http.ResponseWriter, r *http.Request) {
			rest.Error(w, errdefs.Unavailable("the store is down"))
		})},
		{Pattern: "POST /echo", Op: access.Health, h: hf(func(w http.ResponseWriter, r *http.Request) {
			var req api.CreateVolumeRequest
			if err := input.Decode(r, &req); err != nil {
				rest.Error(w, err)
				return
			}
			rest.JSON(w, 200, req)
		})},
		{Pattern: HostPortPattern, Op: access.Ports, PublicPort: true, h: hf(func(w http.ResponseWriter, r *http.Request) {})},
		{Pattern: "/", Op: access.Health, h: hf(func(w http.ResponseWriter, r *http.Request) {
			rest.Error(w, errdefs.NotFound("no route %s %s", r.Method, r.URL.Path))
		})},
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if hs == nil {
		hs = &http.Server{}
	}
	hs.ConnContext = ConnContext // as the daemon's
	hs.Handler = s.Handler(true)
	hs.MaxHeaderBytes = DefaultMaxHeaderBytes
	hs.ErrorLog = slog.NewLogLogger(s.log.Handler(), slog.LevelWarn)
	go hs.Serve(s.Listener(ln, maxPerClient))
	t.Cleanup(func() { hs.Close() })
	return ln.Addr().String(), logs
}

// raw sends raw bytes on a new connection and reads one response.
func raw(t *testing.T, addr, req string) (*http.Response, api.ErrorBody, string) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c, req); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("%q: %v", req[:min(len(req), 60)], err)
	}
	body, _ := io.ReadAll(resp.Body)
	var eb api.ErrorBody
	_ = json.Unmarshal(body, &eb)
	return resp, eb, string(body)
}

func TestRequestIDs(t *testing.T) {
	addr, _ := edgeServer(t, 0, nil)
	for _, tc := range []struct {
		in   string
		keep bool
	}{
		{"", false}, {"abc-123", true}, {"Root=1-5759e988-bd862e3fe1be46a994272793;Parent", false},
		{"trace/01:span.2+x=y@z_", true}, {strings.Repeat("a", 128), true}, {strings.Repeat("a", 129), false},
		{"a b", false}, {"x\" level=ERROR msg=forged", false}, {"tab\there", false}, {"é", false},
	} {
		req := "GET /ok HTTP/1.1\r\nHost: x\r\n"
		if tc.in != "" {
			req += "X-Request-Id: " + tc.in + "\r\n"
		}
		resp, _, _ := raw(t, addr, req+"\r\n")
		got := resp.Header.Get(RequestIDHeader)
		if tc.keep && got != tc.in {
			t.Errorf("id %q: answered %q, want it kept", tc.in, got)
		}
		if !tc.keep && (got == tc.in || !ValidRequestID(got) || len(got) != 32) {
			t.Errorf("id %q: answered %q, want a fresh one", tc.in, got)
		}
	}
	// Raw control bytes in the header never get this far: net/http
	// refuses the request, and the edge still answers JSON.
	resp, eb, _ := raw(t, addr, "GET /ok HTTP/1.1\r\nHost: x\r\nX-Request-Id: a\x01b\r\n\r\n")
	if resp.StatusCode != 400 || eb.Error.Code != "invalid_argument" || eb.Error.RequestID == "a\x01b" {
		t.Errorf("control byte in header: %d %+v", resp.StatusCode, eb)
	}
}

func TestInternalErrorsLoggedNotShown(t *testing.T) {
	addr, logs := edgeServer(t, 0, nil)
	resp, eb, body := raw(t, addr, "GET /fail HTTP/1.1\r\nHost: x\r\nX-Request-Id: req-500\r\n\r\n")
	if resp.StatusCode != 500 || eb.Error.Code != "internal" || eb.Error.RequestID != "req-500" ||
		eb.Error.Message != "internal error (request id req-500)" || strings.Contains(body, "secret-path") {
		t.Fatalf("500 answered %d %s", resp.StatusCode, body)
	}
	log := logs.String()
	for _, want := range []string{"request_id=req-500", "method=GET", `route="GET /fail"`, "status=500", "secret-path exploded"} {
		if !strings.Contains(log, want) {
			t.Errorf("log lacks %q:\n%s", want, log)
		}
	}
	// A panic: logged with its stack and the request id, answered 500
	// naming the id, the panic's text kept from the client.
	resp, eb, _ = raw(t, addr, "GET /panic HTTP/1.1\r\nHost: x\r\nX-Request-Id: req-panic\r\n\r\n")
	if resp.StatusCode != 500 || !strings.Contains(logs.String(), "handler panic: boom") || strings.Contains(eb.Error.Message, "boom") ||
		eb.Error.RequestID != "req-panic" || eb.Error.Message != "internal error (request id req-panic)" {
		t.Errorf("panic: %d %+v\n%s", resp.StatusCode, eb, logs)
	}
	if log := logs.String(); !strings.Contains(log, `msg="handler panic" request_id=req-panic`) || !strings.Contains(log, "runtime/debug.Stack") ||
		!strings.Contains(log, "edge_test.go") {
		t.Errorf("the panic's log line lacks its request id or stack:\n%s", log)
	}
	resp, eb, _ = raw(t, addr, "GET /unavailable HTTP/1.1\r\nHost: x\r\n\r\n")
	if resp.StatusCode != 503 || eb.Error.Message != "the store is down" || !strings.Contains(logs.String(), "status=503") {
		t.Errorf("503: %d %+v", resp.StatusCode, eb)
	}
}

// TestServerOwnErrorsAreJSON: what net/http answers by itself, before any
// handler, and what the mux would answer, all carry the JSON error body.
func TestServerOwnErrorsAreJSON(t *testing.T) {
	addr, logs := edgeServer(t, 0, nil)
	big := strings.Repeat("a", DefaultMaxHeaderBytes+8192)
	for _, tc := range []struct {
		name, req string
		status    int
		code, msg string
	}{
		{"431", "GET /ok HTTP/1.1\r\nHost: x\r\nX-Big: " + big + "\r\n\r\n", 431, "too_large", "request header fields too large"},
		{"bad content-length", "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 12a\r\n\r\n", 400, "invalid_argument", "malformed HTTP request"},
		{"two content-lengths", "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\n{}", 400, "invalid_argument", "malformed HTTP request"},
		{"malformed host", "GET /ok HTTP/1.1\r\nHost: a b\r\n\r\n", 400, "invalid_argument", "malformed HTTP request: malformed Host header"},
		{"no host", "GET /ok HTTP/1.1\r\n\r\n", 400, "invalid_argument", "missing required Host header"},
		{"bad header name", "GET /ok HTTP/1.1\r\nHost: x\r\nBad Name: v\r\n\r\n", 400, "invalid_argument", "malformed HTTP request"},
		{"garbage request line", "HELLO\r\n\r\n", 400, "invalid_argument", "malformed HTTP request"},
		{"transfer-encoding", "POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip\r\n\r\n", 501, "not_supported", "unsupported Transfer-Encoding"},
		{"protocol", "GET /ok HTTP/2.0\r\nHost: x\r\n\r\n", 505, "not_supported", "unsupported HTTP protocol version"},
		{"star", "GET * HTTP/1.1\r\nHost: x\r\n\r\n", 400, "invalid_argument", "request target *"},
		{"unknown route", "GET /nope HTTP/1.1\r\nHost: x\r\n\r\n", 404, "not_found", "no route GET /nope"},
		{"unknown method", "BREW /ok HTTP/1.1\r\nHost: x\r\n\r\n", 404, "not_found", "no route BREW /ok"},
	} {
		resp, eb, body := raw(t, addr, tc.req)
		if resp.StatusCode != tc.status || eb.Error.Code != tc.code || !strings.Contains(eb.Error.Message, tc.msg) ||
			!ValidRequestID(eb.Error.RequestID) || resp.Header.Get(RequestIDHeader) != eb.Error.RequestID ||
			!strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
			t.Errorf("%s: %d %v %s", tc.name, resp.StatusCode, resp.Header, body)
		}
	}
	if !strings.Contains(logs.String(), "status=501") {
		t.Errorf("net/http's own 5xx not logged:\n%s", logs)
	}
	// A handler's own answer that looks like net/http's is left alone.
	resp, _, body := raw(t, addr, "GET /ok HTTP/1.1\r\nHost: x\r\n\r\n")
	if resp.StatusCode != 200 || body != "ok\n" {
		t.Errorf("ok: %d %q", resp.StatusCode, body)
	}
}

func TestRewriteOnlyNetHTTPErrors(t *testing.T) {
	s := &Server{log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	for _, p := range []string{
		"HTTP/1.1 200 OK\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n\r\n200 OK",
		"HTTP/1.1 400 Bad Request\r\nConnection: close\r\nContent-Type: text/plain; charset=utf-8\r\nDate: x\r\n\r\n400 Bad Request",
		"HTTP/1.1 400 Bad Request" + netHTTPErrorHeaders + "400 Bad Request and more",
		"HTTP/1.1 400 Bad Request" + netHTTPErrorHeaders + "something else",
		"HTTP/1.0 400 Bad Request" + netHTTPErrorHeaders + "400 Bad Request",
		"HTTP/1.1 4xx Bad Request" + netHTTPErrorHeaders + "4xx Bad Request",
		"\x81\x05hello",
	} {
		if _, ok := s.rewriteHTTPError([]byte(p)); ok {
			t.Errorf("rewrote %q", p)
		}
	}
	if _, ok := s.rewriteHTTPError([]byte("HTTP/1.1 400 Bad Request" + netHTTPErrorHeaders + "400 Bad Request")); !ok {
		t.Error("did not rewrite net/http's 400")
	}
}

func TestConnectionCapPerClient(t *testing.T) {
	addr, logs := edgeServer(t, 3, nil)
	var held []net.Conn
	for range 3 {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		held = append(held, c)
		io.WriteString(c, "GET /ok HTTP/1.1\r\nHost: x\r\n\r\n")
		if resp, err := http.ReadResponse(bufio.NewReader(c), nil); err != nil || resp.StatusCode != 200 {
			t.Fatalf("conn %d: %v", len(held), err)
		}
	}
	// The fourth is closed at accept with nothing written.
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	io.WriteString(c, "GET /ok HTTP/1.1\r\nHost: x\r\n\r\n")
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if n, err := c.Read(make([]byte, 64)); n != 0 || err == nil || errors.Is(err, errTimeout) {
		t.Fatalf("over the cap: read %d, %v; want closed", n, err)
	}
	c.Close()
	if !strings.Contains(logs.String(), "too many open from one client") {
		t.Errorf("refusal not logged:\n%s", logs)
	}
	// Closing one makes room.
	held[0].Close()
	deadline := time.Now().Add(5 * time.Second)
	for {
		resp, _, _ := tryRaw(addr, "GET /ok HTTP/1.1\r\nHost: x\r\n\r\n")
		if resp != nil && resp.StatusCode == 200 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no room after a connection closed")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestSlowClientsDoNotLockOutOthers: connections from one address that
// never complete a request (a slowloris on the client's host) hold the
// per-client cap only until a connection that authenticates needs a slot:
// the oldest of them gives its slot up. Before, 256 of them locked real
// clients out until the header timeout cut them.
func TestSlowClientsDoNotLockOutOthers(t *testing.T) {
	addr, logs := edgeServer(t, 3, &http.Server{ReadHeaderTimeout: time.Minute})
	var slow []net.Conn
	for range 3 {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		io.WriteString(c, "GET /ok HTTP/1.1\r\nHo") // and never the rest
		slow = append(slow, c)
	}
	time.Sleep(100 * time.Millisecond) // all three accepted
	for i := range 3 {
		resp, body, err := tryRaw(addr, "GET /ok HTTP/1.1\r\nHost: x\r\n\r\n")
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("client %d locked out by slow connections: %v %v %s", i, resp, err, body)
		}
	}
	// The slow connections were the ones closed, oldest first.
	slow[0].SetReadDeadline(time.Now().Add(5 * time.Second))
	if n, err := slow[0].Read(make([]byte, 64)); n != 0 || err == nil {
		t.Fatalf("the oldest slow connection still open: read %d, %v", n, err)
	}
	if !strings.Contains(logs.String(), "connections evicted") {
		t.Errorf("eviction not logged:\n%s", logs)
	}
}

var errTimeout = errors.New("timeout")

func tryRaw(addr, req string) (*http.Response, string, error) {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return nil, "", err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	io.WriteString(c, req)
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return nil, "", err
	}
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b), nil
}

// TestBodyDeadline: a non-streaming route's body must arrive within
// BodyTimeout; a handler still working after the body is not cut off.
func TestBodyDeadline(t *testing.T) {
	logs := &syncBuf{}
	s := &Server{log: slog.New(slog.NewTextHandler(logs, nil)), metrics: newMetrics(), BodyTimeout: 300 * time.Millisecond, WriteTimeout: 5 * time.Second}
	hf := func(f http.HandlerFunc) http.Handler { return f }
	s.mount([]Route{
		{Pattern: "POST /slow", Op: access.Health, h: hf(func(w http.ResponseWriter, r *http.Request) {
			var req api.PoolRequest
			if err := input.Decode(r, &req); err != nil {
				rest.Error(w, err)
				return
			}
			select { // longer than the body deadline
			case <-time.After(time.Second):
				rest.JSON(w, 200, req)
			case <-r.Context().Done():
				t.Error("the request was cancelled after its body was read")
			}
		})},
		{Pattern: HostPortPattern, Op: access.Ports, PublicPort: true, h: hf(func(w http.ResponseWriter, r *http.Request) {})},
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := &http.Server{Handler: s.Handler(true)}
	go hs.Serve(s.Listener(ln, 0))
	defer hs.Close()
	resp, body, err := tryRaw(ln.Addr().String(), "POST /slow HTTP/1.1\r\nHost: x\r\nContent-Length: 9\r\n\r\n{\"min\":1}")
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("fast body, slow handler: %v %v %s", resp, err, body)
	}
	// A body that trickles in past the deadline is cut off.
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	io.WriteString(c, "POST /slow HTTP/1.1\r\nHost: x\r\nContent-Length: 9\r\n\r\n{")
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	start := time.Now()
	r, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil || r.StatusCode != 400 || time.Since(start) > 2*time.Second {
		t.Fatalf("slow body: %v %v after %s", r, err, time.Since(start))
	}
}

// TestWriteDeadline: a non-streaming route must answer within
// WriteTimeout; a streaming one is not bounded by it.
func TestWriteDeadline(t *testing.T) {
	s := &Server{log: slog.New(slog.NewTextHandler(io.Discard, nil)), metrics: newMetrics(), WriteTimeout: 200 * time.Millisecond}
	slow := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(600 * time.Millisecond)
		io.WriteString(w, "late\n")
	})
	s.mount([]Route{
		{Pattern: "GET /short", Op: access.Health, h: slow},
		{Pattern: "GET /stream", Op: access.Health, Stream: true, h: slow},
		{Pattern: HostPortPattern, Op: access.Ports, PublicPort: true, h: slow},
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := &http.Server{Handler: s.Handler(true)}
	go hs.Serve(s.Listener(ln, 0))
	defer hs.Close()
	if resp, _, err := tryRaw(ln.Addr().String(), "GET /short HTTP/1.1\r\nHost: x\r\n\r\n"); err == nil {
		t.Errorf("non-streaming route answered past its write deadline: %d", resp.StatusCode)
	}
	// The same connection's next request is not hit by the first one's
	// deadline: a keep-alive connection carries one per request.
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	br := bufio.NewReader(c)
	for _, path := range []string{"/stream", "/stream"} {
		io.WriteString(c, "GET "+path+" HTTP/1.1\r\nHost: x\r\n\r\n")
		resp, err := http.ReadResponse(br, nil)
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("streaming route: %v %v", resp, err)
		}
		io.Copy(io.Discard, resp.Body)
	}
}

// TestUploadIdleDeadline: an upload route's body may take longer than
// BodyTimeout in all, but not pause longer than it: a stalled upload is
// cut with a 400 saying so (one was held open past 150 s).
func TestUploadIdleDeadline(t *testing.T) {
	s := &Server{log: slog.New(slog.DiscardHandler), metrics: newMetrics(), BodyTimeout: 300 * time.Millisecond, WriteTimeout: 5 * time.Second}
	hf := func(f http.HandlerFunc) http.Handler { return f }
	s.mount([]Route{
		{Pattern: "PUT /up", Op: access.Health, Stream: true, Upload: true, h: hf(func(w http.ResponseWriter, r *http.Request) {
			n, err := io.Copy(io.Discard, r.Body)
			if err != nil {
				rest.Error(w, err)
				return
			}
			rest.JSON(w, 200, map[string]int64{"bytes": n})
		})},
		{Pattern: HostPortPattern, Op: access.Ports, PublicPort: true, h: hf(func(w http.ResponseWriter, r *http.Request) {})},
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := &http.Server{Handler: s.Handler(true)}
	go hs.Serve(s.Listener(ln, 0))
	defer hs.Close()
	send := func(chunks int, pause time.Duration, complete bool) (*http.Response, string) {
		t.Helper()
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		io.WriteString(c, fmt.Sprintf("PUT /up HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n", chunks+1))
		for range chunks {
			io.WriteString(c, "x")
			time.Sleep(pause)
		}
		if complete {
			io.WriteString(c, "x")
		}
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		return resp, string(b)
	}
	// Ten pauses of 100 ms: a second in all, more than BodyTimeout, but
	// never 300 ms without data.
	if resp, body := send(10, 100*time.Millisecond, true); resp.StatusCode != 200 || !strings.Contains(body, `"bytes": 11`) {
		t.Fatalf("steady upload: %d %s", resp.StatusCode, body)
	}
	// One byte, then nothing.
	resp, body := send(1, 0, false)
	if resp.StatusCode != 400 || !strings.Contains(body, "the upload stalled") || !strings.Contains(body, `"invalid_argument"`) {
		t.Fatalf("stalled upload: %d %s", resp.StatusCode, body)
	}
}
