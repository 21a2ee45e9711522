package daemon

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

// TestSelfSignedPersisted: the self-signed certificate is made once, 0600,
// with the SANs asked for, and the same one (same fingerprint) is loaded
// at the next start.
func TestSelfSignedPersisted(t *testing.T) {
	cfg := &Config{DataDir: t.TempDir(), TLSSANs: []string{"berth.example", "192.0.2.7"}}
	c1, err := loadTLS(cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{selfCertFile, selfKeyFile} {
		st, err := os.Stat(filepath.Join(cfg.DataDir, TLSDir, f))
		if err != nil {
			t.Fatal(err)
		}
		if st.Mode().Perm() != 0o600 {
			t.Errorf("%s: mode %v, want 0600", f, st.Mode().Perm())
		}
	}
	leaf, err := x509.ParseCertificate(c1.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := leaf.PublicKey.(*ecdsa.PublicKey); !ok {
		t.Errorf("key %T, want ECDSA", leaf.PublicKey)
	}
	for _, n := range []string{"localhost", "berth.example"} {
		if !slices.Contains(leaf.DNSNames, n) {
			t.Errorf("SAN %s missing: %v", n, leaf.DNSNames)
		}
	}
	for _, ip := range []string{"127.0.0.1", "::1", "192.0.2.7"} {
		if err := leaf.VerifyHostname(ip); err != nil {
			t.Errorf("SAN %s: %v", ip, err)
		}
	}
	c2, err := loadTLS(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if f1, f2 := Fingerprint(c1.Certificate[0]), Fingerprint(c2.Certificate[0]); f1 != f2 {
		t.Fatalf("fingerprint changed across loads: %s then %s", f1, f2)
	}
	// A damaged certificate is an error, never silently replaced (the
	// pins of every client would break).
	if err := os.WriteFile(filepath.Join(cfg.DataDir, TLSDir, selfCertFile), []byte("junk"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := loadTLS(cfg); err == nil {
		t.Fatal("a damaged certificate was accepted")
	}
}

// TestTLSFiles: --tls-cert/--tls-key are loaded as given (a CA and a leaf
// made here), one without the other is refused.
func TestTLSFiles(t *testing.T) {
	dir := t.TempDir()
	certFile, keyFile, _ := MakeTestCA(t, dir)
	c, err := loadTLS(&Config{DataDir: dir, TLSCert: certFile, TLSKey: keyFile})
	if err != nil {
		t.Fatal(err)
	}
	leaf, _ := x509.ParseCertificate(c.Certificate[0])
	if leaf.Subject.CommonName != "berth test leaf" {
		t.Fatalf("loaded %q", leaf.Subject.CommonName)
	}
	if _, err := os.Stat(filepath.Join(dir, TLSDir)); !os.IsNotExist(err) {
		t.Fatalf("a self-signed certificate was made beside the given one: %v", err)
	}
	if _, err := loadTLS(&Config{DataDir: dir, TLSCert: certFile}); err == nil {
		t.Fatal("--tls-cert without --tls-key accepted")
	}
	if _, err := loadTLS(&Config{DataDir: dir, TLSCert: keyFile, TLSKey: certFile}); err == nil {
		t.Fatal("swapped cert and key accepted")
	}
}

func TestIsLoopback(t *testing.T) {
	for addr, want := range map[string]bool{"127.0.0.1:1": true, "[::1]:1": true, "localhost:1": true,
		"0.0.0.0:1": false, ":1": false, "192.0.2.1:1": false, "bad": false} {
		if got := isLoopback(addr); got != want {
			t.Errorf("isLoopback(%q) = %v", addr, got)
		}
	}
}

// MakeTestCA writes a CA and a leaf it signed for 127.0.0.1/localhost into
// dir: leaf cert, leaf key and CA cert files (PEM).
func MakeTestCA(t *testing.T, dir string) (certFile, keyFile, caFile string) {
	t.Helper()
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	ca := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "berth test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true,
		KeyUsage: x509.KeyUsageCertSign, BasicConstraintsValid: true}
	caDER, err := x509.CreateCertificate(rand.Reader, ca, ca, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ = x509.ParseCertificate(caDER)
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	leaf := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "berth test leaf"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames: []string{"localhost"}, IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}}
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
