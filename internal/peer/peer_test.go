package peer

import (
	"crypto/tls"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// handshake runs a TLS handshake between a listener of server and a dial
// from client expecting node want, and returns the node the server saw
// and the dial's error.
func handshake(t *testing.T, server, client *Identity, want string) (string, error) {
	t.Helper()
	ln, err := tls.Listen("tcp", "127.0.0.1:0", server.ServerConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	seen := make(chan string, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			seen <- ""
			return
		}
		defer c.Close()
		tc := c.(*tls.Conn)
		tc.SetDeadline(time.Now().Add(10 * time.Second))
		if tc.Handshake() != nil {
			seen <- ""
			return
		}
		cs := tc.ConnectionState()
		n, _ := ClientNode(&cs)
		seen <- n
	}()
	conn, err := net.DialTimeout("tcp", ln.Addr().String(), 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	tc := tls.Client(conn, client.ClientConfig(want))
	tc.SetDeadline(time.Now().Add(10 * time.Second))
	err = tc.Handshake()
	if err == nil {
		// TLS 1.3: the server's verdict on the client's leaf arrives
		// after the client's handshake; a read shows it.
		tc.Write([]byte("x"))
		var b [1]byte
		tc.Read(b[:])
	}
	tc.Close()
	return <-seen, err
}

func TestPeerChannel(t *testing.T) {
	dir := t.TempDir()
	ca, created, err := LoadOrCreateCA(filepath.Join(dir, "ca.pem"))
	if err != nil || !created {
		t.Fatalf("new CA: %v %v", created, err)
	}
	again, created, err := LoadOrCreateCA(filepath.Join(dir, "ca.pem"))
	if err != nil || created || !again.cert.Equal(ca.cert) {
		t.Fatalf("the same CA read back: %v %v", created, err)
	}
	if fi, _ := os.Stat(filepath.Join(dir, "ca.pem")); fi.Mode().Perm() != 0o600 {
		t.Fatalf("CA file mode %v", fi.Mode())
	}
	a, _ := NewIdentity(ca, "node-a")
	b, _ := NewIdentity(again, "node-b")

	// b dials a expecting a: both sides verified, the server sees b.
	if seen, err := handshake(t, a, b, "node-a"); err != nil || seen != "node-b" {
		t.Fatalf("peers of one CA: %v, server saw %q", err, seen)
	}
	// b dials the address the store gave for node-c, and node-a answers.
	if _, err := handshake(t, a, b, "node-c"); err == nil || !strings.Contains(err.Error(), "node-c") {
		t.Fatalf("another node answering: %v", err)
	}
	// A daemon of another CA: refused both ways.
	other, _, err := LoadOrCreateCA(filepath.Join(dir, "other.pem"))
	if err != nil {
		t.Fatal(err)
	}
	x, _ := NewIdentity(other, "node-a")
	if seen, err := handshake(t, a, x, "node-a"); err == nil || seen != "" {
		t.Fatalf("a client of another CA: %v, server saw %q", err, seen)
	}
	if _, err := handshake(t, x, b, "node-a"); err == nil {
		t.Fatal("a server of another CA was trusted")
	}
}

// A leaf is issued again once half its life has passed.
func TestLeafRenewed(t *testing.T) {
	ca, _, err := LoadOrCreateCA(filepath.Join(t.TempDir(), "ca.pem"))
	if err != nil {
		t.Fatal(err)
	}
	id, err := NewIdentity(ca, "n")
	if err != nil {
		t.Fatal(err)
	}
	first, _ := id.cert()
	if again, _ := id.cert(); again != first {
		t.Fatal("a fresh leaf was replaced")
	}
	id.life = 2 * time.Hour
	id.leaf.Leaf.NotAfter = time.Now().Add(30 * time.Minute)
	if renewed, _ := id.cert(); renewed == first {
		t.Fatal("a leaf past half its life was kept")
	}
}

func TestParseCARefuses(t *testing.T) {
	for name, b := range map[string]string{"empty": "", "garbage": "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n"} {
		if _, err := ParseCA([]byte(b)); err == nil {
			t.Errorf("%s: parsed", name)
		}
	}
}
