// Package fakenet builds the test internet the suites run daemons against:
// a "host" network namespace the daemon runs in and an "internet" one
// holding test servers, joined by one veth pair and linked to nothing
// else, so no packet a test makes leaves the machine.
//
// # Addresses
//
// The host end is 198.51.100.1/24 with its default route via the internet
// end, 198.51.100.2, which routes back to the host. Test servers bind
// addresses of their own on the internet namespace's loopback (AddAddr),
// 203.0.113.0/24 by convention (RFC 5737's TEST-NET-3), and a DNS server
// there (ServeDNS, usually on 198.51.100.2:53) answers their names, so a
// daemon started with `serve --egress-dns 198.51.100.2:53` resolves them
// for its sandboxes. A CA of the test's own (NewCA) issues the servers'
// certificates; `serve --egress-ca-file` makes the daemon's egress proxy
// trust it.
//
// Everything is removed by the test's cleanup: servers closed, both
// namespaces deleted (which takes the veth pair with them).
package fakenet

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"os/exec"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"
	"github.com/vishvananda/netns"
)

// The topology's fixed addresses.
const (
	HostAddr = "198.51.100.1" // the host namespace's end of the veth
	InetAddr = "198.51.100.2" // the internet namespace's end
)

// Topo is one test internet: Host is the namespace for the daemon (and
// for clients that use its loopback listeners), Inet the one for servers.
type Topo struct {
	Host, Inet string
}

// IP runs ip(8) with args, failing the test on an error.
func IP(t testing.TB, args ...string) {
	t.Helper()
	if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
		t.Fatalf("ip %v: %v %s", args, err, out)
	}
}

// New makes the two namespaces (names with a random suffix, so suites
// beside each other do not meet) and the veth pair between them; the
// test's cleanup deletes them.
func New(t testing.TB) *Topo {
	t.Helper()
	b := make([]byte, 3)
	rand.Read(b)
	r := hex.EncodeToString(b)
	n := &Topo{Host: "bt-h-" + r, Inet: "bt-i-" + r}
	IP(t, "netns", "add", n.Host)
	IP(t, "netns", "add", n.Inet)
	t.Cleanup(func() {
		exec.Command("ip", "netns", "del", n.Host).Run()
		exec.Command("ip", "netns", "del", n.Inet).Run()
	})
	IP(t, "link", "add", "bth"+r, "type", "veth", "peer", "name", "bti"+r)
	IP(t, "link", "set", "bth"+r, "netns", n.Host)
	IP(t, "link", "set", "bti"+r, "netns", n.Inet)
	IP(t, "-n", n.Host, "addr", "add", HostAddr+"/24", "dev", "bth"+r)
	IP(t, "-n", n.Host, "link", "set", "bth"+r, "up")
	IP(t, "-n", n.Host, "link", "set", "lo", "up")
	IP(t, "-n", n.Host, "route", "add", "default", "via", InetAddr)
	IP(t, "-n", n.Inet, "addr", "add", InetAddr+"/24", "dev", "bti"+r)
	IP(t, "-n", n.Inet, "link", "set", "bti"+r, "up")
	IP(t, "-n", n.Inet, "link", "set", "lo", "up")
	IP(t, "-n", n.Inet, "route", "add", "default", "via", HostAddr)
	return n
}

// AddAddr gives the internet namespace addr (an IPv4 address, as a /32 on
// its loopback), for a server to bind.
func (n *Topo) AddAddr(t testing.TB, addr string) {
	t.Helper()
	IP(t, "-n", n.Inet, "addr", "add", addr+"/32", "dev", "lo")
}

// InNetns runs fn on a thread moved into network namespace name: sockets
// fn makes stay there after it returns.
func InNetns(name string, fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread ends with the goroutine
		ns, err := netns.GetFromName(name)
		if err != nil {
			errc <- err
			return
		}
		defer ns.Close()
		if err := netns.Set(ns); err != nil {
			errc <- err
			return
		}
		errc <- fn()
	}()
	return <-errc
}

// CA is a certificate authority made for one test.
type CA struct {
	Cert *x509.Certificate
	Key  *ecdsa.PrivateKey
	PEM  []byte // the certificate, for --egress-ca-file or a client's trust
}

// NewCA makes a CA valid for a day.
func NewCA(t testing.TB) *CA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "berth test internet CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageCertSign, BasicConstraintsValid: true, IsCA: true}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return &CA{Cert: cert, Key: key, PEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

// Leaf issues a server certificate for names (DNS names).
func (ca *CA) Leaf(t testing.TB, names ...string) tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: serial, Subject: pkix.Name{CommonName: names[0]},
		DNSNames: names, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, &key.PublicKey, ca.Key)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// ServeHTTPS serves h over TLS with cert on addr (host:port) in the
// internet namespace; the test's cleanup closes it.
func (n *Topo) ServeHTTPS(t testing.TB, addr string, cert tls.Certificate, h http.Handler) {
	t.Helper()
	var ln net.Listener
	if err := InNetns(n.Inet, func() (err error) {
		ln, err = net.Listen("tcp", addr)
		return err
	}); err != nil {
		t.Fatalf("listening on %s in %s: %v", addr, n.Inet, err)
	}
	srv := &http.Server{Handler: h, TLSConfig: &tls.Config{Certificates: []tls.Certificate{cert}}, ReadHeaderTimeout: 5 * time.Second}
	go srv.ServeTLS(ln, "", "")
	t.Cleanup(func() { srv.Close() })
}

// ServeDNS answers, on UDP and TCP addr in the internet namespace, the A
// queries of hosts (name → IPv4 address) and NXDOMAIN for any other name
// (see ServeDNSHere for aaaa); the test's cleanup stops it.
func (n *Topo) ServeDNS(t testing.TB, addr string, hosts map[string]string, aaaa bool) {
	t.Helper()
	var servers []*dns.Server
	if err := InNetns(n.Inet, func() (err error) {
		servers, err = ServeDNSHere(addr, hosts, aaaa)
		return err
	}); err != nil {
		t.Fatalf("DNS on %s in %s: %v", addr, n.Inet, err)
	}
	t.Cleanup(func() {
		for _, s := range servers {
			s.Shutdown()
		}
	})
}

// ServeDNSHere is ServeDNS in the calling goroutine's network namespace;
// the caller shuts the servers down. With aaaa, a name also gets an IPv6
// address its IPv4 redirect does not cover (2001:db8:: and the IPv4
// address's last byte), which berth's resolver must not hand on.
func ServeDNSHere(addr string, hosts map[string]string, aaaa bool) ([]*dns.Server, error) {
	mux := dns.NewServeMux()
	mux.HandleFunc(".", func(w dns.ResponseWriter, req *dns.Msg) {
		m := new(dns.Msg)
		m.SetReply(req)
		q := req.Question[0]
		ip := hosts[strings.TrimSuffix(strings.ToLower(q.Name), ".")]
		switch {
		case ip == "":
			m.Rcode = dns.RcodeNameError
		case q.Qtype == dns.TypeA:
			rr, _ := dns.NewRR(q.Name + " 30 IN A " + ip)
			m.Answer = append(m.Answer, rr)
		case q.Qtype == dns.TypeAAAA && aaaa:
			rr, _ := dns.NewRR(q.Name + " 30 IN AAAA 2001:db8::" + ip[strings.LastIndexByte(ip, '.')+1:])
			m.Answer = append(m.Answer, rr)
		}
		w.WriteMsg(m)
	})
	pc, err := net.ListenPacket("udp", addr)
	if err != nil {
		return nil, err
	}
	tl, err := net.Listen("tcp", addr)
	if err != nil {
		pc.Close()
		return nil, fmt.Errorf("dns on %s: %w", addr, err)
	}
	servers := []*dns.Server{{PacketConn: pc, Handler: mux}, {Listener: tl, Handler: mux}}
	for _, s := range servers {
		go s.ActivateAndServe()
	}
	return servers, nil
}
