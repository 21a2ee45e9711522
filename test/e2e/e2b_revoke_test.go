package e2e

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// e2bStream opens a Connect server stream of envd (method, a JSON
// request) on sandbox id with token, reads its first message (the stream
// is open and serving) and returns the rest of its body.
func e2bStream(t *testing.T, url, id, token, method, msg string) io.ReadCloser {
	t.Helper()
	req, err := http.NewRequest("POST", url+method, strings.NewReader(connectEnvelope(msg)))
	if err != nil {
		t.Fatal(err)
	}
	req.Header = http.Header{"Content-Type": {"application/connect+json"}, "Connect-Protocol-Version": {"1"},
		"E2b-Sandbox-Id": {id}, "E2b-Sandbox-Port": {"49983"}, "X-Access-Token": {token}}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	br := bufio.NewReader(resp.Body)
	var hdr [5]byte
	if _, err := io.ReadFull(br, hdr[:]); err != nil {
		t.Fatalf("%s: status %d, no first message: %v", method, resp.StatusCode, err)
	}
	first := make([]byte, binary.BigEndian.Uint32(hdr[1:]))
	if _, err := io.ReadFull(br, first); err != nil || hdr[0] != 0 {
		t.Fatalf("%s: first message %q (flags %d): %v", method, first, hdr[0], err)
	}
	return struct {
		io.Reader
		io.Closer
	}{br, resp.Body}
}

// streamEnds reports whether r ends within d, and what it said last (a
// Connect stream's end message names its error).
func streamEnds(r io.Reader, d time.Duration) (bool, string) {
	type res struct{ tail string }
	done := make(chan res, 1)
	go func() {
		b, _ := io.ReadAll(r)
		done <- res{string(b[max(0, len(b)-300):])}
	}()
	select {
	case r := <-done:
		return true, r.tail
	case <-time.After(d):
		return false, ""
	}
}

// TestE2BStreamsEndWithToken (#30): a stream opened on the E2B door's
// envd with an access token — a process's output (plain and on a PTY), a
// connection to a running process, a directory watch — ends within 5 s of
// the token's end (here: the revocation of the key that minted it), as a
// REST stream does. Before, only new calls were refused: an open process
// stream kept a revoked key's terminal alive.
func TestE2BStreamsEndWithToken(t *testing.T) {
	parallel(t)
	d, url, admin := e2bDaemon(t)
	do := e2bCaller(t, url)
	if out, errOut, code := d.cli("tenant", "create", "acme"); code != 0 {
		t.Fatalf("tenant create: %s %s", out, errOut)
	}
	member := roleKey(t, d, "acme", "member")
	st, body := do("POST", "/v2/sandboxes", `{"templateID":"base","timeout":300}`, map[string]string{"X-API-Key": member})
	var sb struct{ SandboxID, EnvdAccessToken string }
	if st != 201 || json.Unmarshal([]byte(body), &sb) != nil || sb.EnvdAccessToken == "" {
		t.Fatalf("create: %d %s", st, body)
	}
	defer do("DELETE", "/sandboxes/"+sb.SandboxID, "", map[string]string{"X-API-Key": admin})

	streams := map[string]io.ReadCloser{
		"process": e2bStream(t, url, sb.SandboxID, sb.EnvdAccessToken, "/process.Process/Start",
			`{"process":{"cmd":"/bin/sleep","args":["600"]}}`),
		"pty": e2bStream(t, url, sb.SandboxID, sb.EnvdAccessToken, "/process.Process/Start",
			`{"process":{"cmd":"/bin/sh"},"pty":{"size":{"rows":24,"cols":80}},"tag":"term"}`),
		"watch": e2bStream(t, url, sb.SandboxID, sb.EnvdAccessToken, "/filesystem.Filesystem/WatchDir",
			`{"path":"/tmp"}`),
	}
	streams["connect"] = e2bStream(t, url, sb.SandboxID, sb.EnvdAccessToken, "/process.Process/Connect",
		`{"process":{"tag":"term"}}`)

	prefix := member[:len("berth_")+12]
	if out, errOut, code := d.cli("key", "revoke", prefix); code != 0 {
		t.Fatalf("key revoke: %d %q %q", code, out, errOut)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	type result struct {
		name  string
		ended bool
		tail  string
	}
	results := make(chan result, len(streams))
	for name, r := range streams {
		go func() {
			ended, tail := streamEnds(r, 5*time.Second)
			select {
			case results <- result{name, ended, tail}:
			case <-ctx.Done():
			}
		}()
	}
	for range streams {
		r := <-results
		switch {
		case !r.ended:
			t.Errorf("the %s stream outlived its token's revocation by 5 s", r.name)
		case !strings.Contains(r.tail, "unauthenticated"):
			t.Errorf("the %s stream ended with %q, want an unauthenticated end", r.name, r.tail)
		}
	}
	// The token itself is refused from the next call.
	if st := e2bStatus(t, url, sb.SandboxID, sb.EnvdAccessToken); st != http.StatusUnauthorized {
		t.Errorf("a call with the revoked key's token: %d, want 401", st)
	}
}

// e2bStatus is the HTTP status of envd's GET /files of /etc/hostname on
// sandbox id with token.
func e2bStatus(t *testing.T, url, id, token string) int {
	t.Helper()
	req, err := http.NewRequest("GET", url+"/files?path=/etc/hostname", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header = http.Header{"E2b-Sandbox-Id": {id}, "E2b-Sandbox-Port": {"49983"}, "X-Access-Token": {token}}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}
