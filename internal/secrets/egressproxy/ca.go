package egressproxy

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/berth-sh/berth/internal/atomicfile"
)

// Files of a CA in a sandbox's host-side state directory.
const (
	CACertFile = "egress-ca.crt"
	CAKeyFile  = "egress-ca.key"
)

const (
	caValidity   = 10 * 365 * 24 * time.Hour
	leafValidity = 7 * 24 * time.Hour
	leafRenew    = 24 * time.Hour // a leaf closer than this to its end is minted anew
	maxLeaves    = 256            // cached leaves per CA; the cache is emptied when full
)

// CA is a sandbox's own certificate authority: ECDSA P-256, made at the
// sandbox's create, its key only on the host (never in the sandbox). It
// signs the leaf certificates the proxy shows for the hosts the sandbox
// connects to; the sandbox trusts it and nothing else trusts it.
type CA struct {
	cert    *x509.Certificate
	key     *ecdsa.PrivateKey
	certPEM []byte

	mu     sync.Mutex
	leaves map[string]*tls.Certificate
}

// NewCA makes a CA named for sandbox id, valid from now.
func NewCA(id string, now time.Time) (*CA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: "berth egress CA " + id, Organization: []string{"berth"}},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(caValidity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &CA{cert: cert, key: key, certPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), leaves: map[string]*tls.Certificate{}}, nil
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		panic("egressproxy: no randomness: " + err.Error())
	}
	return n
}

// CertPEM is the CA's certificate, PEM: what the sandbox is made to trust.
func (c *CA) CertPEM() []byte { return c.certPEM }

// Cert is the CA's certificate.
func (c *CA) Cert() *x509.Certificate { return c.cert }

// Save writes the certificate (0644) and the key (0600) into dir, each by
// a temporary file renamed over, so a crash leaves either file whole.
func (c *CA) Save(dir string) error {
	kd, err := x509.MarshalECPrivateKey(c.key)
	if err != nil {
		return err
	}
	if err := atomicfile.Write(filepath.Join(dir, CAKeyFile), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kd}), 0o600); err != nil {
		return err
	}
	return atomicfile.Write(filepath.Join(dir, CACertFile), c.certPEM, 0o644)
}

// LoadCA reads a CA Save wrote, refusing a key file others may read.
func LoadCA(dir string) (*CA, error) {
	kp := filepath.Join(dir, CAKeyFile)
	fi, err := os.Lstat(kp)
	if err != nil {
		return nil, fmt.Errorf("egress CA: %w", err)
	}
	if !fi.Mode().IsRegular() || fi.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("egress CA key %s: not a regular file of mode 0600", kp)
	}
	kb, err := os.ReadFile(kp)
	if err != nil {
		return nil, fmt.Errorf("egress CA: %w", err)
	}
	cb, err := os.ReadFile(filepath.Join(dir, CACertFile))
	if err != nil {
		return nil, fmt.Errorf("egress CA: %w", err)
	}
	kblk, _ := pem.Decode(kb)
	cblk, _ := pem.Decode(cb)
	if kblk == nil || cblk == nil {
		return nil, errors.New("egress CA: not PEM")
	}
	key, err := x509.ParseECPrivateKey(kblk.Bytes)
	if err != nil {
		return nil, fmt.Errorf("egress CA key: %w", err)
	}
	cert, err := x509.ParseCertificate(cblk.Bytes)
	if err != nil {
		return nil, fmt.Errorf("egress CA cert: %w", err)
	}
	if !key.PublicKey.Equal(cert.PublicKey) {
		return nil, errors.New("egress CA: key does not match certificate")
	}
	return &CA{cert: cert, key: key, certPEM: cb, leaves: map[string]*tls.Certificate{}}, nil
}

// Leaf is a certificate for host signed by the CA, cached while it has
// more than leafRenew to live.
func (c *CA) Leaf(host string, now time.Time) (*tls.Certificate, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if l, ok := c.leaves[host]; ok && now.Add(leafRenew).Before(l.Leaf.NotAfter) {
		return l, nil
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	end := now.Add(leafValidity)
	if end.After(c.cert.NotAfter) {
		end = c.cert.NotAfter
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: host},
		DNSNames:     []string{host},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     end,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, c.cert, &key.PublicKey, c.key)
	if err != nil {
		return nil, err
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	l := &tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}
	if len(c.leaves) >= maxLeaves {
		clear(c.leaves)
	}
	c.leaves[host] = l
	return l, nil
}
