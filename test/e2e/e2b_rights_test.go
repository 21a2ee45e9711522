package e2e

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/berth-sh/berth/client"
)

// e2bCaller makes raw HTTP calls to the door at url: method, path, body,
// headers ("Host" sets the request's host); it answers status and body.
func e2bCaller(t *testing.T, url string) func(method, path, body string, hdr map[string]string) (int, string) {
	return func(method, path, body string, hdr map[string]string) (int, string) {
		t.Helper()
		req, err := http.NewRequest(method, url+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		if body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		for k, v := range hdr {
			if k == "Host" {
				req.Host = v
				continue
			}
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var b bytes.Buffer
		_, _ = b.ReadFrom(resp.Body)
		return resp.StatusCode, b.String()
	}
}

// roleKey makes a key of tenant with role (berth key create) and returns it.
func roleKey(t *testing.T, d *daemon, tenant, role string) string {
	t.Helper()
	out, errOut, code := d.cli("key", "create", "--tenant", tenant, "--role", role)
	if code != 0 {
		t.Fatalf("key create: %s %s", out, errOut)
	}
	i := strings.LastIndex(out, "berth_")
	if i < 0 {
		t.Fatalf("key create printed %q", out)
	}
	return strings.Fields(out[i:])[0]
}

// connectEnvelope is one Connect streaming message (flags 0) holding msg.
func connectEnvelope(msg string) string {
	var b bytes.Buffer
	b.WriteByte(0)
	_ = binary.Write(&b, binary.BigEndian, uint32(len(msg)))
	b.WriteString(msg)
	return b.String()
}

// TestE2BRightsBehindDoor (#30): the E2B door grants no right its caller
// lacks and records what REST records. A viewer key of the sandbox's own
// tenant reads the sandbox without its envd access token (that token runs
// commands and writes files, which a viewer may not); the health check
// tells no one without the sandbox's token whether an id exists (204 only
// for the token's own running sandbox, 502 for everything else alike); a
// file written and a process started through envd leave the REST routes'
// audit records; and the process start refuses the control bytes in env
// names and the working directory that REST refuses.
func TestE2BRightsBehindDoor(t *testing.T) {
	parallel(t)
	d, url, _ := e2bDaemon(t)
	do := e2bCaller(t, url)
	for _, tn := range []string{"acme", "other"} {
		if out, errOut, code := d.cli("tenant", "create", tn); code != 0 {
			t.Fatalf("tenant create: %s %s", out, errOut)
		}
	}
	member, viewer := roleKey(t, d, "acme", "member"), roleKey(t, d, "acme", "viewer")
	stranger := roleKey(t, d, "other", "member")
	type created struct{ SandboxID, EnvdAccessToken string }
	mk := func(k string) created {
		t.Helper()
		st, body := do("POST", "/v2/sandboxes", `{"templateID":"base","timeout":120}`, map[string]string{"X-API-Key": k})
		var c created
		if st != 201 || json.Unmarshal([]byte(body), &c) != nil || c.EnvdAccessToken == "" {
			t.Fatalf("create: %d %s", st, body)
		}
		return c
	}
	a, b := mk(member), mk(stranger)
	defer do("DELETE", "/sandboxes/"+a.SandboxID, "", map[string]string{"X-API-Key": member})
	defer do("DELETE", "/sandboxes/"+b.SandboxID, "", map[string]string{"X-API-Key": stranger})

	// The viewer reads the sandbox, but not its access token.
	st, body := do("GET", "/sandboxes/"+a.SandboxID, "", map[string]string{"X-API-Key": viewer})
	if st != 200 || !strings.Contains(body, a.SandboxID) {
		t.Fatalf("the viewer reading A: %d %s", st, body)
	}
	if strings.Contains(body, "envdAccessToken") || strings.Contains(body, a.EnvdAccessToken) {
		t.Errorf("the viewer was handed A's envd access token: %s", body)
	}
	if st, body := do("GET", "/sandboxes/"+a.SandboxID, "", map[string]string{"X-API-Key": member}); st != 200 || !strings.Contains(body, a.EnvdAccessToken) {
		t.Errorf("the member (who holds exec and files) reading A: %d %s", st, body)
	}
	if st, body := do("GET", "/v2/sandboxes", "", map[string]string{"X-API-Key": viewer}); st != 200 || strings.Contains(body, a.EnvdAccessToken) {
		t.Errorf("the viewer listing: %d %s", st, body)
	}

	// The health check: 204 for A's own token on A, and one answer, 502,
	// for every call that lacks it, whether the id exists or not.
	health := func(id, tok string) int {
		t.Helper()
		h := map[string]string{"E2b-Sandbox-Id": id, "E2b-Sandbox-Port": "49983"}
		if tok != "" {
			h["X-Access-Token"] = tok
		}
		st, _ := do("GET", "/health", "", h)
		return st
	}
	if st := health(a.SandboxID, a.EnvdAccessToken); st != 204 {
		t.Errorf("health of A with A's token: %d", st)
	}
	missing := "sb-" + strings.Repeat("0", len(a.SandboxID)-3)
	for _, c := range []struct{ name, id, tok string }{
		{"A without a token", a.SandboxID, ""},
		{"an unknown id without a token", missing, ""},
		{"another tenant's B without a token", b.SandboxID, ""},
		{"B with A's token", b.SandboxID, a.EnvdAccessToken},
		{"an unknown id with A's token", missing, a.EnvdAccessToken},
		{"A with an API key", a.SandboxID, member},
	} {
		if st := health(c.id, c.tok); st != 502 {
			t.Errorf("health of %s: %d, want 502 like every call without the sandbox's token", c.name, st)
		}
	}

	// A file written and a process started through envd: REST's records.
	envdHdr := map[string]string{"E2b-Sandbox-Id": a.SandboxID, "E2b-Sandbox-Port": "49983", "X-Access-Token": a.EnvdAccessToken}
	up := map[string]string{"Content-Type": "application/octet-stream"}
	for k, v := range envdHdr {
		up[k] = v
	}
	if st, body := do("POST", "/files?path=/tmp/audited.txt", "x", up); st != 200 {
		t.Fatalf("upload: %d %s", st, body)
	}
	start := func(process string) (int, string) {
		h := map[string]string{"Content-Type": "application/connect+json", "Connect-Protocol-Version": "1"}
		for k, v := range envdHdr {
			h[k] = v
		}
		return do("POST", "/process.Process/Start", connectEnvelope(`{"process":`+process+`}`), h)
	}
	if st, body := start(`{"cmd":"/bin/true"}`); st != 200 || strings.Contains(body, `"error"`) {
		t.Fatalf("process start: %d %q", st, body)
	}
	entries, err := d.c.ListAudit(context.Background(), client.AuditFilter{Target: a.SandboxID})
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]string{}
	for _, e := range entries {
		seen[e.Action] = e.Tenant + " " + e.Result
	}
	for _, action := range []string{"PUT /v1/sandboxes/{id}/files", "POST /v1/sandboxes/{id}/processes"} {
		if got := seen[action]; !strings.HasPrefix(got, "acme ok 20") {
			t.Errorf("audit record %q of A: %q (all: %v)", action, got, seen)
		}
	}

	// REST's validation: control bytes in an env name or the cwd.
	for _, p := range []string{
		`{"cmd":"/bin/true","envs":{"A\u001bB":"1"}}`,
		`{"cmd":"/bin/true","cwd":"/tmp/\u001b[31m"}`,
	} {
		if st, body := start(p); !strings.Contains(body, "invalid_argument") {
			t.Errorf("process start %s: %d %q, want invalid_argument", p, st, body)
		}
	}
}
