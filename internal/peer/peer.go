// Package peer is the channel between daemons that share one store: when a
// request names a sandbox another daemon runs, the daemon that took it
// forwards it to the owner's peer listener over mutual TLS, so several
// daemons can sit behind one load balancer and any of them answers any
// request.
//
// Both ends are authenticated by certificates of one peer CA, a file every
// daemon of the shared store is given (`serve --peer-ca`), as they are
// given the same secrets master key. Each daemon issues itself a
// short-lived leaf from that CA at start and again before half its life
// has passed; a leaf names its daemon's node in a URI SAN
// ("berth-node:NODE"). A forwarding daemon checks that the listener it
// reached holds the leaf of the node the store says runs the sandbox; a
// peer listener takes only connections whose client leaf is of the CA,
// and trusts the forwarded client address only on them.
//
// crypto/tls and crypto/x509 do the work; what is written here is the
// issuing and the node check, which no library knows.
package peer

import (
	"crypto"
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
	"net/url"
	"os"
	"sync"
	"time"
)

// leafLife is how long a daemon's own certificate is valid; it is issued
// again when half of it has passed.
const leafLife = 24 * time.Hour

// uriScheme names a leaf's node: berth-node:NODE.
const uriScheme = "berth-node"

// ServerName is the name every peer leaf carries and every peer dial asks
// for; the node is checked separately (VerifyConnection).
const ServerName = "berth-peer"

// CA is the peer CA: its certificate and the key that signs leaves.
type CA struct {
	cert *x509.Certificate
	key  crypto.Signer
	pool *x509.CertPool
}

// LoadOrCreateCA reads the peer CA from path (PEM: its certificate and
// its private key), or makes one there (mode 0600) when the file does
// not exist; created says which. A file readable by others is tightened.
func LoadOrCreateCA(path string) (ca *CA, created bool, err error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		ca, pemBytes, err := newCA()
		if err != nil {
			return nil, false, err
		}
		// Exclusive: of two daemons starting at once on one shared file,
		// one makes the CA and the other reads it.
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if errors.Is(err, os.ErrExist) {
			return LoadOrCreateCA(path)
		}
		if err != nil {
			return nil, false, fmt.Errorf("peer CA: %w", err)
		}
		_, werr := f.Write(pemBytes)
		if err := errors.Join(werr, f.Sync(), f.Close()); err != nil {
			os.Remove(path)
			return nil, false, fmt.Errorf("peer CA: write %s: %w", path, err)
		}
		return ca, true, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("peer CA: %w", err)
	}
	if fi, err := os.Stat(path); err == nil && fi.Mode().Perm()&0o077 != 0 {
		if err := os.Chmod(path, 0o600); err != nil {
			return nil, false, fmt.Errorf("peer CA: %s is readable by others and cannot be tightened: %w", path, err)
		}
	}
	ca, err = ParseCA(b)
	if err != nil {
		return nil, false, fmt.Errorf("peer CA %s: %w", path, err)
	}
	return ca, false, nil
}

// ParseCA reads a CA certificate and its key from PEM.
func ParseCA(b []byte) (*CA, error) {
	var cert *x509.Certificate
	var key crypto.Signer
	for {
		var blk *pem.Block
		blk, b = pem.Decode(b)
		if blk == nil {
			break
		}
		switch blk.Type {
		case "CERTIFICATE":
			c, err := x509.ParseCertificate(blk.Bytes)
			if err != nil {
				return nil, fmt.Errorf("certificate: %w", err)
			}
			cert = c
		case "PRIVATE KEY":
			k, err := x509.ParsePKCS8PrivateKey(blk.Bytes)
			if err != nil {
				return nil, fmt.Errorf("private key: %w", err)
			}
			s, ok := k.(crypto.Signer)
			if !ok {
				return nil, errors.New("private key: not a signing key")
			}
			key = s
		}
	}
	if cert == nil || key == nil {
		return nil, errors.New("want a CERTIFICATE and a PRIVATE KEY block")
	}
	if !cert.IsCA {
		return nil, errors.New("the certificate is not a CA")
	}
	if !publicKeysEqual(cert.PublicKey, key.Public()) {
		return nil, errors.New("the private key is not the certificate's")
	}
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return &CA{cert: cert, key: key, pool: pool}, nil
}

func publicKeysEqual(a, b crypto.PublicKey) bool {
	ak, ok := a.(interface{ Equal(crypto.PublicKey) bool })
	return ok && ak.Equal(b)
}

func newCA() (*CA, []byte, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	sn, err := serial()
	if err != nil {
		return nil, nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          sn,
		Subject:               pkix.Name{CommonName: "berth peer CA"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.AddDate(10, 0, 0),
		IsCA:                  true,
		BasicConstraintsValid: true,
		MaxPathLenZero:        true,
		KeyUsage:              x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, nil, err
	}
	pk, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, nil, err
	}
	out := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	out = append(out, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: pk})...)
	ca, err := ParseCA(out)
	return ca, out, err
}

func serial() (*big.Int, error) {
	return rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
}

// Issue makes a leaf for node, valid for life from now (an hour's skew
// allowed before), usable as a server and as a client certificate.
func (ca *CA) Issue(node string, life time.Duration) (*tls.Certificate, error) {
	if node == "" {
		return nil, errors.New("peer: a leaf needs a node name")
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	sn, err := serial()
	if err != nil {
		return nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: sn,
		Subject:      pkix.Name{CommonName: node},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(life),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		DNSNames:     []string{ServerName},
		URIs:         []*url.URL{{Scheme: uriScheme, Opaque: node}},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, key.Public(), ca.key)
	if err != nil {
		return nil, err
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}, nil
}

// NodeOf returns the node a verified leaf names.
func NodeOf(leaf *x509.Certificate) (string, bool) {
	for _, u := range leaf.URIs {
		if u.Scheme == uriScheme && u.Opaque != "" {
			return u.Opaque, true
		}
	}
	return "", false
}

// Identity is this daemon's side of the channel: its node and a leaf
// renewed before half its life has passed.
type Identity struct {
	ca   *CA
	node string
	life time.Duration

	mu   sync.Mutex
	leaf *tls.Certificate
}

// NewIdentity issues node's first leaf.
func NewIdentity(ca *CA, node string) (*Identity, error) {
	id := &Identity{ca: ca, node: node, life: leafLife}
	if _, err := id.cert(); err != nil {
		return nil, err
	}
	return id, nil
}

// Node is the identity's node.
func (id *Identity) Node() string { return id.node }

func (id *Identity) cert() (*tls.Certificate, error) {
	id.mu.Lock()
	defer id.mu.Unlock()
	if id.leaf != nil && time.Until(id.leaf.Leaf.NotAfter) > id.life/2 {
		return id.leaf, nil
	}
	c, err := id.ca.Issue(id.node, id.life)
	if err != nil {
		return nil, err
	}
	id.leaf = c
	return c, nil
}

// ServerConfig is the peer listener's TLS: TLS 1.3, a client leaf of the
// CA required.
func (id *Identity) ServerConfig() *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS13,
		ClientAuth: tls.RequireAndVerifyClientCert,
		ClientCAs:  id.ca.pool,
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
			return id.cert()
		},
		VerifyConnection: func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) == 0 {
				return errors.New("peer: no client certificate")
			}
			if _, ok := NodeOf(cs.PeerCertificates[0]); !ok {
				return errors.New("peer: the client certificate names no node")
			}
			return nil
		},
	}
}

// ClientConfig is the TLS of a dial to node's peer listener: the server's
// leaf must be of the CA and name node (an address the store gave for one
// node and another daemon answering there is refused).
func (id *Identity) ClientConfig(node string) *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS13,
		RootCAs:    id.ca.pool,
		ServerName: ServerName,
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			return id.cert()
		},
		VerifyConnection: func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) == 0 {
				return errors.New("peer: no server certificate")
			}
			got, ok := NodeOf(cs.PeerCertificates[0])
			if !ok || got != node {
				return fmt.Errorf("peer: the listener answering for node %s is node %q", node, got)
			}
			return nil
		},
	}
}

// ClientNode returns the node of a peer connection's verified client
// leaf, for a request that arrived on a peer listener.
func ClientNode(cs *tls.ConnectionState) (string, bool) {
	if cs == nil || len(cs.VerifiedChains) == 0 || len(cs.PeerCertificates) == 0 {
		return "", false
	}
	return NodeOf(cs.PeerCertificates[0])
}
