package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/client"
)

// openConns is the daemon's berth_http_connections_open (every listener;
// the unix connection that asks is one of them).
func openConns(t *testing.T, d *daemon) int {
	t.Helper()
	m := regexp.MustCompile(`(?m)^berth_http_connections_open (\d+)`).FindStringSubmatch(daemonMetrics(t, d))
	if m == nil {
		t.Fatal("no berth_http_connections_open in /metrics")
	}
	n, _ := strconv.Atoi(m[1])
	return n
}

// waitLog waits up to 2 s for the daemon's log to contain s (it reaches
// the buffer through a pipe, after the answer may have).
func waitLog(d *daemon, s string) bool {
	for range 100 {
		if strings.Contains(d.logs.String(), s) {
			return true
		}
		time.Sleep(20 * time.Millisecond)
	}
	return false
}

// sendOn writes req on c and reads one response.
func sendOn(c net.Conn, br *bufio.Reader, req string) (*http.Response, []byte, error) {
	if _, err := io.WriteString(c, req); err != nil {
		return nil, nil, err
	}
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		return nil, nil, err
	}
	b, err := io.ReadAll(resp.Body)
	return resp, b, err
}

// closedWithin reports whether the server closes c (EOF or reset, nothing
// more to read) within d.
func closedWithin(c net.Conn, br *bufio.Reader, d time.Duration) bool {
	c.SetReadDeadline(time.Now().Add(d))
	_, err := br.ReadByte()
	var ne net.Error
	return err != nil && !(errors.As(err, &ne) && ne.Timeout())
}

// TestEdgeUnauthenticatedConnectionsClosed: 500 keep-alive connections
// that each got a 401 are closed by the server (Connection: close), and
// connections idle after a successful request are closed within the idle
// timeout. Before, 500 of 500 were still open after 270 s.
func TestEdgeUnauthenticatedConnectionsClosed(t *testing.T) {
	const n = 500
	idle := 2 * time.Second
	d, addr, _ := tcpDaemon(t, "--http-idle-timeout", idle.String(), "--max-conns-per-client", "1000")
	conns := make([]net.Conn, n)
	readers := make([]*bufio.Reader, n)
	for i := range conns {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		conns[i], readers[i] = c, bufio.NewReader(c)
		c.SetDeadline(time.Now().Add(30 * time.Second))
		resp, body, err := sendOn(c, readers[i], "GET /v1/sandboxes HTTP/1.1\r\nHost: berth\r\nAuthorization: Bearer berth_wrong\r\n\r\n")
		if err != nil {
			t.Fatalf("conn %d: %v", i, err)
		}
		var eb api.ErrorBody
		if resp.StatusCode != 401 || json.Unmarshal(body, &eb) != nil || eb.Error.Code != "unauthenticated" ||
			!resp.Close || resp.Header.Get("X-Request-Id") == "" {
			t.Fatalf("conn %d: %d close=%v %v %s", i, resp.StatusCode, resp.Close, resp.Header, body)
		}
	}
	start := time.Now()
	var wg sync.WaitGroup
	var mu sync.Mutex
	open := 0
	for i := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if !closedWithin(conns[i], readers[i], idle) {
				mu.Lock()
				open++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	t.Logf("401 connections: %d of %d still open %s after their answer (idle timeout %s)", open, n, time.Since(start).Round(time.Millisecond), idle)
	if open > 0 {
		t.Fatalf("%d of %d connections that got a 401 are still open", open, n)
	}

	// Connections that got a 200 stay for keep-alive, until idle.
	const k = 100
	var ok []net.Conn
	var okr []*bufio.Reader
	for range k {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		br := bufio.NewReader(c)
		if resp, _, err := sendOn(c, br, "GET /healthz HTTP/1.1\r\nHost: berth\r\n\r\n"); err != nil || resp.StatusCode != 200 || resp.Close {
			t.Fatalf("healthz: %v %v", resp, err)
		}
		ok, okr = append(ok, c), append(okr, br)
	}
	before := openConns(t, d)
	time.Sleep(idle + time.Second)
	after := openConns(t, d)
	t.Logf("idle keep-alive connections: %d open on the daemon after the requests, %d after %s idle", before, after, idle+time.Second)
	if before < k || after > 1 {
		t.Fatalf("open connections before/after the idle timeout: %d/%d, want >= %d / <= 1", before, after, k)
	}
	for i := range ok {
		if !closedWithin(ok[i], okr[i], time.Second) {
			t.Fatalf("idle connection %d not closed", i)
		}
	}
}

// TestEdgeConnectionCap: one client address holds at most
// --max-conns-per-client connections. Connections that never carried a
// credential (slow ones, a slowloris on the client's host) give their
// slot to a new one, oldest first, so they cannot lock out a client with
// a key; once every one has authenticated, the next is closed at accept
// with nothing written, and a slot frees when one closes. The unix socket
// has no cap.
func TestEdgeConnectionCap(t *testing.T) {
	const max = 16
	d, addr, _ := tcpDaemon(t, "--max-conns-per-client", strconv.Itoa(max))
	key, err := os.ReadFile(d.dataDir + "/admin.key")
	if err != nil {
		t.Fatal(err)
	}
	authed := "GET /v1/version HTTP/1.1\r\nHost: berth\r\nAuthorization: Bearer " + strings.TrimSpace(string(key)) + "\r\n\r\n"
	// max slow connections that never finish their request.
	for range max {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		io.WriteString(c, "GET /v1/version HTTP/1.1\r\nHo")
	}
	var held []net.Conn
	for i := range max {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(10 * time.Second))
		if resp, _, err := sendOn(c, bufio.NewReader(c), authed); err != nil || resp.StatusCode != 200 {
			t.Fatalf("conn %d with a key, after %d slow ones: %v %v", i, max, resp, err)
		}
		held = append(held, c)
	}
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: berth\r\n\r\n")
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	b, err := io.ReadAll(c)
	c.Close()
	var ne net.Error
	if len(b) != 0 || errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("connection %d: read %q, %v; want it closed with nothing written", max+1, b, err)
	}
	if m := daemonMetrics(t, d); !regexp.MustCompile(`(?m)^berth_http_connections_refused_total [1-9]`).MatchString(m) {
		t.Errorf("refusal not counted")
	}
	if !waitLog(d, "too many open from one client") {
		t.Errorf("refusal not logged")
	}
	held[0].Close()
	deadline := time.Now().Add(5 * time.Second)
	for {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		c.SetDeadline(time.Now().Add(5 * time.Second))
		resp, _, err := sendOn(c, bufio.NewReader(c), authed)
		c.Close()
		if err == nil && resp.StatusCode == 200 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no slot after a connection closed: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	// The unix socket (root only) is not capped.
	for i := range 2 * max {
		c, err := net.Dial("unix", d.socket)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(10 * time.Second))
		if resp, _, err := sendOn(c, bufio.NewReader(c), "GET /healthz HTTP/1.1\r\nHost: berth\r\n\r\n"); err != nil || resp.StatusCode != 200 {
			t.Fatalf("unix conn %d: %v %v", i, resp, err)
		}
	}
}

// TestEdgeSlowloris: a client sending its headers a byte at a time, slower
// than --http-read-header-timeout allows in all, is cut off; others are
// served meanwhile.
func TestEdgeSlowloris(t *testing.T) {
	_, addr, admin := tcpDaemon(t, "--http-read-header-timeout", "1s")
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	start := time.Now()
	cut := make(chan time.Duration, 1)
	var got []byte
	go func() {
		c.SetReadDeadline(time.Now().Add(20 * time.Second))
		var err error
		got, err = io.ReadAll(c) // until the server closes
		// A close with the trickled bytes still unread arrives as a
		// reset: cut off all the same.
		if err == nil || errors.Is(err, syscall.ECONNRESET) {
			cut <- time.Since(start)
		}
		close(cut)
	}()
	header := "GET /healthz HTTP/1.1\r\nHost: berth\r\nX-Slow: " + strings.Repeat("a", 200) + "\r\n\r\n"
	go func() {
		for i := range len(header) {
			if _, err := c.Write([]byte{header[i]}); err != nil {
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
	}()
	if _, err := admin.Version(context.Background()); err != nil {
		t.Fatalf("another client while the slow one trickles: %v", err)
	}
	took, ok := <-cut
	if !ok {
		t.Fatalf("the slow client was not cut off: read %q", got)
	}
	// net/http answers a request line cut short by the deadline with a
	// 400 (nothing when no byte came): as JSON, like every error.
	if len(got) > 0 && !bytes.Contains(got, []byte(`"code":"invalid_argument"`)) {
		t.Errorf("slow client got %q", got)
	}
	t.Logf("slow header client cut off after %s (header timeout 1s)", took.Round(time.Millisecond))
	if took < 900*time.Millisecond || took > 3*time.Second {
		t.Fatalf("slow client cut off after %s, want about 1s", took)
	}
}

// TestEdgeErrorsOverTCP: errors the HTTP server, the mux and the guard
// give on the daemon's TCP listener are all the JSON error body with a
// request id; a request id made to forge log lines is replaced.
func TestEdgeErrorsOverTCP(t *testing.T) {
	parallel(t)
	d, addr, admin := tcpDaemon(t)
	key, _ := os.ReadFile(d.dataDir + "/admin.key")
	auth := "Authorization: Bearer " + strings.TrimSpace(string(key)) + "\r\n"
	for _, tc := range []struct {
		name, req string
		status    int
		code      string
	}{
		{"431", "GET /v1/version HTTP/1.1\r\nHost: b\r\nX-Big: " + strings.Repeat("a", 70<<10) + "\r\n\r\n", 431, "too_large"},
		{"bad content-length", "POST /v1/sandboxes HTTP/1.1\r\nHost: b\r\n" + auth + "Content-Length: -1\r\n\r\n", 400, "invalid_argument"},
		{"unsupported transfer-encoding", "POST /v1/sandboxes HTTP/1.1\r\nHost: b\r\nTransfer-Encoding: br\r\n\r\n", 501, "not_supported"},
		{"no route", "GET /v2/nothing HTTP/1.1\r\nHost: b\r\n" + auth + "\r\n", 404, "not_found"},
		{"wrong method", "PATCH /v1/sandboxes HTTP/1.1\r\nHost: b\r\n" + auth + "\r\n", 404, "not_found"},
		{"no credential", "GET /v1/sandboxes HTTP/1.1\r\nHost: b\r\n\r\n", 401, "unauthenticated"},
		{"null body", "POST /v1/sandboxes HTTP/1.1\r\nHost: b\r\n" + auth + "Content-Length: 4\r\n\r\nnull", 400, "invalid_argument"},
		{"duplicate key", "POST /v1/volumes HTTP/1.1\r\nHost: b\r\n" + auth + "Content-Length: 23\r\n\r\n{\"name\":\"a\",\"name\":\"b\"}", 400, "invalid_argument"},
		{"NUL in an id", "GET /v1/sandboxes/a%00b HTTP/1.1\r\nHost: b\r\n" + auth + "\r\n", 400, "invalid_argument"},
	} {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		c.SetDeadline(time.Now().Add(10 * time.Second))
		resp, body, err := sendOn(c, bufio.NewReader(c), tc.req)
		c.Close()
		var eb api.ErrorBody
		if err != nil || resp.StatusCode != tc.status || json.Unmarshal(body, &eb) != nil || eb.Error.Code != tc.code ||
			eb.Error.RequestID == "" || resp.Header.Get("X-Request-Id") != eb.Error.RequestID {
			t.Errorf("%s: %v %v %s", tc.name, resp, err, body)
		}
	}
	// A request id that would forge a log line is replaced, not echoed
	// or logged.
	forged := `x" level=ERROR msg="forged entry`
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	br := bufio.NewReader(c)
	resp, _, err := sendOn(c, br, "GET /v1/sandboxes/nope HTTP/1.1\r\nHost: b\r\n"+auth+"X-Request-Id: "+forged+"\r\n\r\n")
	if err != nil || resp.Header.Get("X-Request-Id") == forged || len(resp.Header.Get("X-Request-Id")) != 32 {
		t.Errorf("forged id: %v %v", resp, err)
	}
	resp, _, err = sendOn(c, br, "GET /v1/sandboxes/nope HTTP/1.1\r\nHost: b\r\n"+auth+"X-Request-Id: "+strings.Repeat("b", 129)+"\r\n\r\n")
	if err != nil || len(resp.Header.Get("X-Request-Id")) != 32 {
		t.Errorf("long id: %v %v", resp, err)
	}
	resp, _, err = sendOn(c, br, "GET /v1/sandboxes/nope HTTP/1.1\r\nHost: b\r\n"+auth+"X-Request-Id: mine-1\r\n\r\n")
	if err != nil || resp.Header.Get("X-Request-Id") != "mine-1" {
		t.Errorf("own id: %v %v", resp, err)
	}

	// A 5xx: the port proxy to a port nothing listens on. The SDK
	// carries the request id; the log has it with the cause.
	sb, err := admin.CreateSandbox(context.Background(), api.CreateSandboxRequest{})
	if err != nil {
		t.Fatal(err)
	}
	hc := &http.Client{Timeout: 30 * time.Second}
	req, _ := http.NewRequest("GET", "http://"+addr+"/v1/sandboxes/"+sb.ID+"/ports/9/", nil)
	req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(key)))
	req.Header.Set("X-Request-Id", "e2e-5xx-1")
	r5, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b5, _ := io.ReadAll(r5.Body)
	r5.Body.Close()
	if r5.StatusCode < 500 || !strings.Contains(string(b5), `"request_id": "e2e-5xx-1"`) {
		t.Fatalf("proxy to a closed port: %d %s", r5.StatusCode, b5)
	}
	if !waitLog(d, "request_id=e2e-5xx-1 method=GET route=/v1/sandboxes/{id}/ports/{port}/{path...} status=502") {
		t.Errorf("5xx not logged with its request id and route:\n%s", tail(d.logs.String(), 3000))
	}
	if strings.Contains(d.logs.String(), "forged entry") {
		t.Errorf("the forged request id reached the log")
	}
	_, err = admin.GetSandbox(context.Background(), "no-such-sandbox")
	var ce *client.Error
	if !errors.As(err, &ce) || ce.RequestID == "" || ce.Status != 404 {
		t.Errorf("SDK error %#v lacks the request id", err)
	}
}

// TestEdgeInputRefused: values the kernel would refuse or ignore, and
// control bytes that would break every exec, are refused at create with a
// 400 saying why, before anything is made.
func TestEdgeInputRefused(t *testing.T) {
	parallel(t)
	d := startDaemon(t)
	ctx := context.Background()
	pidMax, _ := os.ReadFile("/proc/sys/kernel/pid_max")
	pm, _ := strconv.ParseInt(strings.TrimSpace(string(pidMax)), 10, 64)
	for _, tc := range []struct {
		req api.CreateSandboxRequest
		msg string
	}{
		{api.CreateSandboxRequest{Resources: api.Resources{CPUs: 1e-5}}, "cpus must be at least 0.01"},
		{api.CreateSandboxRequest{Resources: api.Resources{CPUs: 0.0099}}, "cpus must be at least 0.01"},
		{api.CreateSandboxRequest{Resources: api.Resources{CPUs: 1e-9}}, "cpus must be at least 0.01"},
		{api.CreateSandboxRequest{Resources: api.Resources{MemoryBytes: 1 << 20}}, "16 MiB"},
		{api.CreateSandboxRequest{Resources: api.Resources{Pids: 4}}, "pids"},
		{api.CreateSandboxRequest{Resources: api.Resources{Pids: pm + 1}}, "pids"},
		{api.CreateSandboxRequest{Env: map[string]string{"A": "x\x00y"}}, "NUL"},
		{api.CreateSandboxRequest{Workdir: "/tmp/\x00"}, "workdir"},
		{api.CreateSandboxRequest{Labels: map[string]string{"a": "\x1b]0;owned\x07"}}, "control"},
	} {
		_, err := d.c.CreateSandbox(ctx, tc.req)
		var ce *client.Error
		if !errors.As(err, &ce) || ce.Status != 400 || ce.Code != "invalid_argument" || !strings.Contains(ce.Message, tc.msg) {
			t.Errorf("%+v: %v, want 400 %q", tc.req, err, tc.msg)
		}
	}
	if all, err := d.c.ListSandboxes(ctx, true); err != nil || len(all) != 0 {
		t.Fatalf("refused creates left sandboxes: %v %v", all, err)
	}
	sb, err := d.c.CreateSandbox(ctx, api.CreateSandboxRequest{Resources: api.Resources{CPUs: 0.01}})
	if err != nil {
		t.Fatalf("cpus 0.01: %v", err)
	}
	if got, err := d.c.GetSandbox(ctx, sb.ID); err != nil || got.Resources.CPUs != 0.01 {
		t.Errorf("cpus 0.01: %v %v", got, err)
	}
	for _, req := range []api.ExecRequest{
		{Cmd: []string{"true"}, Workdir: "/tmp\x00"},
		{Cmd: []string{"true"}, Env: map[string]string{"A": "\x00"}},
		{Cmd: []string{"true"}, User: "root\n"},
	} {
		_, err := d.c.Exec(ctx, sb.ID, req, io.Discard, io.Discard)
		if !client.IsInvalid(err) {
			t.Errorf("exec %+v: %v, want 400", req, err)
		}
	}
	if _, err := d.c.Stat(ctx, sb.ID, "/etc/\x00passwd"); !client.IsInvalid(err) {
		t.Errorf("stat with a NUL: %v", err)
	}
	// Exec still works after all that.
	if ex, err := d.c.Exec(ctx, sb.ID, api.ExecRequest{Cmd: []string{"true"}, Workdir: "/tmp"}, io.Discard, io.Discard); err != nil || ex.Code != 0 {
		t.Fatalf("exec: %v %v", ex, err)
	}
}

// slowReader yields n bytes in chunks, pausing between them, so the whole
// upload takes about d.
type slowReader struct {
	left  int
	chunk int // pause after each chunk
	pause time.Duration
	since int
}

func (r *slowReader) Read(p []byte) (int, error) {
	if r.left == 0 {
		return 0, io.EOF
	}
	if r.since >= r.chunk {
		time.Sleep(r.pause)
		r.since = 0
	}
	n := min(len(p), r.chunk-r.since, r.left)
	r.since += n
	for i := range p[:n] {
		p[i] = 'x'
	}
	r.left -= n
	return n, nil
}

// pausingWriter consumes slowly.
type pausingWriter struct {
	n     int
	pause time.Duration
}

func (w *pausingWriter) Write(p []byte) (int, error) {
	time.Sleep(w.pause)
	w.n += len(p)
	return len(p), nil
}

// TestEdgeStreamsOutliveDeadlines: with every HTTP deadline at 1-2 s, an
// exec stream, the WebSocket PTY and a large file upload and download
// lasting several seconds still work, over TCP; non-streaming routes keep
// working too.
func TestEdgeStreamsOutliveDeadlines(t *testing.T) {
	_, _, admin := tcpDaemon(t, "--http-write-timeout", "2s", "--http-body-timeout", "1s",
		"--http-idle-timeout", "2s", "--http-read-header-timeout", "1s")
	ctx := context.Background()
	sb, err := admin.CreateSandbox(ctx, api.CreateSandboxRequest{})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	var out bytes.Buffer
	ex, err := admin.Exec(ctx, sb.ID, api.ExecRequest{Cmd: []string{"sh", "-c", "for i in 1 2 3 4; do echo $i; sleep 1; done"}}, &out, io.Discard)
	if err != nil || ex.Code != 0 || out.String() != "1\n2\n3\n4\n" {
		t.Fatalf("exec stream: %v %v %q", ex, err, out.String())
	}
	t.Logf("exec stream: %s", time.Since(start).Round(time.Millisecond))

	start = time.Now()
	out.Reset()
	ex, err = admin.ExecInteractive(ctx, sb.ID, api.ExecRequest{Cmd: []string{"sh", "-c", "sleep 3; echo done"}, TTY: true, Rows: 24, Cols: 80},
		strings.NewReader(""), &out, io.Discard, nil)
	if err != nil || ex.Code != 0 || !strings.Contains(out.String(), "done") {
		t.Fatalf("websocket PTY: %v %v %q", ex, err, out.String())
	}
	t.Logf("websocket PTY: %s", time.Since(start).Round(time.Millisecond))

	const size = 32 << 20
	start = time.Now()
	fi, err := admin.WriteFile(ctx, sb.ID, "/tmp/big", 0o644, &slowReader{left: size, chunk: 1 << 20, pause: 120 * time.Millisecond})
	if err != nil || fi.Size != size {
		t.Fatalf("slow upload: %v %v", fi, err)
	}
	t.Logf("upload of %d MiB: %s", size>>20, time.Since(start).Round(time.Millisecond))
	start = time.Now()
	sw := &pausingWriter{pause: 2 * time.Millisecond}
	if _, n, err := admin.ReadFile(ctx, sb.ID, "/tmp/big", sw); err != nil || n != size || sw.n != size {
		t.Fatalf("slow download: %d/%d %v", sw.n, n, err)
	}
	t.Logf("download of %d MiB: %s", size>>20, time.Since(start).Round(time.Millisecond))
	if _, err := admin.GetSandbox(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
}
