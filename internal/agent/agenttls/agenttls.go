// Package agenttls is the agent's channel where it crosses a network (a
// Kubernetes pod reached at its IP): TCP under mutual TLS 1.3 in which each
// side accepts exactly one certificate, the other's, pinned by its DER
// bytes. A sandbox's Identity is two self-signed key pairs made by the
// daemon for that sandbox alone: the agent's (whose key is handed only to
// that sandbox) and the daemon's (whose key never leaves the daemon's
// side). A pod that took another's IP, or any other listener at the
// address, holds neither the agent key of the sandbox the daemon meant nor
// its pin, so the handshake fails on the daemon's side; a caller without
// the daemon key of that sandbox is refused by the agent.
//
// The daemon dials with package agent's TLSDialer; the unix-socket
// channel of the local backend (agent.SocketDialer) is separate and
// unchanged.
package agenttls

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"os"
	"path/filepath"
	"time"
)

// ErrNotPinned: the peer's certificate is not the one pinned for it. The
// agent client's TLSDialer reports every failed handshake as
// agent.ErrPeerRefused.
var ErrNotPinned = errors.New("certificate not pinned")

// File names of an identity's parts, in a Kubernetes Secret and in the
// directory the agent reads (--tls-dir). DaemonKey is never given to the
// agent.
const (
	AgentCert  = "agent.crt"
	AgentKey   = "agent.key"
	DaemonCert = "daemon.crt"
	DaemonKey  = "daemon.key"
)

// AgentFiles are the parts the agent needs: its own pair and the daemon's
// certificate.
var AgentFiles = []string{AgentCert, AgentKey, DaemonCert}

// Identity is one sandbox's two key pairs, PEM encoded by file name.
type Identity map[string][]byte

// validity: the identity lives as long as its sandbox, which may be
// persistent for years; the pin, not the date, is what is checked.
const validity = 20 * 365 * 24 * time.Hour

// NewIdentity makes a fresh identity for sandbox id.
func NewIdentity(id string) (Identity, error) {
	out := Identity{}
	for _, p := range []struct{ cert, key, cn string }{
		{AgentCert, AgentKey, "berth-agent " + id},
		{DaemonCert, DaemonKey, "berth-daemon " + id},
	} {
		cert, key, err := selfSigned(p.cn)
		if err != nil {
			return nil, err
		}
		out[p.cert], out[p.key] = cert, key
	}
	return out, nil
}

func selfSigned(cn string) (certPEM, keyPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: cn},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(validity),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, nil, err
	}
	kd, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kd}), nil
}

// Validate checks that every part is present and each key matches its
// certificate.
func (id Identity) Validate() error {
	for _, p := range [][2]string{{AgentCert, AgentKey}, {DaemonCert, DaemonKey}} {
		if _, err := tls.X509KeyPair(id[p[0]], id[p[1]]); err != nil {
			return fmt.Errorf("agent identity: %s/%s: %w", p[0], p[1], err)
		}
	}
	return nil
}

// certDER returns the DER of the one certificate in PEM data.
func certDER(data []byte) ([]byte, error) {
	b, rest := pem.Decode(data)
	if b == nil || b.Type != "CERTIFICATE" || len(bytes.TrimSpace(rest)) != 0 {
		return nil, errors.New("want exactly one PEM certificate")
	}
	if _, err := x509.ParseCertificate(b.Bytes); err != nil {
		return nil, err
	}
	return b.Bytes, nil
}

// pinned returns a VerifyPeerCertificate that accepts exactly one leaf,
// the certificate want (DER), and no chain beyond it.
func pinned(want []byte, who string) func([][]byte, [][]*x509.Certificate) error {
	sum := sha256.Sum256(want)
	return func(raw [][]byte, _ [][]*x509.Certificate) error {
		if len(raw) != 1 {
			return fmt.Errorf("%w: %s presented %d certificates, want its one pinned certificate", ErrNotPinned, who, len(raw))
		}
		got := sha256.Sum256(raw[0])
		if subtle.ConstantTimeCompare(got[:], sum[:]) != 1 {
			return fmt.Errorf("%w: %s presented a certificate that is not the one pinned for it", ErrNotPinned, who)
		}
		return nil
	}
}

// ServerConfig is the agent's side: it presents its own pair and accepts
// only the daemon certificate daemonCert.
func ServerConfig(agentCert, agentKey, daemonCert []byte) (*tls.Config, error) {
	pair, err := tls.X509KeyPair(agentCert, agentKey)
	if err != nil {
		return nil, fmt.Errorf("agent key pair: %w", err)
	}
	want, err := certDER(daemonCert)
	if err != nil {
		return nil, fmt.Errorf("daemon certificate: %w", err)
	}
	return &tls.Config{
		MinVersion:   tls.VersionTLS13,
		Certificates: []tls.Certificate{pair},
		// The pin replaces chain verification: there is no CA.
		ClientAuth:            tls.RequireAnyClientCert,
		VerifyPeerCertificate: pinned(want, "the caller"),
	}, nil
}

// LoadServerConfig reads ServerConfig's parts from dir (AgentFiles).
func LoadServerConfig(dir string) (*tls.Config, error) {
	var parts [3][]byte
	for i, name := range AgentFiles {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			return nil, err
		}
		parts[i] = b
	}
	return ServerConfig(parts[0], parts[1], parts[2])
}

// ClientConfig is the daemon's side of identity id: it presents the
// daemon pair and accepts only the agent certificate.
func (id Identity) ClientConfig() (*tls.Config, error) {
	pair, err := tls.X509KeyPair(id[DaemonCert], id[DaemonKey])
	if err != nil {
		return nil, fmt.Errorf("daemon key pair: %w", err)
	}
	want, err := certDER(id[AgentCert])
	if err != nil {
		return nil, fmt.Errorf("agent certificate: %w", err)
	}
	return &tls.Config{
		MinVersion:   tls.VersionTLS13,
		Certificates: []tls.Certificate{pair},
		// No name to check: the address is the pod's, which anyone may
		// come to hold; the pinned certificate is the identity.
		InsecureSkipVerify:    true,
		VerifyPeerCertificate: pinned(want, "the listener"),
	}, nil
}
