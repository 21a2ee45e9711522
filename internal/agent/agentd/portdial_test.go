package agentd

import (
	"bytes"
	"io"
	"net"
	"testing"
	"time"

	"github.com/berth-sh/berth/internal/agent/wire"

	"github.com/berth-sh/berth/internal/errdefs"
)

// TestDialSplicesBothWays: the dial op connects to a loopback port and
// carries bytes both ways, more than any one buffer, and either side's
// close ends both.
func TestDialSplicesBothWays(t *testing.T) {
	a := startAgent(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	served := make(chan error, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			served <- err
			return
		}
		defer c.Close()
		// Echo until the client's half ends, upper-casing nothing: a
		// plain echo server.
		_, err = io.Copy(c, c)
		served <- err
	}()
	port := ln.Addr().(*net.TCPAddr).Port
	c, err := a.client.DialPort(testCtx(t), port)
	if err != nil {
		t.Fatal(err)
	}
	payload := bytes.Repeat([]byte("berth-dial-"), 100_000) // 1.1 MB
	go func() { c.Write(payload) }()
	got := make([]byte, len(payload))
	c.SetReadDeadline(time.Now().Add(20 * time.Second))
	if _, err := io.ReadFull(c, got); err != nil {
		t.Fatalf("reading the echo: %v", err)
	}
	if !bytes.Equal(got, payload) {
		t.Fatal("echo differs from what was sent")
	}
	// Closing the client's side closes the target's.
	c.Close()
	select {
	case err := <-served:
		if err != nil {
			t.Errorf("echo server: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("target connection not closed after the client closed")
	}
}

// TestDialTargetCloseEndsClient: the target's EOF reaches the client as
// EOF after the bytes sent before it.
func TestDialTargetCloseEndsClient(t *testing.T) {
	a := startAgent(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err == nil {
			c.Write([]byte("hello and goodbye"))
			c.Close()
		}
	}()
	c, err := a.client.DialPort(testCtx(t), ln.Addr().(*net.TCPAddr).Port)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	b, err := io.ReadAll(c)
	if err != nil || string(b) != "hello and goodbye" {
		t.Fatalf("read %q, %v; want the bytes then EOF", b, err)
	}
}

func TestDialClosedPortAndBadPorts(t *testing.T) {
	a := startAgent(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close() // nothing listens there now
	_, err = a.client.DialPort(testCtx(t), port)
	wantCategory(t, err, errdefs.ErrUnreachable)
	if code, status := errdefs.Code(err); code != "unreachable" || status != 502 {
		t.Errorf("closed port: %s %d, want unreachable 502", code, status)
	}
	// The agent refuses ports out of range itself, whatever the client
	// checks.
	for _, p := range []int{0, -1, 65536, 1 << 20} {
		err := rawOp(t, a.socket, wire.Request{Op: wire.OpDial, Port: p}, nil)
		wantCategory(t, err, errdefs.ErrInvalid)
		if _, err := a.client.DialPort(testCtx(t), p); err == nil {
			t.Errorf("DialPort(%d) succeeded", p)
		}
	}
	// The agent still serves afterwards.
	if _, err := a.client.Ping(testCtx(t)); err != nil {
		t.Fatal(err)
	}
}
