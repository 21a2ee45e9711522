package agenttls_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/berth-sh/berth/internal/agent"
	"github.com/berth-sh/berth/internal/agent/agentd"
	"github.com/berth-sh/berth/internal/agent/agenttls"
)

// serveAgent runs a real agent on loopback under id's server side and
// returns its address.
func serveAgent(t *testing.T, id agenttls.Identity) string {
	t.Helper()
	conf, err := agenttls.ServerConfig(id[agenttls.AgentCert], id[agenttls.AgentKey], id[agenttls.DaemonCert])
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- agentd.Serve(ctx, agentd.Config{TCP: tls.NewListener(ln, conf), Root: t.TempDir()}) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("agent: %v", err)
		}
	})
	return ln.Addr().String()
}

func newIdentity(t *testing.T, sb string) agenttls.Identity {
	t.Helper()
	id, err := agenttls.NewIdentity(sb)
	if err != nil {
		t.Fatal(err)
	}
	if err := id.Validate(); err != nil {
		t.Fatal(err)
	}
	return id
}

func client(t *testing.T, id agenttls.Identity, addr string, refused *atomic.Int32) *agent.Client {
	t.Helper()
	conf, err := id.ClientConfig()
	if err != nil {
		t.Fatal(err)
	}
	d := &agent.TLSDialer{Addr: func(context.Context) (string, error) { return addr, nil }, Config: conf,
		Refused: func(error) { refused.Add(1) }}
	return agent.NewClientDialer(d.Dial)
}

// The daemon reaches its own agent; exec and files work over the channel.
func TestMutualTLS(t *testing.T) {
	id := newIdentity(t, "sb1")
	addr := serveAgent(t, id)
	var refused atomic.Int32
	c := client(t, id, addr, &refused)
	if _, err := c.Ping(t.Context()); err != nil {
		t.Fatalf("ping over mutual TLS: %v", err)
	}
	var out bytes.Buffer
	ex, err := c.Exec(t.Context(), agent.ExecRequest{Argv: []string{"/bin/sh", "-c", "echo hi; exit 3"}, Env: []string{"PATH=/usr/bin:/bin"}},
		agent.ExecIO{Stdout: &out})
	if err != nil || ex.Code != 3 || out.String() != "hi\n" {
		t.Fatalf("exec = %+v, %q, %v; want code 3 and hi", ex, out.String(), err)
	}
	if refused.Load() != 0 {
		t.Errorf("%d refusals of the real agent", refused.Load())
	}
}

// Another sandbox's agent at the address (a pod that took the IP) is
// refused by the daemon, as a refusal.
func TestImpostorAgentRefused(t *testing.T) {
	mine, other := newIdentity(t, "sb1"), newIdentity(t, "sb2")
	addr := serveAgent(t, other)
	var refused atomic.Int32
	_, err := client(t, mine, addr, &refused).Ping(t.Context())
	if !errors.Is(err, agent.ErrPeerRefused) {
		t.Fatalf("ping of another sandbox's agent = %v, want ErrPeerRefused", err)
	}
	if refused.Load() != 1 {
		t.Errorf("refusals = %d, want 1", refused.Load())
	}
}

// A listener that is no TLS agent at all (a plain TCP server answering
// anything) is refused.
func TestPlainListenerRefused(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Write([]byte("HTTP/1.0 200 OK\r\n\r\n{\"version\":\"fake\"}"))
			c.Close()
		}
	}()
	var refused atomic.Int32
	_, err = client(t, newIdentity(t, "sb1"), ln.Addr().String(), &refused).Ping(t.Context())
	if !errors.Is(err, agent.ErrPeerRefused) || refused.Load() != 1 {
		t.Fatalf("ping of a plain listener = %v (refusals %d), want ErrPeerRefused", err, refused.Load())
	}
}

// A caller holding another sandbox's daemon key (or none) gets nothing
// from the agent: the agent requires its own daemon's certificate.
func TestForeignCallerRefusedByAgent(t *testing.T) {
	mine := newIdentity(t, "sb1")
	addr := serveAgent(t, mine)
	// The impostor knows the agent's certificate (it is not secret) but
	// holds another daemon key.
	forged := newIdentity(t, "sb2")
	forged[agenttls.AgentCert] = mine[agenttls.AgentCert]
	var refused atomic.Int32
	_, err := client(t, forged, addr, &refused).Ping(t.Context())
	if err == nil {
		t.Fatal("an agent answered a caller with a foreign daemon key")
	}
	// No client certificate at all.
	conf, _ := mine.ClientConfig()
	conf.Certificates = nil
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	c, err := (&tls.Dialer{Config: conf}).DialContext(ctx, "tcp", addr)
	if err == nil {
		// TLS 1.3: the server's refusal of the client arrives at the first read.
		c.SetDeadline(time.Now().Add(5 * time.Second))
		_, err = c.Read(make([]byte, 1))
		c.Close()
	}
	if err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("a caller without a certificate: %v, want a certificate alert", err)
	}
}

// Nothing listening is unreachable, not an impostor.
func TestNothingListeningIsNoRefusal(t *testing.T) {
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	addr := ln.Addr().String()
	ln.Close()
	var refused atomic.Int32
	_, err := client(t, newIdentity(t, "sb1"), addr, &refused).Ping(t.Context())
	if err == nil || errors.Is(err, agent.ErrPeerRefused) || refused.Load() != 0 {
		t.Fatalf("ping of nothing = %v (refusals %d), want a plain dial error", err, refused.Load())
	}
}

// Identities are parsed strictly: a truncated or swapped part is refused.
func TestIdentityValidate(t *testing.T) {
	id := newIdentity(t, "sb1")
	bad := agenttls.Identity{}
	for k, v := range id {
		bad[k] = v
	}
	bad[agenttls.AgentKey] = id[agenttls.DaemonKey]
	if bad.Validate() == nil {
		t.Error("an identity with swapped keys validates")
	}
	if _, err := agenttls.ServerConfig(id[agenttls.AgentCert], id[agenttls.AgentKey], append(id[agenttls.DaemonCert], id[agenttls.AgentCert]...)); err == nil {
		t.Error("two daemon certificates accepted as one pin")
	}
}
