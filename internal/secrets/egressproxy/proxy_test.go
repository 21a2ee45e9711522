package egressproxy

import (
	"bufio"
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/internal/secrets"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const (
	apiHost   = "api.test.example"
	otherHost = "other.test.example"
	value     = "s3cr3t-value-of-TOKEN"
)

// upstream is an in-process HTTPS server with a CA of the test's own,
// answering both test hosts and recording the Authorization headers it
// saw, by host.
type upstream struct {
	srv   *httptest.Server
	roots *x509.CertPool
	mu    sync.Mutex
	seen  map[string][]string
}

func newUpstream(t *testing.T) *upstream {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	caT := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test upstream CA"}, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, caT, caT, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	caCert, _ := x509.ParseCertificate(caDER)
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	lt := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: apiHost}, DNSNames: []string{apiHost, otherHost}, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, lt, caCert, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	u := &upstream{roots: x509.NewCertPool(), seen: map[string][]string{}}
	u.roots.AddCert(caCert)
	u.srv = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u.mu.Lock()
		u.seen[hostOnly(r.Host)] = append(u.seen[hostOnly(r.Host)], r.Header.Get("Authorization"))
		u.mu.Unlock()
		if r.URL.Path == "/big-head" {
			w.Header().Set("X-Big", strings.Repeat("b", maxResponseHead+1))
		}
		fmt.Fprintf(w, "ua=%q x=%q", r.Header.Get("User-Agent"), r.Header.Get("X-Other"))
	}))
	u.srv.TLS = &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}}}
	u.srv.StartTLS()
	t.Cleanup(u.srv.Close)
	return u
}

func (u *upstream) saw(host string) []string {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]string(nil), u.seen[host]...)
}

type rig struct {
	up    *upstream
	p     *Proxy
	addr  string
	ca    *CA
	ph    string
	sb    *Sandbox
	value string
}

func newRig(t *testing.T, mod func(*Config)) *rig {
	t.Helper()
	up := newUpstream(t)
	upAddr := netip.MustParseAddrPort(up.srv.Listener.Addr().String())
	ca, err := NewCA("sbx-test", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{
		Roots:   up.roots,
		OrigDst: func(net.Conn) (netip.AddrPort, error) { return upAddr, nil },
	}
	if mod != nil {
		mod(&cfg)
	}
	r := &rig{up: up, ca: ca, ph: secrets.NewPlaceholder(), value: value}
	r.sb = &Sandbox{
		ID: "sbx-test", CA: ca,
		Secrets: []Secret{{Name: "TOKEN", Host: apiHost, Placeholder: r.ph}},
		Resolve: func(_ context.Context, name string) ([]byte, error) {
			if name != "TOKEN" {
				return nil, errdefs.NotFound("secret %s", name)
			}
			return []byte(r.value), nil
		},
		Pinned: func(host string, a netip.Addr) bool {
			return (host == apiHost || host == otherHost) && a == upAddr.Addr()
		},
	}
	r.p = New(cfg)
	r.p.Add(netip.MustParseAddr("127.0.0.1"), r.sb)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r.addr = l.Addr().String()
	done := make(chan error, 1)
	go func() { done <- r.p.Serve(l) }()
	t.Cleanup(func() {
		_ = l.Close()
		r.p.Close()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return r
}

// client is what a sandbox would run: HTTPS to host, trusting the
// sandbox's CA only, its connections going to the proxy (as the DNAT
// sends them).
func (r *rig) client(t *testing.T) *http.Client {
	pool := x509.NewCertPool()
	pool.AddCert(r.ca.Cert())
	tr := &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "tcp", r.addr)
		},
		TLSClientConfig: &tls.Config{RootCAs: pool},
	}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 10 * time.Second}
}

func get(t *testing.T, c *http.Client, url, host string, hdr map[string]string) (int, string, error) {
	t.Helper()
	req, _ := http.NewRequest("GET", url, nil)
	if host != "" {
		req.Host = host
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := c.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), nil
}

func TestSubstitutesOnlyForTheNamedHost(t *testing.T) {
	r := newRig(t, nil)
	c := r.client(t)
	auth := map[string]string{"Authorization": "Bearer " + r.ph, "X-Other": "keep " + r.ph}
	for i := 0; i < 2; i++ { // two requests on one kept-alive connection
		code, body, err := get(t, c, "https://"+apiHost+"/", "", auth)
		if err != nil || code != 200 {
			t.Fatalf("api: %d %v", code, err)
		}
		if want := fmt.Sprintf("x=%q", "keep "+value); !strings.Contains(body, want) {
			t.Fatalf("every header is substituted: body %q, want %s", body, want)
		}
	}
	if got := r.up.saw(apiHost); len(got) != 2 || got[0] != "Bearer "+value || got[1] != "Bearer "+value {
		t.Fatalf("api host saw %q, want the value twice", got)
	}
	if _, _, err := get(t, c, "https://"+otherHost+"/", "", auth); err != nil {
		t.Fatal(err)
	}
	if got := r.up.saw(otherHost); len(got) != 1 || got[0] != "Bearer "+r.ph {
		t.Fatalf("other host saw %q, want the placeholder", got)
	}
	// SNI of the named host but a Host header of another: unchanged.
	if _, _, err := get(t, c, "https://"+apiHost+"/", otherHost, auth); err != nil {
		t.Fatal(err)
	}
	if got := r.up.saw(otherHost); len(got) != 2 || got[1] != "Bearer "+r.ph {
		t.Fatalf("a Host other than the SNI got %q, want the placeholder", got)
	}
	// A request without User-Agent does not get Go's.
	code, body, err := get(t, c, "https://"+apiHost+"/", "", map[string]string{"User-Agent": ""})
	if err != nil || code != 200 || !strings.Contains(body, `ua=""`) {
		t.Fatalf("no User-Agent: %d %q %v", code, body, err)
	}
}

// TestOnInjectOncePerConnection: the audit hook hears of a secret once
// per connection that put it in, with its host, and not of a request
// that was not substituted.
func TestOnInjectOncePerConnection(t *testing.T) {
	r := newRig(t, nil)
	var mu sync.Mutex
	var heard []string
	r.sb.OnInject = func(secret, host string) {
		mu.Lock()
		heard = append(heard, secret+"@"+host)
		mu.Unlock()
	}
	c := r.client(t)
	auth := map[string]string{"Authorization": "Bearer " + r.ph}
	for i := 0; i < 3; i++ { // one kept-alive connection
		if _, _, err := get(t, c, "https://"+apiHost+"/", "", auth); err != nil {
			t.Fatal(err)
		}
	}
	if _, _, err := get(t, c, "https://"+otherHost+"/", "", auth); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(heard) != 1 || heard[0] != "TOKEN@"+apiHost {
		t.Fatalf("OnInject heard %q, want TOKEN@%s once", heard, apiHost)
	}
}

func TestRevokedSecretSendsThePlaceholder(t *testing.T) {
	r := newRig(t, nil)
	r.sb.Resolve = func(context.Context, string) ([]byte, error) { return nil, errdefs.NotFound("gone") }
	if _, _, err := get(t, r.client(t), "https://"+apiHost+"/", "", map[string]string{"Authorization": r.ph}); err != nil {
		t.Fatal(err)
	}
	if got := r.up.saw(apiHost); len(got) != 1 || got[0] != r.ph {
		t.Fatalf("saw %q", got)
	}
}

func TestValueWithControlBytesIsRefused(t *testing.T) {
	r := newRig(t, nil)
	r.value = "v\r\nX-Injected: 1"
	code, body, err := get(t, r.client(t), "https://"+apiHost+"/", "", map[string]string{"Authorization": r.ph})
	if err != nil || code != http.StatusBadGateway {
		t.Fatalf("got %d %v, want 502", code, err)
	}
	if strings.Contains(body, "Injected") {
		t.Fatalf("the error names the value: %q", body)
	}
	if got := r.up.saw(apiHost); len(got) != 0 {
		t.Fatalf("upstream got a request: %q", got)
	}
}

func TestUnpinnedServerNameIsRefused(t *testing.T) {
	r := newRig(t, nil)
	_, _, err := get(t, r.client(t), "https://evil.test.example/", "", nil)
	if err == nil {
		t.Fatal("a server name the sandbox's DNS did not pin was served")
	}
	r.sb.Pinned = func(string, netip.Addr) bool { return false }
	if _, _, err := get(t, r.client(t), "https://"+apiHost+"/", "", nil); err == nil {
		t.Fatal("an allowed name at an address not pinned for it was served")
	}
}

func TestUpstreamIsVerified(t *testing.T) {
	r := newRig(t, func(c *Config) { c.Roots = x509.NewCertPool() })
	code, _, err := get(t, r.client(t), "https://"+apiHost+"/", "", map[string]string{"Authorization": r.ph})
	if err != nil || code != http.StatusBadGateway {
		t.Fatalf("unverifiable upstream: %d %v, want 502", code, err)
	}
	if got := r.up.saw(apiHost); len(got) != 0 {
		t.Fatalf("an unverified upstream got %q", got)
	}
}

// TestRefusalAnswersTheRequest: the 502 for an upstream that fails
// comes as the answer to the client's request, never before it (an answer
// to no request is dropped by clients such as Go's transport as
// unsolicited, and the caller sees a broken connection, not the 502).
func TestRefusalAnswersTheRequest(t *testing.T) {
	r := newRig(t, func(c *Config) { c.Roots = x509.NewCertPool() })
	pool := x509.NewCertPool()
	pool.AddCert(r.ca.Cert())
	raw, err := net.Dial("tcp", r.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	tc := tls.Client(raw, &tls.Config{RootCAs: pool, ServerName: apiHost})
	if err := tc.Handshake(); err != nil {
		t.Fatal(err)
	}
	// The proxy's upstream handshake fails meanwhile; nothing may come.
	_ = tc.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
	if n, err := tc.Read(make([]byte, 1)); n != 0 || !isTimeout(err) {
		t.Fatalf("before any request the proxy sent %d bytes (%v); want nothing", n, err)
	}
	_ = tc.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(tc, "GET / HTTP/1.1\r\nHost: "+apiHost+"\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(tc), nil)
	if err != nil {
		t.Fatalf("the answer to the request: %v", err)
	}
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusBadGateway || !strings.Contains(string(b), "upstream TLS verification failed") {
		t.Fatalf("answer %d %q; want the 502", resp.StatusCode, b)
	}
}

func TestRequestHeadIsBounded(t *testing.T) {
	r := newRig(t, func(c *Config) { c.MaxHeaderBytes = 2048 })
	code, _, err := get(t, r.client(t), "https://"+apiHost+"/", "", map[string]string{"X-Big": strings.Repeat("a", 4096)})
	if err != nil || code != http.StatusRequestHeaderFieldsTooLarge {
		t.Fatalf("big head: %d %v, want 431", code, err)
	}
	code, _, err = get(t, r.client(t), "https://"+apiHost+"/", "", map[string]string{"X-Small": strings.Repeat("a", 1024)})
	if err != nil || code != 200 {
		t.Fatalf("head under the bound: %d %v", code, err)
	}
}

func TestResponseHeadIsBounded(t *testing.T) {
	r := newRig(t, nil)
	code, _, err := get(t, r.client(t), "https://"+apiHost+"/big-head", "", nil)
	if err != nil || code != http.StatusBadGateway {
		t.Fatalf("response head past the bound: %d %v, want 502", code, err)
	}
}

func TestConnectionsPerSandboxAreBounded(t *testing.T) {
	r := newRig(t, func(c *Config) { c.MaxConns = 1 })
	pool := x509.NewCertPool()
	pool.AddCert(r.ca.Cert())
	first, err := tls.Dial("tcp", r.addr, &tls.Config{ServerName: apiHost, RootCAs: pool})
	if err != nil {
		t.Fatal(err)
	}
	defer first.Close()
	second, err := tls.Dial("tcp", r.addr, &tls.Config{ServerName: apiHost, RootCAs: pool})
	if err == nil {
		second.Close()
		t.Fatal("a second connection past the bound of 1 was served")
	}
	first.Close()
	deadline := time.Now().Add(5 * time.Second)
	for r.p.Open() != 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if _, _, err := get(t, r.client(t), "https://"+apiHost+"/", "", nil); err != nil {
		t.Fatalf("after the first closed: %v", err)
	}
}

func TestIdleConnectionIsClosed(t *testing.T) {
	r := newRig(t, func(c *Config) { c.IdleTimeout = 200 * time.Millisecond })
	pool := x509.NewCertPool()
	pool.AddCert(r.ca.Cert())
	c, err := tls.Dial("tcp", r.addr, &tls.Config{ServerName: apiHost, RootCAs: pool})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Read(make([]byte, 1)); !errors.Is(err, io.EOF) {
		t.Fatalf("idle connection: %v, want EOF from the proxy", err)
	}
}

func TestUnknownSourceAndRemove(t *testing.T) {
	r := newRig(t, nil)
	pool := x509.NewCertPool()
	pool.AddCert(r.ca.Cert())
	c, err := tls.Dial("tcp", r.addr, &tls.Config{ServerName: apiHost, RootCAs: pool})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r.p.Remove(netip.MustParseAddr("127.0.0.1"))
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Read(make([]byte, 1)); err == nil {
		t.Fatal("Remove left the sandbox's connection open")
	}
	if _, err := tls.Dial("tcp", r.addr, &tls.Config{ServerName: apiHost, RootCAs: pool}); err == nil {
		t.Fatal("a source no sandbox is registered for was served")
	}
}

func TestCASaveLoad(t *testing.T) {
	dir := t.TempDir()
	ca, err := NewCA("sbx1", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if err := ca.Save(dir); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(filepath.Join(dir, CAKeyFile))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("key file: %v %v", fi.Mode(), err)
	}
	back, err := LoadCA(dir)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(back.CertPEM(), ca.CertPEM()) || ca.Cert().PublicKeyAlgorithm != x509.ECDSA {
		t.Fatal("loaded CA differs")
	}
	leaf, err := back.Leaf(apiHost, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca.Cert())
	if _, err := leaf.Leaf.Verify(x509.VerifyOptions{DNSName: apiHost, Roots: pool}); err != nil {
		t.Fatalf("leaf does not verify under the CA: %v", err)
	}
	if _, err := leaf.Leaf.Verify(x509.VerifyOptions{DNSName: otherHost, Roots: pool}); err == nil {
		t.Fatal("leaf verifies for another host")
	}
	if again, _ := back.Leaf(apiHost, time.Now()); again != leaf {
		t.Fatal("leaf not cached")
	}
	if err := os.Chmod(filepath.Join(dir, CAKeyFile), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadCA(dir); err == nil {
		t.Fatal("a key file others may read was loaded")
	}
}

// FuzzRequestHead feeds arbitrary bytes through the request-head handling
// of the relay: bounded read, substitution, write. Whatever comes in, the
// value goes out only for the named host, only in header values, and the
// written request parses back with the same headers.
func FuzzRequestHead(f *testing.F) {
	ph := secrets.NewPlaceholder()
	f.Add([]byte("GET / HTTP/1.1\r\nHost: api.test.example\r\nAuthorization: Bearer " + ph + "\r\n\r\n"))
	f.Add([]byte("GET / HTTP/1.1\r\nHost: other.test.example\r\nAuthorization: " + ph + "\r\n\r\n"))
	f.Add([]byte("POST /" + ph + " HTTP/1.1\r\nHost: API.test.example.:443\r\nContent-Length: 3\r\nX: " + ph + ph + "\r\n\r\nabc"))
	f.Add([]byte("GET / HTTP/1.1\r\nHost: api.test.example\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"))
	f.Add([]byte("GET / HTTP/1.1\r\nHost: api.test.example\r\nA: " + strings.Repeat("x", 5000) + "\r\n\r\n"))
	p := New(Config{Now: time.Now})
	sb := &Sandbox{
		ID: "fuzz", Secrets: []Secret{{Name: "T", Host: apiHost, Placeholder: ph}},
		Resolve: func(context.Context, string) ([]byte, error) { return []byte("VALUE"), nil },
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		lim := &headLimit{r: bytes.NewReader(data), n: 4096}
		req, err := http.ReadRequest(bufio.NewReader(lim))
		if err != nil {
			return
		}
		inHost := hostOnly(req.Host)
		inCount := countHeaders(req.Header)
		if _, err := p.rewrite(req, sb, apiHost); err != nil {
			t.Fatalf("rewrite: %v", err)
		}
		var out bytes.Buffer
		req.Body = io.NopCloser(io.LimitReader(req.Body, 1<<16))
		if err := req.Write(&out); err != nil {
			return
		}
		head, _, _ := bytes.Cut(out.Bytes(), []byte("\r\n\r\n"))
		if bytes.Contains(head, []byte("VALUE")) && !bytes.Contains(data, []byte("VALUE")) {
			if inHost != apiHost {
				t.Fatalf("value sent to host %q", inHost)
			}
			line, _, _ := bytes.Cut(head, []byte("\r\n"))
			if bytes.Contains(line, []byte("VALUE")) {
				t.Fatalf("value put in the request line %q", line)
			}
		}
		back, err := http.ReadRequest(bufio.NewReader(bytes.NewReader(out.Bytes())))
		if err != nil {
			t.Fatalf("written request does not parse: %v\n%q", err, out.Bytes())
		}
		if outCount := countHeaders(back.Header); outCount > inCount {
			t.Fatalf("substitution added headers: %d > %d", outCount, inCount)
		}
	})
}

// countHeaders counts h's values but those http.Request.Write sets itself
// (framing, Connection: close for a closing request, User-Agent).
func countHeaders(h http.Header) int {
	n := 0
	for k, vs := range h {
		if k != "User-Agent" && k != "Content-Length" && k != "Transfer-Encoding" && k != "Connection" {
			n += len(vs)
		}
	}
	return n
}
