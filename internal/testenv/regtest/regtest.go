// Package regtest runs a real OCI registry for tests: the CNCF
// distribution registry (built by scripts/install-registry.sh, cached under
// /var/cache/berth/registry) in a network namespace the test makes, over
// TLS with a CA made for the test, behind htpasswd basic auth or bearer
// token auth with a token server the test runs itself.
//
// # Network
//
// The registry's namespace is joined to the host's by a veth pair with
// addresses of a random /29 in 198.18.0.0/15 (RFC 2544's test range): the
// host end is .1, the registry listens on .2 (the only address in its
// certificate), .3 reaches the same registry under an address its
// certificate does not name. The namespace has no route but that /29, so
// the registry can send nothing past the host; references name it by
// address only, so no name is ever looked up.
//
// Stop (a t.Cleanup) kills the registry by pid, closes the token server
// and deletes the namespace, which takes the veth pair with it.
package regtest

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/vishvananda/netns"
	"golang.org/x/crypto/bcrypt"
)

// TB is the part of testing.TB Start uses (a *testing.T is one); Run
// starts a registry without a test.
type TB interface {
	Helper()
	Fatal(args ...any)
	Fatalf(format string, args ...any)
	TempDir() string
	Cleanup(func())
}

// Auth is how the registry authenticates clients.
type Auth int

const (
	// Basic is htpasswd basic auth: User and Password.
	Basic Auth = iota
	// Token is the registry token protocol: a client gets a 401 naming the
	// token server (Realm), which gives a signed token for User and
	// Password, and for nobody else.
	Token
)

// Registry is one running registry.
type Registry struct {
	// Netns is the registry's network namespace.
	Netns string
	// Addr is host:port of the registry, TLS with a certificate for this
	// IP address only, signed by the test CA (CAPEM, CAFile).
	Addr string
	// OtherAddr reaches the same registry at an address its certificate
	// does not name (a TLS name mismatch): it listens on every address of
	// its namespace.
	OtherAddr string
	// ClosedAddr is an address of the registry's namespace where nothing
	// listens (connection refused).
	ClosedAddr string
	// Realm is the token server's URL (Token auth only).
	Realm string
	// CAPEM and CAFile are the test CA's certificate.
	CAPEM  []byte
	CAFile string
	// Storage is the registry's filesystem storage root.
	Storage string
	// User and Password are the one account the registry accepts.
	User, Password string

	closer  func() // Run's: its cleanups
	cmd     *exec.Cmd
	done    chan struct{} // closed when cmd exited
	waitErr error
	tokens  *http.Server
	dir     string
	log     *bytes.Buffer
	mu      sync.Mutex
}

// Binary returns the registry binary scripts/install-registry.sh built:
// $BERTH_REGISTRY_BIN, else the path in the cache's CURRENT file.
func Binary() (string, error) {
	if p := os.Getenv("BERTH_REGISTRY_BIN"); p != "" {
		return p, nil
	}
	cache := os.Getenv("BERTH_REGISTRY_CACHE")
	if cache == "" {
		cache = "/var/cache/berth/registry"
	}
	b, err := os.ReadFile(filepath.Join(cache, "CURRENT"))
	if err != nil {
		return "", fmt.Errorf("no registry binary (run scripts/install-registry.sh, part of make deps): %w", err)
	}
	p := strings.TrimSpace(string(b))
	if st, err := os.Stat(p); err != nil || st.Mode()&0o111 == 0 {
		return "", fmt.Errorf("registry binary %s is missing (run scripts/install-registry.sh, part of make deps)", p)
	}
	return p, nil
}

// Start runs a registry with auth until the test ends. A missing registry
// binary fails the test.
func Start(t TB, auth Auth) *Registry {
	t.Helper()
	bin, err := Binary()
	if err != nil {
		t.Fatal(err)
	}
	r := &Registry{dir: t.TempDir(), User: "berth-test", Password: randHex(12), log: &bytes.Buffer{}}
	t.Cleanup(r.stop)
	id := randHex(3)
	r.Netns = "brg-" + id
	var n [2]byte
	rand.Read(n[:])
	base := netip.AddrFrom4([4]byte{198, 18 + n[0]&1, n[1], 8 * byte(randInt(32))})
	host, reg, other := base.Next(), base.Next().Next(), base.Next().Next().Next()
	r.Addr = netip.AddrPortFrom(reg, 5000).String()
	r.OtherAddr = netip.AddrPortFrom(other, 5000).String()
	r.ClosedAddr = netip.AddrPortFrom(reg, 5999).String()

	hostIf, regIf := "brh"+id, "brr"+id
	if err := ipCmd("netns", "add", r.Netns); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"link", "add", hostIf, "type", "veth", "peer", "name", regIf, "netns", r.Netns},
		{"addr", "add", host.String() + "/29", "dev", hostIf},
		{"link", "set", hostIf, "up"},
		{"-n", r.Netns, "addr", "add", reg.String() + "/29", "dev", regIf},
		{"-n", r.Netns, "addr", "add", other.String() + "/29", "dev", regIf},
		{"-n", r.Netns, "link", "set", regIf, "up"},
		{"-n", r.Netns, "link", "set", "lo", "up"},
	} {
		if err := ipCmd(args...); err != nil {
			t.Fatal(err)
		}
	}

	ca, caKey := newCA(t)
	r.CAPEM = pemCert(ca.Raw)
	r.CAFile = r.write(t, "ca.crt", r.CAPEM)
	leaf, leafKey := newLeaf(t, ca, caKey, reg)
	crt := r.write(t, "registry.crt", pemCert(leaf))
	key := r.write(t, "registry.key", pemKey(t, leafKey))
	r.Storage = filepath.Join(r.dir, "storage")

	var authCfg string
	switch auth {
	case Basic:
		h, err := bcrypt.GenerateFromPassword([]byte(r.Password), bcrypt.MinCost)
		if err != nil {
			t.Fatal(err)
		}
		pw := r.write(t, "htpasswd", []byte(r.User+":"+string(h)+"\n"))
		authCfg = fmt.Sprintf("  htpasswd:\n    realm: berth-test\n    path: %s\n", pw)
	case Token:
		signer, signerCert := newSigner(t)
		bundle := r.write(t, "token-signer.crt", pemCert(signerCert.Raw))
		tokenAddr := netip.AddrPortFrom(reg, 5001).String()
		r.Realm = "https://" + tokenAddr + "/token"
		authCfg = fmt.Sprintf("  token:\n    realm: %s\n    service: berth-test\n    issuer: berth-test-issuer\n    rootcertbundle: %s\n",
			r.Realm, bundle)
		cert, err := tls.X509KeyPair(pemCert(leaf), pemKey(t, leafKey))
		if err != nil {
			t.Fatal(err)
		}
		if err := r.serveTokens(tokenAddr, cert, signer, signerCert); err != nil {
			t.Fatal(err)
		}
	}
	cfg := fmt.Sprintf(`version: 0.1
log:
  level: info
  accesslog:
    disabled: true
storage:
  filesystem:
    rootdirectory: %s
  delete:
    enabled: true
http:
  addr: 0.0.0.0:5000
  tls:
    certificate: %s
    key: %s
auth:
%s`, r.Storage, crt, key, authCfg)
	cfgFile := r.write(t, "config.yml", []byte(cfg))
	// nsenter joins the network namespace only (ip netns exec would also
	// make a mount namespace holding every mount of the host).
	cmd := exec.Command("nsenter", "--net="+netnsPath(r.Netns), bin, "serve", cfgFile)
	cmd.Env = []string{"PATH=/usr/bin:/bin", "OTEL_SDK_DISABLED=true", "OTEL_TRACES_EXPORTER=none"}
	cmd.Stdout, cmd.Stderr = lockedWriter{r}, lockedWriter{r}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	r.cmd = cmd
	r.done = make(chan struct{})
	go func() { r.waitErr = cmd.Wait(); close(r.done) }()
	if err := r.waitReady(); err != nil {
		t.Fatalf("registry did not start: %v\n%s", err, r.Log())
	}
	return r
}

// BlobGets counts the authorized GET requests for blob digest
// ("sha256:<hex>") the registry has taken so far: how many times a client
// fetched that blob (a HEAD is no fetch). It reads the registry's log
// line of the authorization, which is written before the blob is served,
// so a fetch whose bytes a client has read is always counted.
func (r *Registry) BlobGets(digest string) int {
	n := 0
	for _, line := range strings.Split(r.Log(), "\n") {
		if !strings.Contains(line, `msg="authorized request"`) || !strings.Contains(line, " http.request.method=GET ") {
			continue
		}
		i := strings.Index(line, "/blobs/"+digest)
		if i < 0 || !strings.Contains(line[:i], "http.request.uri=") {
			continue
		}
		if rest := line[i+len("/blobs/")+len(digest):]; rest != "" && rest[0] != '"' && rest[0] != ' ' {
			continue
		}
		n++
	}
	return n
}

// Run starts a registry with auth outside a test (berth bench), its files
// in a new directory under dir; Close stops it and removes what it made.
// It needs what Start needs (root, the registry binary).
func Run(dir string, auth Auth) (reg *Registry, err error) {
	rn := &runner{dir: dir}
	defer func() {
		if p := recover(); p != nil {
			f, ok := p.(fatal)
			if !ok {
				panic(p)
			}
			rn.close()
			reg, err = nil, f.err
		}
	}()
	reg = Start(rn, auth)
	reg.closer = rn.close
	return reg, nil
}

// Close stops a registry Run started (the namespace goes with it); it is
// idempotent. A registry Start made is stopped by its test's cleanup.
func (r *Registry) Close() {
	if r.closer != nil {
		r.closer()
		r.closer = nil
	}
}

// runner is the TB of Run: Fatal panics with a fatal, which Run recovers
// into its error after running the cleanups registered so far.
type runner struct {
	dir      string
	cleanups []func()
}

type fatal struct{ err error }

func (*runner) Helper()                        {}
func (*runner) Fatal(args ...any)              { panic(fatal{errors.New(fmt.Sprint(args...))}) }
func (*runner) Fatalf(format string, a ...any) { panic(fatal{fmt.Errorf(format, a...)}) }
func (rn *runner) Cleanup(f func())            { rn.cleanups = append(rn.cleanups, f) }
func (rn *runner) TempDir() string {
	d, err := os.MkdirTemp(rn.dir, "regtest-")
	if err != nil {
		rn.Fatal(err)
	}
	rn.Cleanup(func() { os.RemoveAll(d) })
	return d
}

func (rn *runner) close() {
	for i := len(rn.cleanups) - 1; i >= 0; i-- {
		rn.cleanups[i]()
	}
	rn.cleanups = nil
}

// Log is what the registry printed so far.
func (r *Registry) Log() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.log.String()
}

type lockedWriter struct{ r *Registry }

func (w lockedWriter) Write(p []byte) (int, error) {
	w.r.mu.Lock()
	defer w.r.mu.Unlock()
	return w.r.log.Write(p)
}

// Transport is an HTTP transport that trusts the test CA, for the test's
// own pushes.
func (r *Registry) Transport() *http.Transport {
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(r.CAPEM)
	return &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}, Proxy: nil}
}

// waitReady polls /v2/ until the registry answers; a registry that exits
// first fails at once.
func (r *Registry) waitReady() error {
	c := &http.Client{Transport: r.Transport(), Timeout: 2 * time.Second}
	defer c.CloseIdleConnections()
	deadline := time.Now().Add(30 * time.Second)
	for {
		select {
		case <-r.done:
			return fmt.Errorf("registry exited: %v", r.waitErr)
		default:
		}
		resp, err := c.Get("https://" + r.Addr + "/v2/")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusUnauthorized {
				return nil
			}
			err = fmt.Errorf("GET /v2/: %s", resp.Status)
		}
		if time.Now().After(deadline) {
			return err
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (r *Registry) stop() {
	if r.cmd != nil {
		r.cmd.Process.Kill()
		<-r.done
	}
	if r.tokens != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		r.tokens.Shutdown(ctx)
		cancel()
	}
	if r.Netns != "" {
		ipCmd("netns", "del", r.Netns) // takes the veth pair with it
	}
}

func ipCmd(args ...string) error {
	if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
		return fmt.Errorf("ip %s: %v: %s", strings.Join(args, " "), err, out)
	}
	return nil
}

func netnsPath(name string) string { return "/var/run/netns/" + name }

func (r *Registry) write(t TB, name string, b []byte) string {
	t.Helper()
	p := filepath.Join(r.dir, name)
	if err := os.WriteFile(p, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func randHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}

func randInt(n int) int {
	var b [4]byte
	rand.Read(b[:])
	return int(binary.LittleEndian.Uint32(b[:]) % uint32(n))
}

func newCA(t TB) (*x509.Certificate, *ecdsa.PrivateKey) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "berth regtest CA " + randHex(4)},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageCertSign, BasicConstraintsValid: true, IsCA: true}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	ca, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return ca, key
}

func newLeaf(t TB, ca *x509.Certificate, caKey *ecdsa.PrivateKey, ip netip.Addr) ([]byte, *ecdsa.PrivateKey) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: ip.String()},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses: []net.IP{net.IP(ip.AsSlice())}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	return der, key
}

// newSigner makes the token signing key and its self-signed certificate
// (the registry's rootcertbundle).
func newSigner(t TB) (*ecdsa.PrivateKey, *x509.Certificate) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(3), Subject: pkix.Name{CommonName: "berth regtest token signer"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign, BasicConstraintsValid: true, IsCA: true}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	c, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return key, c
}

func pemCert(der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

func pemKey(t TB, k *ecdsa.PrivateKey) []byte {
	t.Helper()
	der, err := x509.MarshalECPrivateKey(k)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der})
}

// serveTokens runs the token server on addr inside the registry's
// namespace: GET /token?service=&scope= with User and Password as basic
// auth gets a token granting each asked scope's actions; anything else
// gets a 401.
func (r *Registry) serveTokens(addr string, cert tls.Certificate, signer *ecdsa.PrivateKey, signerCert *x509.Certificate) error {
	ln, err := listenIn(r.Netns, addr)
	if err != nil {
		return err
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /token", func(w http.ResponseWriter, req *http.Request) {
		u, p, ok := req.BasicAuth()
		if !ok || u != r.User || p != r.Password {
			http.Error(w, `{"errors":[{"code":"UNAUTHORIZED","message":"bad credentials"}]}`, http.StatusUnauthorized)
			return
		}
		type access struct {
			Type    string   `json:"type"`
			Name    string   `json:"name"`
			Actions []string `json:"actions"`
		}
		acc := []access{}
		for _, s := range req.URL.Query()["scope"] {
			parts := strings.Split(s, ":")
			if len(parts) != 3 {
				continue
			}
			acc = append(acc, access{Type: parts[0], Name: parts[1], Actions: strings.Split(parts[2], ",")})
		}
		now := time.Now().Unix()
		claims := map[string]any{"iss": "berth-test-issuer", "sub": u, "aud": req.URL.Query().Get("service"),
			"exp": now + 300, "nbf": now - 10, "iat": now, "jti": randHex(8), "access": acc}
		tok, err := signJWT(signer, signerCert, claims)
		if err != nil {
			http.Error(w, err.Error(), 500)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(map[string]any{"token": tok, "access_token": tok, "expires_in": 300})
	})
	r.tokens = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second,
		TLSConfig: &tls.Config{Certificates: []tls.Certificate{cert}}}
	go r.tokens.ServeTLS(ln, "", "")
	return nil
}

// signJWT signs claims with ES256, the signer's certificate in x5c.
func signJWT(key *ecdsa.PrivateKey, cert *x509.Certificate, claims any) (string, error) {
	hdr, _ := json.Marshal(map[string]any{"alg": "ES256", "typ": "JWT",
		"x5c": []string{base64.StdEncoding.EncodeToString(cert.Raw)}})
	body, err := json.Marshal(claims)
	if err != nil {
		return "", err
	}
	enc := base64.RawURLEncoding
	signing := enc.EncodeToString(hdr) + "." + enc.EncodeToString(body)
	sum := sha256.Sum256([]byte(signing))
	rs, ss, err := ecdsa.Sign(rand.Reader, key, sum[:])
	if err != nil {
		return "", err
	}
	sig := make([]byte, 64)
	rs.FillBytes(sig[:32])
	ss.FillBytes(sig[32:])
	return signing + "." + enc.EncodeToString(sig), nil
}

// listenIn opens a TCP listener in network namespace name: the socket
// belongs to the namespace it was made in, whatever thread serves it.
func listenIn(name, addr string) (net.Listener, error) {
	type res struct {
		ln  net.Listener
		err error
	}
	c := make(chan res, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread ends with the goroutine
		ns, err := netns.GetFromName(name)
		if err != nil {
			c <- res{err: err}
			return
		}
		defer ns.Close()
		if err := netns.Set(ns); err != nil {
			c <- res{err: err}
			return
		}
		ln, err := net.Listen("tcp", addr)
		c <- res{ln, err}
	}()
	out := <-c
	if out.err != nil {
		return nil, errors.Join(errors.New("token server"), out.err)
	}
	return out.ln, nil
}
