package agent

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/berth-sh/berth/internal/agent/agentd"

	"golang.org/x/sys/unix"
)

// listenAt serves an agent on a socket at path until the test ends.
func listenAt(t *testing.T, path string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- agentd.Serve(ctx, agentd.Config{Socket: path, Root: t.TempDir()}) }()
	t.Cleanup(func() { cancel(); <-done })
	c := NewClient(path)
	for i := 0; ; i++ {
		if _, err := c.Ping(context.Background()); err == nil {
			return
		} else if i > 1000 {
			t.Fatalf("agent did not listen at %s", path)
		}
		time.Sleep(time.Millisecond)
	}
}

func TestSocketDialerRefuses(t *testing.T) {
	dir := t.TempDir()
	other := t.TempDir()
	listenAt(t, filepath.Join(other, "victim.sock"))
	ctx := testCtx(t)
	d := &SocketDialer{Dir: dir, Name: "agent.sock"}
	c := NewClientDialer(d.Dial)

	// A symlink to another socket (another sandbox's agent, a host
	// daemon) is never followed.
	if err := os.Symlink(filepath.Join(other, "victim.sock"), filepath.Join(dir, "agent.sock")); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Ping(ctx); !errors.Is(err, ErrPeerRefused) {
		t.Fatalf("ping through a symlink: %v, want ErrPeerRefused", err)
	}
	os.Remove(filepath.Join(dir, "agent.sock"))

	// A file that is not a socket.
	if err := os.WriteFile(filepath.Join(dir, "agent.sock"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Ping(ctx); !errors.Is(err, ErrPeerRefused) {
		t.Fatalf("ping of a regular file: %v, want ErrPeerRefused", err)
	}
	os.Remove(filepath.Join(dir, "agent.sock"))

	// The real agent: accepted; its pin is reported and its peer checked.
	listenAt(t, filepath.Join(dir, "agent.sock"))
	var pinned Pin
	var peer *unix.Ucred
	d.Connected = func(p Pin) { pinned = p }
	d.Verify = func(c *unix.Ucred) error { peer = c; return nil }
	if _, err := c.Ping(ctx); err != nil {
		t.Fatal(err)
	}
	if len(pinned.Handle) == 0 || peer == nil || int(peer.Pid) != os.Getpid() {
		t.Fatalf("pin %v, peer %+v (want pid %d)", pinned, peer, os.Getpid())
	}
	// The pin survives its text form.
	if back, err := ParsePin(pinned.String()); err != nil || back.String() != pinned.String() {
		t.Fatalf("pin round trip: %v %v", back, err)
	}

	// A peer the verifier rejects.
	d.Verify = func(*unix.Ucred) error { return errors.New("not in the cgroup") }
	if _, err := c.Ping(ctx); !errors.Is(err, ErrPeerRefused) {
		t.Fatalf("ping of a rejected peer: %v, want ErrPeerRefused", err)
	}
	d.Verify = nil

	// An impostor that replaced the pinned socket by a new one at the
	// same path is refused.
	d.Pin = func() (Pin, bool) { return pinned, true }
	if _, err := c.Ping(ctx); err != nil {
		t.Fatalf("pinned socket: %v", err)
	}
	if err := os.Rename(filepath.Join(dir, "agent.sock"), filepath.Join(dir, "moved.sock")); err != nil {
		t.Fatal(err)
	}
	listenAt(t, filepath.Join(dir, "agent.sock"))
	if _, err := c.Ping(ctx); !errors.Is(err, ErrPeerRefused) {
		t.Fatalf("ping of a replaced socket: %v, want ErrPeerRefused", err)
	}

	for _, bad := range []string{"", "x", "1:", "1:zz", "a:00"} {
		if _, err := ParsePin(bad); err == nil {
			t.Errorf("ParsePin(%q) accepted", bad)
		}
	}
}
