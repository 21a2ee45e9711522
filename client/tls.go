package client

import (
	"crypto/sha256"
	"crypto/subtle"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"strings"
)

// TLSFingerprintEnv supplies the pinned fingerprint to the CLI when
// --tls-fingerprint is not given.
const TLSFingerprintEnv = "BERTH_TLS_FINGERPRINT"

// WithTLSFingerprint pins the daemon's TLS certificate: the connection is
// accepted only when the SHA-256 of the leaf certificate's DER is fp
// ("sha256:<64 hex digits>", as `berth serve` prints it; colons between
// the bytes are allowed). The pin replaces chain and name verification, so
// a self-signed certificate is fine. A malformed fp makes New fail.
func WithTLSFingerprint(fp string) Option {
	return func(c *Client) { c.tlsPin, c.tlsPinSet = fp, true }
}

// WithTLSCAFile verifies the daemon's certificate against the PEM CA
// certificates in file (instead of the system's roots).
func WithTLSCAFile(file string) Option {
	return func(c *Client) { c.tlsCA = file }
}

// ParseFingerprint reads a certificate pin: "sha256:" (any case) followed
// by the 32 bytes in hex, with or without a colon between bytes.
func ParseFingerprint(s string) ([sha256.Size]byte, error) {
	var out [sha256.Size]byte
	const prefix = "sha256:"
	if len(s) < len(prefix) || !strings.EqualFold(s[:len(prefix)], prefix) {
		return out, errors.New(`invalid TLS fingerprint: want "sha256:<64 hex digits>"`)
	}
	h := s[len(prefix):]
	if strings.Contains(h, ":") {
		parts := strings.Split(h, ":")
		if len(parts) != sha256.Size {
			return out, errors.New("invalid TLS fingerprint: want 32 colon-separated bytes")
		}
		for _, p := range parts {
			if len(p) != 2 {
				return out, errors.New("invalid TLS fingerprint: want 32 colon-separated bytes")
			}
		}
		h = strings.Join(parts, "")
	}
	if len(h) != 2*sha256.Size {
		return out, fmt.Errorf("invalid TLS fingerprint: want %d hex digits, got %d", 2*sha256.Size, len(h))
	}
	if _, err := hex.Decode(out[:], []byte(h)); err != nil {
		return out, errors.New("invalid TLS fingerprint: not hex")
	}
	return out, nil
}

// FingerprintOf is the pin of a DER certificate, in ParseFingerprint's form.
func FingerprintOf(der []byte) string {
	sum := sha256.Sum256(der)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// FingerprintError is a TLS certificate that does not match the pin.
type FingerprintError struct {
	Got, Want string
}

func (e *FingerprintError) Error() string {
	return fmt.Sprintf("the daemon's TLS certificate %s does not match the pinned %s", e.Got, e.Want)
}

// tlsConfig is the client's TLS configuration from its options (nil: the
// transport's default).
func (c *Client) tlsConfig() (*tls.Config, error) {
	if !c.tlsPinSet && c.tlsCA == "" {
		return nil, nil
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if c.tlsCA != "" {
		pem, err := os.ReadFile(c.tlsCA)
		if err != nil {
			return nil, fmt.Errorf("TLS CA file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("TLS CA file %s: no PEM certificate in it", c.tlsCA)
		}
		cfg.RootCAs = pool
	}
	if c.tlsPinSet {
		want, err := ParseFingerprint(c.tlsPin)
		if err != nil {
			return nil, err
		}
		// The pin is the whole verification: the chain (self-signed or
		// not) and the name are not checked, the leaf's hash is.
		cfg.InsecureSkipVerify = true
		cfg.VerifyConnection = func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) == 0 {
				return errors.New("the daemon sent no TLS certificate")
			}
			got := sha256.Sum256(cs.PeerCertificates[0].Raw)
			if subtle.ConstantTimeCompare(got[:], want[:]) != 1 {
				return &FingerprintError{Got: FingerprintOf(cs.PeerCertificates[0].Raw), Want: "sha256:" + hex.EncodeToString(want[:])}
			}
			return nil
		}
	}
	return cfg, nil
}
