package sdk

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
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

	"github.com/berth-sh/berth/internal/testenv"
	"github.com/berth-sh/berth/internal/testenv/fakenet"
)

// sdkDaemon is one private daemon for an SDK suite: on its unix socket
// (the host's admin), on plain HTTP and on TLS, all loopback in the host
// namespace of a test internet (fakenet), whose one HTTPS host, the
// egress examples' API, its sandboxes reach through berth's egress proxy.
type sdkDaemon struct {
	d                 *testenv.Daemon
	topo              *fakenet.Topo
	base              string // a temp dir the suite may use; removed at the end
	httpAddr, tlsAddr string
	fingerprint       string
	api               *fakeAPI
	hook              *webhookReceiver
}

// The test internet's API host: the egress-secret examples store its key
// as a secret injected at egress for this host.
const (
	apiHost = "api.berth-sdk.test"
	apiAddr = "203.0.113.40"
	apiDNS  = fakenet.InetAddr + ":53"
)

// startDaemon starts the daemon of one suite; the test's cleanup fails it
// for any sandbox the suite left, stops the daemon and checks for leaks.
func startDaemon(t *testing.T) *sdkDaemon {
	t.Helper()
	base, err := testenv.TempDir("", "e2e-sdk")
	if err != nil {
		t.Fatal(err)
	}
	// Registered first, so it runs last: the namespaces go after the
	// daemon and its leak check.
	topo := fakenet.New(t)
	api := startFakeAPI(t, topo, filepath.Join(base, "api-seen.jsonl"))
	caFile := filepath.Join(base, "test-internet-ca.pem")
	if err := os.WriteFile(caFile, api.caPEM, 0o644); err != nil {
		t.Fatal(err)
	}
	hook := startWebhookReceiver(t, topo)
	httpAddr, tlsAddr := freePort(t), freePort(t)
	d, err := testenv.Start(context.Background(), testenv.Config{
		Binary: berthBin, DataDir: filepath.Join(base, "data"), Socket: filepath.Join(base, "berth.sock"),
		Netns: topo.Host,
		// A 2 GiB default disk cap: creates and forks are admitted against
		// what their caps may grow to, and the suites' forks must not need
		// tens of GiB free on the test machine.
		Args: []string{"--insecure-listen", httpAddr, "--listen", tlsAddr, "--warm-pool=off", "--disk-default", "2GiB",
			"--egress-ca-file", caFile, "--egress-dns", apiDNS,
			"--webhook-url", hook.url, "--webhook-secret", hook.secret},
		LogLevel: "debug", UserAgent: "berth-sdk-test", ReadyTimeout: 30 * time.Second, StopTimeout: 20 * time.Second,
	})
	if err != nil {
		testenv.RemoveDir(base)
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cleanup(t, d)
		if err := testenv.RemoveDir(base); err != nil {
			t.Error(err)
		}
	})
	v, err := d.Client().Version(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if v.TLSFingerprint == "" {
		t.Fatal("the daemon's version has no TLS fingerprint though it listens on TLS")
	}
	return &sdkDaemon{d: d, topo: topo, base: base, httpAddr: httpAddr, tlsAddr: tlsAddr, fingerprint: v.TLSFingerprint, api: api, hook: hook}
}

// webhookReceiver is the daemon's webhook endpoint (--webhook-url): a
// plain HTTP server on the test internet's API address that takes every
// delivery with 204. Its URL holds a user, a password and a query token,
// and the daemon signs with a secret: GET /v1/webhooks must show the URL
// redacted (webhookRedacted) and none of the four.
type webhookReceiver struct {
	url, secret string
	hidden      []string // the user, password, token and secret
}

const (
	webhookAddr     = apiAddr + ":8080"
	webhookRedacted = "http://redacted@" + webhookAddr + "/berth-hook?token=redacted"
)

func startWebhookReceiver(t *testing.T, topo *fakenet.Topo) *webhookReceiver {
	t.Helper()
	b := make([]byte, 24)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	user, pass, token := "hookuser-"+hex.EncodeToString(b[:4]), "hookpass-"+hex.EncodeToString(b[4:8]), "hooktoken-"+hex.EncodeToString(b[8:12])
	r := &webhookReceiver{
		url:    "http://" + user + ":" + pass + "@" + webhookAddr + "/berth-hook?token=" + token,
		secret: "whsec-" + hex.EncodeToString(b[12:]),
	}
	r.hidden = []string{user, pass, token, r.secret}
	var ln net.Listener
	if err := fakenet.InNetns(topo.Inet, func() (err error) {
		ln, err = net.Listen("tcp", webhookAddr)
		return err
	}); err != nil {
		t.Fatalf("listening on %s in %s: %v", webhookAddr, topo.Inet, err)
	}
	srv := &http.Server{ReadHeaderTimeout: 5 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.WriteHeader(http.StatusNoContent)
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return r
}

// command runs name in the daemon's network namespace (its loopback
// listeners are there, and so is the route to the test internet).
func (s *sdkDaemon) command(ctx context.Context, name string, args ...string) *exec.Cmd {
	return exec.CommandContext(ctx, "nsenter", append([]string{"--net=" + testenv.NetnsPath(s.topo.Host), "--", name}, args...)...)
}

// fakeAPI is the test internet's API host: HTTPS under the test's CA, it
// answers 200 to a request bearing its key and 401 to any other, and
// writes down the Authorization header of every request it gets (a JSON
// object a line), so the suites can see what reached the upstream.
type fakeAPI struct {
	key   string
	caPEM []byte
	seen  string // the file of Authorization headers seen
	mu    sync.Mutex
}

func startFakeAPI(t *testing.T, topo *fakenet.Topo, seen string) *fakeAPI {
	t.Helper()
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	ca := fakenet.NewCA(t)
	a := &fakeAPI{key: "sk-test-" + hex.EncodeToString(b), caPEM: ca.PEM, seen: seen}
	if err := os.WriteFile(seen, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	topo.AddAddr(t, apiAddr)
	topo.ServeHTTPS(t, net.JoinHostPort(apiAddr, "443"), ca.Leaf(t, apiHost), http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		auth := r.Header.Get("Authorization")
		line, _ := json.Marshal(map[string]string{"host": r.Host, "path": r.URL.Path, "authorization": auth})
		a.mu.Lock()
		if f, err := os.OpenFile(a.seen, os.O_APPEND|os.O_WRONLY, 0); err == nil {
			f.Write(append(line, '\n'))
			f.Close()
		}
		a.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		if subtle.ConstantTimeCompare([]byte(auth), []byte("Bearer "+a.key)) != 1 {
			w.WriteHeader(http.StatusUnauthorized)
			io.WriteString(w, `{"error": "unknown API key"}`+"\n")
			return
		}
		io.WriteString(w, `{"user": "sdk-example", "authorized": true}`+"\n")
	}))
	topo.ServeDNS(t, apiDNS, map[string]string{apiHost: apiAddr}, false)
	return a
}

// env says where the daemon is, as both suites read it: BERTH_HOST (its
// unix socket), BERTH_TEST_HTTP / BERTH_TEST_HTTPS (+ the TLS fingerprint
// and CA file) for its loopback TCP listeners.
func (s *sdkDaemon) env() []string {
	return []string{
		"BERTH_HOST=" + s.d.Host(),
		"BERTH_TEST_HTTP=http://" + s.httpAddr,
		"BERTH_TEST_HTTPS=https://" + s.tlsAddr,
		"BERTH_TEST_TLS_FINGERPRINT=" + s.fingerprint,
		"BERTH_TEST_TLS_CA=" + filepath.Join(s.d.DataDir(), "tls", "cert.pem"),
		// The egress examples' API host, its key (the secret to inject),
		// and the file of what it received.
		"BERTH_TEST_API_HOST=" + apiHost,
		"BERTH_TEST_API_KEY=" + s.api.key,
		"BERTH_TEST_API_SEEN=" + s.api.seen,
		// The daemon's webhook: the URL GET /v1/webhooks must show, and
		// what it must not (the configured URL and the signing secret).
		"BERTH_TEST_WEBHOOK_URL=" + webhookRedacted,
		"BERTH_TEST_WEBHOOK_HIDDEN=" + strings.Join(s.hook.hidden, " "),
	}
}

// cleanEnv is the test's environment minus what names a daemon or
// configures a language runtime: the suite names its own daemon; a
// caller's settings must not leak in.
func cleanEnv(prefixes ...string) []string {
	env := []string{}
	for _, kv := range os.Environ() {
		skip := strings.HasPrefix(kv, "BERTH_")
		for _, p := range prefixes {
			skip = skip || strings.HasPrefix(kv, p)
		}
		if !skip {
			env = append(env, kv)
		}
	}
	return env
}

// freePort picks a loopback port for a listener of the daemon.
func freePort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// cleanup fails the test for any sandbox the suite left (it must delete
// what it creates), removes them, stops the daemon and checks the host.
func cleanup(t *testing.T, d *testenv.Daemon) {
	ctx := context.Background()
	c := d.Client()
	if pools, err := c.ListPools(ctx); err == nil {
		for _, p := range pools {
			if p.Min > 0 {
				t.Errorf("the suite left a warm pool of %s (min %d)", p.Template, p.Min)
				c.SetPool(ctx, p.Template, 0)
			}
		}
	}
	// An emptied pool's members are deleted in the background; they are
	// in no list, so wait for them before the leak check.
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		left := 0
		pools, _ := c.ListPools(ctx)
		for _, p := range pools {
			left += p.Ready + p.Starting
		}
		if left == 0 {
			break
		}
	}
	sbs, err := c.ListSandboxes(ctx, false)
	if err != nil {
		t.Errorf("cleanup: listing: %v", err)
	}
	for _, sb := range sbs {
		t.Errorf("the suite left sandbox %s (%s, %s)", sb.ID, sb.Name, sb.State)
		if _, err := c.DeleteSandbox(ctx, sb.ID, true); err != nil {
			t.Errorf("cleanup: deleting %s: %v", sb.ID, err)
		}
	}
	if rep, err := c.Doctor(ctx, false); err != nil {
		t.Errorf("doctor: %v", err)
	} else if !rep.Healthy {
		t.Errorf("doctor found leaks after the suite: %+v", rep.Findings)
	}
	if err := d.Stop(); err != nil {
		t.Errorf("stopping the daemon: %v", err)
	}
	leaks, err := testenv.Clean(d.Scope())
	for _, l := range leaks {
		t.Errorf("leaked after the daemon stopped: %s", l)
	}
	if err != nil {
		t.Errorf("cleanup: %v", err)
	}
	if t.Failed() {
		t.Logf("daemon log:\n%s", d.LogTail(8000))
	}
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
