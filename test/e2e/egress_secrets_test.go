package e2e

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/client"
	"github.com/berth-sh/berth/internal/secrets"
	"github.com/berth-sh/berth/internal/testenv/fakenet"
)

// The fake internet of TestEgressSecrets, in the inet netns of a netTopo:
// two HTTPS hosts under a CA the test made, and a DNS server for their
// names (berth's resolver forwards to it: serve --egress-dns).
const (
	esHostA = "api.berth-e2e.test"   // the secret's host
	esHostB = "other.berth-e2e.test" // allowed too, but not the secret's
	esAddrA = "203.0.113.21"
	esAddrB = "203.0.113.22"
	esDNS   = "198.51.100.2:53"
)

// seenRequest is what a test host received.
type seenRequest struct {
	Host, Auth, URL, Body, SNI string
}

type testHosts struct {
	caPEM []byte
	mu    sync.Mutex
	seen  map[string][]seenRequest // by listener address
}

func (h *testHosts) last(addr string) seenRequest {
	h.mu.Lock()
	defer h.mu.Unlock()
	s := h.seen[addr]
	if len(s) == 0 {
		return seenRequest{}
	}
	return s[len(s)-1]
}

func (h *testHosts) all() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	b, _ := json.Marshal(h.seen)
	return string(b)
}

// inNetns runs fn on a thread moved into netns name (sockets made there
// stay there).
func inNetns(t *testing.T, name string, fn func() error) {
	t.Helper()
	if err := fakenet.InNetns(name, fn); err != nil {
		t.Fatal(err)
	}
}

// startTestInternet adds the hosts' addresses to the inet netns and serves
// HTTPS on them and DNS on the inet end of the topology.
func startTestInternet(t *testing.T, topo *netTopo) *testHosts {
	t.Helper()
	ipCmd(t, "-n", topo.inet, "addr", "add", esAddrA+"/32", "dev", "lo")
	ipCmd(t, "-n", topo.inet, "addr", "add", esAddrB+"/32", "dev", "lo")
	ca := fakenet.NewCA(t)
	// Both hosts' certificates name both hosts, so a request whose Host is
	// the other host's is served (and seen) rather than refused by TLS.
	leaf := ca.Leaf(t, esHostA, esHostB)
	h := &testHosts{caPEM: ca.PEM, seen: map[string][]seenRequest{}}
	var servers []*http.Server
	var dnsServers []*dns.Server
	inNetns(t, topo.inet, func() error {
		for _, addr := range []string{esAddrA, esAddrB} {
			ln, err := net.Listen("tcp", net.JoinHostPort(addr, "443"))
			if err != nil {
				return err
			}
			a := addr
			srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				body, _ := io.ReadAll(io.LimitReader(r.Body, 1<<16))
				h.mu.Lock()
				h.seen[a] = append(h.seen[a], seenRequest{Host: r.Host, Auth: r.Header.Get("Authorization"),
					URL: r.URL.String(), Body: string(body), SNI: r.TLS.ServerName})
				h.mu.Unlock()
				io.WriteString(w, "served-by-"+a+"\n")
			}), TLSConfig: &tls.Config{Certificates: []tls.Certificate{leaf}}, ReadHeaderTimeout: 5 * time.Second}
			servers = append(servers, srv)
			go srv.ServeTLS(ln, "", "")
		}
		var err error
		dnsServers, err = fakenet.ServeDNSHere(esDNS, map[string]string{esHostA: esAddrA, esHostB: esAddrB}, true)
		return err
	})
	t.Cleanup(func() {
		for _, s := range servers {
			s.Close()
		}
		for _, s := range dnsServers {
			s.Shutdown()
		}
	})
	return h
}

// TestEgressSecrets: a secret injected at egress reaches the allowed host
// it names in the Authorization header and nothing else holds it: not the
// sandbox (env, files, processes' environ), inspect, events, logs or the
// audit log; another host, the URL and the body get the placeholder; a
// removed secret is no longer put in; a fork child works with its own CA
// and address; a daemon restart re-registers the sandbox; and the attacks
// from inside (the CA key, the proxy port straight, SNI/Host mismatch,
// IPv6) are refused.
func TestEgressSecrets(t *testing.T) {
	parallel(t)
	testEgressSecrets(t, "runc")
}

// TestEgressSecretsRunsc: the same with the sandbox (and its fork child)
// on gVisor, whose netstack's frames take the same veth and redirect.
func TestEgressSecretsRunsc(t *testing.T) {
	parallel(t)
	testEgressSecrets(t, "runsc")
}

func testEgressSecrets(t *testing.T, rt string) {
	topo := newNetTopo(t)
	hosts := startTestInternet(t, topo)
	caFile := filepath.Join(t.TempDir(), "test-internet-ca.pem")
	if err := os.WriteFile(caFile, hosts.caPEM, 0o644); err != nil {
		t.Fatal(err)
	}
	d := newDaemon(t, &daemon{netns: topo.host, extra: []string{"--egress-ca-file", caFile, "--egress-dns", esDNS}})
	ctx := context.Background()
	value := randomValue(t, "egress-value-")
	if _, err := d.c.SetSecret(ctx, "TOKEN", value); err != nil {
		t.Fatal(err)
	}
	// One wildcard rule covers both hosts, so both are redirected to the
	// proxy, which must leave the other host's requests alone. (A host
	// outside the redirect is reached straight, under its own CA, which
	// the sandbox does not trust: nothing of the secret goes there.)
	allow := []string{"tcp://*.berth-e2e.test:443"}

	// Create-time checks: 400s with their own codes, nothing made.
	ref := api.SecretRef{Name: "TOKEN", EgressHost: esHostA}
	for _, tc := range []struct {
		req  api.CreateSandboxRequest
		code string
	}{
		{api.CreateSandboxRequest{Secrets: []api.SecretRef{ref}}, "egress_secret_needs_egress"},
		{api.CreateSandboxRequest{Network: "egress", Allow: []string{"tcp://" + esHostB + ":443"}, Secrets: []api.SecretRef{ref}}, "egress_secret_host_not_allowed"},
		{api.CreateSandboxRequest{Network: "egress", Allow: []string{"tcp://" + esHostA + ":80"}, Secrets: []api.SecretRef{ref}}, "egress_secret_host_not_allowed"},
		{api.CreateSandboxRequest{Network: "egress", Allow: allow, Secrets: []api.SecretRef{{Name: "TOKEN", EgressHost: "bad_host"}}}, "invalid_argument"},
		{api.CreateSandboxRequest{Network: "egress", Allow: allow, Secrets: []api.SecretRef{{Name: "TOKEN", EgressHost: esHostA, File: "/run/secrets/t"}}}, "invalid_argument"},
	} {
		_, err := d.c.CreateSandbox(ctx, tc.req)
		var ce *client.Error
		if !errors.As(err, &ce) || ce.Code != tc.code || ce.Status != 400 {
			t.Fatalf("create %+v: want 400 %s, got %v", tc.req, tc.code, err)
		}
	}
	if list, err := d.c.ListSandboxes(ctx, true); err != nil || len(list) != 0 {
		t.Fatalf("a refused create left a sandbox: %+v %v", list, err)
	}

	out, errOut, code := d.cli("create", "--runtime", rt, "--network", "egress", "--persistent", "--allow", allow[0],
		"--secret", "TOKEN=egress:"+esHostA)
	if code != 0 {
		t.Fatalf("create: %s", errOut)
	}
	id := strings.TrimSpace(out)
	sb, err := d.c.GetSandbox(ctx, id)
	if err != nil || len(sb.Secrets) != 1 || sb.Secrets[0].EgressHost != esHostA || sb.Secrets[0].Env != "TOKEN" || sb.Isolation.Runtime != rt {
		t.Fatalf("inspect: %+v %v", sb, err)
	}

	run := func(id, script string) (string, int) {
		t.Helper()
		var out strings.Builder
		exit, err := d.c.Exec(ctx, id, api.ExecRequest{Cmd: []string{"python3", "-c", script}}, &out, &out)
		if err != nil {
			t.Fatalf("exec: %v", err)
		}
		return out.String(), exit.Code
	}
	placeholder := strings.TrimSpace(execOut(t, d, id, "printenv", "TOKEN"))
	if !secrets.IsPlaceholder(placeholder) {
		t.Fatalf("TOKEN in the sandbox is not a placeholder: %q", placeholder)
	}
	for _, k := range []string{"SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "NODE_EXTRA_CA_CERTS"} {
		if got := strings.TrimSpace(execOut(t, d, id, "printenv", k)); got != "/run/secrets/berth-egress-ca-bundle.pem" {
			t.Fatalf("%s = %q", k, got)
		}
	}
	caCert := func(id string) string {
		b, err := os.ReadFile(filepath.Join(d.dataDir, "sandboxes", id, "egress-ca", "egress-ca.crt"))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	if fi, err := os.Stat(filepath.Join(d.dataDir, "sandboxes", id, "egress-ca", "egress-ca.key")); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("CA key on the host: %v %v", fi, err)
	}
	bundle := execOut(t, d, id, "cat", "/run/secrets/berth-egress-ca-bundle.pem")
	if !strings.HasSuffix(strings.TrimSpace(bundle), strings.TrimSpace(caCert(id))) || strings.Count(bundle, "BEGIN CERTIFICATE") < 2 {
		t.Fatalf("the CA bundle does not end with the sandbox's CA after system CAs (%d certs)", strings.Count(bundle, "BEGIN CERTIFICATE"))
	}

	// request: an HTTPS request from the sandbox, the header, URL and body
	// naming the placeholder from the env.
	request := func(id, host, hostHeader string) (string, int) {
		t.Helper()
		return run(id, `import os, http.client, ssl, sys
tok = os.environ.get("TOKEN", "")
try:
    c = http.client.HTTPSConnection("`+host+`", 443, timeout=8, context=ssl.create_default_context())
    c.request("POST", "/p?q=" + tok, body="body " + tok, headers={"Host": "`+hostHeader+`", "Authorization": "Bearer " + tok})
    r = c.getresponse()
    print(r.status, r.read().decode().strip())
except Exception as e:
    print("FAILED", type(e).__name__, e); sys.exit(1)`)
	}
	var got string
	for i := 0; i < 30; i++ { // the test hosts may still be starting
		if got, code = request(id, esHostA, esHostA); code == 0 {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if code != 0 || got != "200 served-by-"+esAddrA+"\n" {
		t.Fatalf("request to the secret's host: %q", got)
	}
	seen := hosts.last(esAddrA)
	if seen.Auth != "Bearer "+value {
		t.Fatalf("the secret's host did not get the value: %+v", seen)
	}
	if !strings.Contains(seen.URL, placeholder) || strings.Contains(seen.URL, value) || seen.Body != "body "+placeholder {
		t.Fatalf("the URL or body was rewritten: %+v", seen)
	}
	// Another allowed host gets the placeholder.
	if got, code := request(id, esHostB, esHostB); code != 0 || !strings.Contains(got, "served-by-"+esAddrB) {
		t.Fatalf("request to the other host: %q", got)
	}
	if s := hosts.last(esAddrB); s.Auth != "Bearer "+placeholder {
		t.Fatalf("the other host got %+v", s)
	}
	// SNI of the secret's host, Host of the other: not substituted.
	if got, code := request(id, esHostA, esHostB); code != 0 {
		t.Fatalf("SNI/Host mismatch request: %q", got)
	}
	if s := hosts.last(esAddrA); s.Host != esHostB || s.Auth != "Bearer "+placeholder {
		t.Fatalf("SNI/Host mismatch was substituted: %+v", s)
	}
	// IPv6: the secret's host has no AAAA for this sandbox.
	if got, _ := run(id, `import socket
print(sorted({a[0].name for a in socket.getaddrinfo("`+esHostA+`", 443, proto=socket.IPPROTO_TCP)}))`); strings.TrimSpace(got) != "['AF_INET']" {
		t.Fatalf("address families of the secret's host: %q", got)
	}
	// The proxy's port on the gateway, straight: refused.
	if got, code := run(id, `import socket, sys
gw = [l.split()[1] for l in open("/etc/resolv.conf") if l.startswith("nameserver")][0]
s = socket.socket(); s.settimeout(2)
try:
    s.connect((gw, 15443)); print("CONNECTED", gw)
except Exception as e:
    print("refused", type(e).__name__); sys.exit(1)`); code == 0 {
		t.Fatalf("the proxy port is reachable without the redirect: %q", got)
	}

	// Nothing in the sandbox holds the value or the CA key: its whole
	// filesystem (but /proc and /sys) and every process's environ.
	key, err := os.ReadFile(filepath.Join(d.dataDir, "sandboxes", id, "egress-ca", "egress-ca.key"))
	if err != nil {
		t.Fatal(err)
	}
	keyLine := strings.Split(strings.TrimSpace(string(key)), "\n")[1]
	// /usr is the host's, bind-mounted read-only (the attack suite's
	// host-usr-write): berth writes nothing there, and reading it all
	// took minutes of a loaded 2-core host (on gVisor, through the
	// gofer, longer than the CLI's 2 minutes). The rest is searched, for
	// both needles in one pass.
	out, errOut, code = d.cli("exec", id, "--", "sh", "-c",
		"grep -rlF --devices=skip -e \"$1\" -e \"$2\" / --exclude-dir=proc --exclude-dir=sys --exclude-dir=usr 2>/dev/null; "+
			"cat /proc/[0-9]*/environ 2>/dev/null | grep -cF -e \"$1\" -e \"$2\"; true", "sh", value, keyLine)
	if lines := strings.Fields(out); len(lines) != 1 || lines[0] != "0" {
		t.Fatalf("the sandbox holds the value or the CA key (exit %d, stderr %q):\n%s", code, errOut, out)
	}
	for _, args := range [][]string{{"inspect", id, "-o", "json"}, {"events", id, "-o", "json"}, {"ls", "-o", "json"}, {"network", "ls", id}, {"audit", "ls", "-o", "json"}} {
		if out, _, _ := d.cli(args...); strings.Contains(out, value) {
			t.Fatalf("berth %v shows the value", args)
		}
	}
	if strings.Contains(d.logs.String(), value) {
		t.Fatal("the daemon's log holds the value")
	}
	if hits := dataDirHolds(t, d.dataDir, value); len(hits) > 0 {
		t.Fatalf("the data dir holds the value in clear: %v", hits)
	}
	entries, err := d.c.ListAudit(ctx, client.AuditFilter{Action: "egress.inject"})
	if err != nil || len(entries) == 0 || entries[0].Target != id+" TOKEN@"+esHostA {
		t.Fatalf("audit egress.inject: %+v %v", entries, err)
	}

	// A fork child: its own address and CA, and the secret works there.
	fr, err := d.c.Fork(ctx, id, api.ForkRequest{})
	if err != nil || len(fr.Children) != 1 {
		t.Fatalf("fork: %+v %v", fr, err)
	}
	child := fr.Children[0]
	if child.IPv4 == "" || child.IPv4 == sb.IPv4 || child.IPv6 == sb.IPv6 {
		t.Fatalf("the child's addresses %s %s are not its own (parent %s %s)", child.IPv4, child.IPv6, sb.IPv4, sb.IPv6)
	}
	if caCert(child.ID) == caCert(id) {
		t.Fatal("the child has its parent's CA")
	}
	if got, code := request(child.ID, esHostA, esHostA); code != 0 || hosts.last(esAddrA).Auth != "Bearer "+value {
		t.Fatalf("request from the child: %q %+v", got, hosts.last(esAddrA))
	}
	// The parent keeps working beside its child.
	if got, code := request(id, esHostA, esHostA); code != 0 || hosts.last(esAddrA).Auth != "Bearer "+value {
		t.Fatalf("request from the parent after the fork: %q", got)
	}
	if _, err := d.c.DeleteSandbox(ctx, child.ID, true); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(d.dataDir, "sandboxes", child.ID)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the child's CA dir outlived it: %v", err)
	}

	// A sandbox from a snapshot: its own address and CA too.
	snap, err := d.c.CreateSnapshot(ctx, id, api.CreateSnapshotRequest{Name: "egress-snap"})
	if err != nil {
		t.Fatal(err)
	}
	fromSnap, err := d.c.CreateSandbox(ctx, api.CreateSandboxRequest{Snapshot: snap.ID})
	if err != nil {
		t.Fatal(err)
	}
	if fromSnap.IPv4 == "" || fromSnap.IPv4 == sb.IPv4 || caCert(fromSnap.ID) == caCert(id) {
		t.Fatalf("the sandbox from a snapshot has address %s (parent %s) or its parent's CA", fromSnap.IPv4, sb.IPv4)
	}
	if got, code := request(fromSnap.ID, esHostA, esHostA); code != 0 || hosts.last(esAddrA).Auth != "Bearer "+value {
		t.Fatalf("request from the sandbox made from a snapshot: %q", got)
	}
	if _, err := d.c.DeleteSandbox(ctx, fromSnap.ID, true); err != nil {
		t.Fatal(err)
	}
	if err := d.c.DeleteSnapshot(ctx, snap.ID); err != nil {
		t.Fatal(err)
	}

	// A daemon restart re-registers the running sandbox with the proxy.
	d.stop()
	d.startWithEnv()
	if got, code := request(id, esHostA, esHostA); code != 0 || hosts.last(esAddrA).Auth != "Bearer "+value {
		t.Fatalf("request after a daemon restart: %q %+v", got, hosts.last(esAddrA))
	}

	// Revocation: the next request carries the placeholder.
	if err := d.c.DeleteSecret(ctx, "TOKEN"); err != nil {
		t.Fatal(err)
	}
	if got, code := request(id, esHostA, esHostA); code != 0 {
		t.Fatalf("request after secret rm: %q", got)
	}
	if s := hosts.last(esAddrA); s.Auth != "Bearer "+placeholder {
		t.Fatalf("after secret rm the host got %+v", s)
	}
	if strings.Contains(d.logs.String(), value) {
		t.Fatal("the daemon's log holds the value")
	}
	if _, err := d.c.DeleteSandbox(ctx, id, true); err != nil {
		t.Fatal(err)
	}
	if out, _ := exec.Command("ip", "-n", topo.host, "-o", "link").Output(); strings.Contains(string(out), "veth") {
		t.Fatalf("veths left:\n%s", out)
	}
	t.Logf("requests seen: %s", hosts.all())
}
