package daemon

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/berth-sh/berth/internal/atomicfile"
)

// TLSDir is where the self-signed certificate is kept, under the data dir.
const TLSDir = "tls"

// Files of the self-signed certificate in <data-dir>/tls.
const (
	selfCertFile = "cert.pem"
	selfKeyFile  = "key.pem"
)

// Fingerprint is the pin of a certificate: "sha256:" and the lower-case
// hex SHA-256 of its DER encoding (the leaf's, as the client checks it).
func Fingerprint(der []byte) string {
	sum := sha256.Sum256(der)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// loadTLS returns the TCP listener's certificate: the --tls-cert and
// --tls-key files when given, else the self-signed one in
// <data-dir>/tls, made at the first start (ECDSA P-256, 0600) and reused
// afterwards, so its fingerprint stays the same across restarts.
func loadTLS(cfg *Config) (tls.Certificate, error) {
	switch {
	case cfg.TLSCert != "" && cfg.TLSKey != "":
		c, err := tls.LoadX509KeyPair(cfg.TLSCert, cfg.TLSKey)
		if err != nil {
			return tls.Certificate{}, fmt.Errorf("--tls-cert/--tls-key: %w", err)
		}
		return c, nil
	case cfg.TLSCert != "" || cfg.TLSKey != "":
		return tls.Certificate{}, errors.New("--tls-cert and --tls-key go together")
	}
	dir := filepath.Join(cfg.DataDir, TLSDir)
	certPath, keyPath := filepath.Join(dir, selfCertFile), filepath.Join(dir, selfKeyFile)
	c, err := tls.LoadX509KeyPair(certPath, keyPath)
	if err == nil {
		return c, nil
	}
	if !errors.Is(err, os.ErrNotExist) {
		return tls.Certificate{}, fmt.Errorf("self-signed certificate in %s: %w (remove both files to make a new one)", dir, err)
	}
	if _, cerr := os.Stat(certPath); cerr == nil {
		return tls.Certificate{}, fmt.Errorf("self-signed certificate in %s: %w (remove both files to make a new one)", dir, err)
	}
	certPEM, keyPEM, err := selfSigned(cfg.TLSSANs, time.Now())
	if err != nil {
		return tls.Certificate{}, err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return tls.Certificate{}, err
	}
	// The key first: a cert without its key is never left behind as the
	// only file, and both are written whole (temp file, then rename).
	if err := atomicfile.Write(keyPath, keyPEM, 0o600); err != nil {
		return tls.Certificate{}, err
	}
	if err := atomicfile.Write(certPath, certPEM, 0o600); err != nil {
		return tls.Certificate{}, err
	}
	return tls.X509KeyPair(certPEM, keyPEM)
}

// selfSigned makes a self-signed ECDSA P-256 certificate valid for
// localhost, 127.0.0.1, ::1, this host's name and extra (names or IPs).
func selfSigned(extra []string, now time.Time) (certPEM, keyPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: "berth daemon", Organization: []string{"berth"}},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.AddDate(10, 0, 0),
		KeyUsage:              x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
	}
	names := []string{"localhost", "127.0.0.1", "::1"}
	if h, err := os.Hostname(); err == nil && h != "" {
		names = append(names, h)
	}
	for _, n := range append(names, extra...) {
		if ip := net.ParseIP(n); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else if n != "" {
			tmpl.DNSNames = append(tmpl.DNSNames, n)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, nil, err
	}
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder}), nil
}

// tlsConfig is the TCP listener's TLS configuration: TLS 1.2 at least,
// no client certificates (callers present API keys).
func tlsConfig(cert tls.Certificate) *tls.Config {
	return &tls.Config{
		MinVersion:   tls.VersionTLS12,
		Certificates: []tls.Certificate{cert},
		NextProtos:   []string{"http/1.1"},
	}
}

// isLoopback reports whether a listen address is on loopback only.
func isLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
