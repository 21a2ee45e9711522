package e2e

import (
	"bytes"
	"context"
	"crypto/tls"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/client"
)

// TestTwoDaemonsForward: two daemons on one PostgreSQL store, each with a
// peer listener and the same peer CA, sit behind "one load balancer": a
// key's requests about a sandbox that daemon a runs, sent to daemon b,
// are forwarded to a over mutual TLS and answered there — exec (plain and
// over the WebSocket), files, pause and resume, delete. The peer listener
// takes no connection without a leaf of the peer CA.
func TestTwoDaemonsForward(t *testing.T) {
	parallel(t)
	url := pgURL(t)
	ca := filepath.Join(t.TempDir(), "peer-ca.pem")
	// Four distinct ports: held together while chosen, so none repeats.
	var addrs []string
	var lns []net.Listener
	for range 4 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		lns = append(lns, ln)
		addrs = append(addrs, ln.Addr().String())
	}
	for _, ln := range lns {
		ln.Close()
	}
	addrA, addrB, peerA, peerB := addrs[0], addrs[1], addrs[2], addrs[3]
	a := startDaemonWith(t, "--store", url, "--listen", addrA, "--peer-listen", peerA, "--peer-ca", ca)
	b := startDaemonWith(t, "--store", url, "--listen", addrB, "--peer-listen", peerB, "--peer-ca", ca)
	ctx := context.Background()
	keyb, err := os.ReadFile(filepath.Join(a.dataDir, "admin.key"))
	if err != nil {
		t.Fatal(err)
	}
	key := strings.TrimSpace(string(keyb))
	cb, err := client.New("https://"+addrB, key, client.WithTLSFingerprint(printedFingerprint(t, b)))
	if err != nil {
		t.Fatal(err)
	}
	defer cb.Close()

	sb, err := a.c.CreateSandbox(ctx, api.CreateSandboxRequest{Persistent: true, Policy: api.Policy{IdleTimeoutSeconds: 600}})
	if err != nil {
		t.Fatal(err)
	}
	// Exec through b runs in a's sandbox.
	var out bytes.Buffer
	if ex, err := cb.Exec(ctx, sb.ID, api.ExecRequest{Cmd: []string{"sh", "-c", "echo from-$(hostname)"}}, &out, io.Discard); err != nil || ex.Code != 0 {
		t.Fatalf("exec through b: %v %+v", err, ex)
	}
	if want := "from-" + sb.Hostname + "\n"; sb.Hostname != "" && out.String() != want {
		t.Fatalf("exec through b said %q, want %q", out.String(), want)
	}
	// Files both ways.
	if _, err := cb.WriteFile(ctx, sb.ID, "/tmp/via-b", 0o644, strings.NewReader("written through b")); err != nil {
		t.Fatalf("write through b: %v", err)
	}
	if got := execOut(t, a, sb.ID, "cat", "/tmp/via-b"); got != "written through b" {
		t.Fatalf("a reads %q", got)
	}
	var rb bytes.Buffer
	if _, _, err := cb.ReadFile(ctx, sb.ID, "/tmp/via-b", &rb); err != nil || rb.String() != "written through b" {
		t.Fatalf("read through b: %q %v", rb.String(), err)
	}
	// A terminal over the WebSocket through b.
	var tout bytes.Buffer
	ex, err := cb.ExecInteractive(ctx, sb.ID, api.ExecRequest{Cmd: []string{"sh", "-c", "read l; echo got-$l; exit 4"}},
		strings.NewReader("line\n"), &tout, io.Discard, nil)
	if err != nil || ex.Code != 4 || !strings.Contains(tout.String(), "got-line") {
		t.Fatalf("WebSocket exec through b: %v %+v %q", err, ex, tout.String())
	}
	// Lifecycle through b.
	if p, err := cb.Pause(ctx, sb.ID); err != nil || p.State != "paused" {
		t.Fatalf("pause through b: %v %+v", err, p)
	}
	if r, err := cb.Resume(ctx, sb.ID); err != nil || r.State != "running" {
		t.Fatalf("resume through b: %v %+v", err, r)
	}
	// b's own unix socket is its host's administrator, a uid b alone
	// checked: not forwarded, told where the sandbox runs.
	if _, err := b.c.Pause(ctx, sb.ID); !client.IsConflict(err) || !strings.Contains(err.Error(), "node") {
		t.Fatalf("pause through b's socket: %v", err)
	}

	// The peer listener: no client leaf, no connection; a leaf of another
	// CA, none either.
	conn, err := tls.Dial("tcp", peerA, &tls.Config{InsecureSkipVerify: true})
	if err == nil {
		_, err = conn.Write([]byte("GET /v1/sandboxes HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + key + "\r\n\r\n"))
		if err == nil {
			var buf [64]byte
			_, err = conn.Read(buf[:])
		}
		conn.Close()
	}
	if err == nil {
		t.Fatal("the peer listener served a client without a peer certificate")
	}

	if _, err := cb.DeleteSandbox(ctx, sb.ID, true); err != nil {
		t.Fatalf("delete through b: %v", err)
	}
	if got, err := a.c.GetSandbox(ctx, sb.ID); err == nil && got.State != "deleted" {
		t.Fatalf("after the delete through b, a has it %s", got.State)
	}
}
