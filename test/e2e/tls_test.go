package e2e

import (
	"bufio"
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"io"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/berth-sh/berth/client"
)

var fingerprintLine = regexp.MustCompile(`TLS fingerprint: (sha256:[0-9a-f]{64})`)

// printedFingerprint is the fingerprint the daemon printed at its last start.
func printedFingerprint(t *testing.T, d *daemon) string {
	t.Helper()
	m := fingerprintLine.FindAllStringSubmatch(d.logs.String(), -1)
	if len(m) == 0 {
		t.Fatalf("the daemon printed no TLS fingerprint:\n%s", tail(d.logs.String(), 3000))
	}
	return m[len(m)-1][1]
}

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// TestTLSListener: --listen serves TLS only. A plain HTTP request to it
// gets no HTTP answer at all; the SDK and the CLI with the printed pin
// connect and with a wrong one refuse; the self-signed certificate is kept
// (0600) and the same fingerprint comes back after a restart; certificate
// and key files made from a CA of the test's own work with --tls-ca.
func TestTLSListener(t *testing.T) {
	parallel(t)
	addr := freeAddr(t)
	d := startDaemonWith(t, "--listen", addr)
	fp := printedFingerprint(t, d)
	keyb, err := os.ReadFile(filepath.Join(d.dataDir, "admin.key"))
	if err != nil {
		t.Fatal(err)
	}
	key := strings.TrimSpace(string(keyb))
	for _, f := range []string{"cert.pem", "key.pem"} {
		st, err := os.Stat(filepath.Join(d.dataDir, "tls", f))
		if err != nil || st.Mode().Perm() != 0o600 {
			t.Fatalf("tls/%s: %v %v", f, err, st)
		}
	}
	ctx := context.Background()
	c, err := client.New("https://"+addr, key, client.WithTLSFingerprint(fp))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	v, err := c.Version(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if v.TLSFingerprint != fp {
		t.Fatalf("GET /v1/version says %q, the daemon printed %q", v.TLSFingerprint, fp)
	}
	if _, err := c.ListSandboxes(ctx, false); err != nil {
		t.Fatalf("an authenticated call over TLS: %v", err)
	}

	// Plain HTTP to the TLS port: never an HTTP answer.
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	conn.SetDeadline(time.Now().Add(15 * time.Second))
	if _, err := io.WriteString(conn, "GET /v1/sandboxes HTTP/1.1\r\nHost: berth\r\nAuthorization: Bearer "+key+"\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(conn)
	conn.Close()
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("a plain request to the TLS port was left hanging (read %q)", got)
	}
	if bytes.Contains(got, []byte("HTTP/")) || bytes.Contains(got, []byte("{")) {
		t.Fatalf("a plain HTTP request to the TLS port got an HTTP answer: %q", got)
	}

	// A wrong pin: the SDK refuses with the mismatch, the CLI too.
	wrong := "sha256:" + strings.Repeat("0", 64)
	bad, _ := client.New("https://"+addr, key, client.WithTLSFingerprint(wrong))
	var fe *client.FingerprintError
	if _, err := bad.ListSandboxes(ctx, false); !errors.As(err, &fe) || fe.Got != fp {
		t.Fatalf("wrong pin: %v", err)
	}
	if out, errOut, code := d.cli("--host", "https://"+addr, "--api-key", key, "--tls-fingerprint", fp, "ls"); code != 0 {
		t.Fatalf("CLI with the pin: %d %s %s", code, out, errOut)
	}
	if _, errOut, code := d.cli("--host", "https://"+addr, "--api-key", key, "--tls-fingerprint", wrong, "ls"); code == 0 || !strings.Contains(errOut, "does not match the pinned") {
		t.Fatalf("CLI with a wrong pin: exit %d, %s", code, errOut)
	}
	// No pin and no CA: the self-signed certificate is not trusted.
	if _, _, code := d.cli("--host", "https://"+addr, "--api-key", key, "ls"); code == 0 {
		t.Fatal("the CLI trusted the self-signed certificate without a pin")
	}

	// Restart: the same certificate.
	d.stop()
	d.startWith("--listen", addr)
	if fp2 := printedFingerprint(t, d); fp2 != fp {
		t.Fatalf("fingerprint changed across a restart: %s then %s", fp, fp2)
	}
	if _, err := c.ListSandboxes(ctx, false); err != nil {
		t.Fatalf("the old pin after a restart: %v", err)
	}

	// Certificate files from the test's own CA; the CLI verifies with --tls-ca.
	certFile, keyFile, caFile := makeCA(t, t.TempDir())
	d.stop()
	d.startWith("--listen", addr, "--tls-cert", certFile, "--tls-key", keyFile)
	leafPEM, _ := os.ReadFile(certFile)
	blk, _ := pem.Decode(leafPEM)
	if fp3 := printedFingerprint(t, d); fp3 != client.FingerprintOf(blk.Bytes) {
		t.Fatalf("printed %s, the given certificate is %s", fp3, client.FingerprintOf(blk.Bytes))
	}
	if out, errOut, code := d.cli("--host", "https://"+addr, "--api-key", key, "--tls-ca", caFile, "ls"); code != 0 {
		t.Fatalf("CLI with --tls-ca: %d %s %s", code, out, errOut)
	}
	if _, _, code := d.cli("--host", "https://"+addr, "--api-key", key, "--tls-fingerprint", fp, "ls"); code == 0 {
		t.Fatal("the old self-signed pin was accepted for the new certificate")
	}
}

// makeCA writes a CA and a leaf for 127.0.0.1 and names it signed: leaf
// cert, key, CA.
func makeCA(t *testing.T, dir string, names ...string) (certFile, keyFile, caFile string) {
	t.Helper()
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	ca := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "berth e2e CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true,
		KeyUsage: x509.KeyUsageCertSign, BasicConstraintsValid: true}
	caDER, err := x509.CreateCertificate(rand.Reader, ca, ca, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ = x509.ParseCertificate(caDER)
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	leaf := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "berth e2e leaf"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, DNSNames: names}
	der, err := x509.CreateCertificate(rand.Reader, leaf, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	kder, _ := x509.MarshalPKCS8PrivateKey(key)
	certFile, keyFile, caFile = filepath.Join(dir, "leaf.pem"), filepath.Join(dir, "leaf.key"), filepath.Join(dir, "ca.pem")
	for f, b := range map[string]*pem.Block{certFile: {Type: "CERTIFICATE", Bytes: der},
		keyFile: {Type: "PRIVATE KEY", Bytes: kder}, caFile: {Type: "CERTIFICATE", Bytes: caDER}} {
		if err := os.WriteFile(f, pem.EncodeToMemory(b), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return certFile, keyFile, caFile
}

// TestTLSListenerEdge: the TLS listener keeps the edge's guards: the
// per-client connection cap (the next connection is closed at accept, its
// handshake fails) and the header deadline (a client that never sends its
// ClientHello is cut off at --http-read-header-timeout).
func TestTLSListenerEdge(t *testing.T) {
	parallel(t)
	addr := freeAddr(t)
	d := startDaemonWith(t, "--listen", addr, "--max-conns-per-client", "2", "--http-read-header-timeout", "1s")
	fp := printedFingerprint(t, d)
	pin, err := client.ParseFingerprint(fp)
	if err != nil {
		t.Fatal(err)
	}
	cfg := &tls.Config{InsecureSkipVerify: true, VerifyConnection: func(cs tls.ConnectionState) error {
		if sha256.Sum256(cs.PeerCertificates[0].Raw) != pin {
			return errors.New("not the daemon's certificate")
		}
		return nil
	}}
	var open []*tls.Conn
	defer func() {
		for _, c := range open {
			c.Close()
		}
	}()
	// The two within the cap carry an authenticated request each: an
	// unauthenticated connection gives its slot up to a new one (the
	// edge's rule against slow clients, TestEdgeConnectionCap).
	key, err := os.ReadFile(d.dataDir + "/admin.key")
	if err != nil {
		t.Fatal(err)
	}
	authed := "GET /v1/version HTTP/1.1\r\nHost: berth\r\nAuthorization: Bearer " + strings.TrimSpace(string(key)) + "\r\n\r\n"
	for i := 0; i < 2; i++ {
		c, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr, cfg)
		if err != nil {
			t.Fatalf("connection %d within the cap: %v", i, err)
		}
		open = append(open, c)
		if resp, _, err := sendOn(c, bufio.NewReader(c), authed); err != nil || resp.StatusCode != 200 {
			t.Fatalf("connection %d with a key: %v %v", i, resp, err)
		}
	}
	if c, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr, cfg); err == nil {
		c.Close()
		t.Fatal("a third connection from one client passed a cap of 2")
	}
	for _, c := range open {
		c.Close()
	}
	open = nil
	// The header deadline: a silent TCP connection is closed within it.
	var raw net.Conn
	for i := 0; ; i++ { // the closed ones may take a moment to be released
		raw, err = net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		raw.SetReadDeadline(time.Now().Add(10 * time.Second))
		start := time.Now()
		_, err = raw.Read(make([]byte, 1))
		took := time.Since(start)
		raw.Close()
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			t.Fatal("a silent connection outlived the header deadline by 9s")
		}
		if took >= 500*time.Millisecond || i == 5 {
			if took < 500*time.Millisecond || took > 5*time.Second {
				t.Fatalf("a silent connection was closed after %v, want about 1s", took)
			}
			break
		}
		time.Sleep(200 * time.Millisecond) // closed at once: still counted against the cap
	}
}
