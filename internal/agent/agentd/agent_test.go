package agentd

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/berth-sh/berth/internal/agent"
	"github.com/berth-sh/berth/internal/agent/wire"

	"go.uber.org/goleak"

	"github.com/berth-sh/berth/internal/errdefs"
)

// mainEnv makes the test binary run Main instead of the tests, so that the
// PID-1 duties can be tested in a child process (see TestMainPID1).
const mainEnv = "BERTH_AGENT_TEST_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(mainEnv) == "1" {
		os.Exit(Main(os.Args[1:]))
	}
	goleak.VerifyTestMain(m)
}

type testAgent struct {
	client *agent.Client
	root   string // host path of Config.Root
	socket string
	srv    *server
}

type agentOpt func(*Config)

// startAgent serves an agent in-process with Root a fresh temporary
// directory, and stops it when the test ends.
func startAgent(t testing.TB, opts ...agentOpt) *testAgent {
	t.Helper()
	root := filepath.Join(t.TempDir(), "root")
	if err := os.Mkdir(root, 0o755); err != nil {
		t.Fatal(err)
	}
	// Socket paths are limited to 108 bytes: keep it short.
	sockDir, err := os.MkdirTemp("", "ag")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(sockDir) })
	cfg := Config{Socket: filepath.Join(sockDir, "a.sock"), Root: root}
	for _, o := range opts {
		o(&cfg)
	}
	s, err := newServer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.serve(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("serve: %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Errorf("serve did not return")
		}
	})
	return &testAgent{client: agent.NewClient(cfg.Socket), root: root, socket: cfg.Socket, srv: s}
}

func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// syncBuffer is a bytes.Buffer safe for a writer and a polling reader.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func wantCategory(t *testing.T, err error, cat error) {
	t.Helper()
	if !errors.Is(err, cat) {
		t.Fatalf("error = %v, want category %v", err, cat)
	}
}

func TestPing(t *testing.T) {
	a := startAgent(t)
	info, err := a.client.Ping(testCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	if info.PID != os.Getpid() || info.Version == "" || info.Uptime <= 0 {
		t.Fatalf("ping = %+v", info)
	}
}

func TestUnavailable(t *testing.T) {
	c := agent.NewClient(filepath.Join(t.TempDir(), "none.sock"))
	_, err := c.Ping(testCtx(t))
	wantCategory(t, err, errdefs.ErrUnavailable)
	if code, _ := errdefs.Code(err); code != "unavailable" {
		t.Fatalf("code = %s", code)
	}
}

func TestStaleSocketReplaced(t *testing.T) {
	dir, err := os.MkdirTemp("", "ag")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	sock := filepath.Join(dir, "a.sock")
	// A socket file left by a dead agent.
	ln, err := listen(sock)
	if err != nil {
		t.Fatal(err)
	}
	ln.SetUnlinkOnClose(false)
	ln.Close()
	if _, err := os.Stat(sock); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Serve(ctx, Config{Socket: sock, Root: t.TempDir()}) }()
	c := agent.NewClient(sock)
	var pingErr error
	for range 100 {
		if _, pingErr = c.Ping(testCtx(t)); pingErr == nil {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if pingErr != nil {
		t.Fatal(pingErr)
	}
	fi, err := os.Stat(sock)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("socket mode: %v %v", fi.Mode(), err)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// rawOp sends req, and body as data frames and an end frame unless it is
// nil, on a connection of its own, bypassing the client's checks. It
// returns the error of the answer's first frame: nil for an end or result
// frame.
func rawOp(t testing.TB, socket string, req wire.Request, body []byte) error {
	t.Helper()
	conn, err := net.Dial("unix", socket)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	req.V = wire.ProtocolVersion
	b, err := json.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Write(append(b, '\n')); err != nil {
		t.Fatal(err)
	}
	if body != nil {
		fw := wire.NewFrameWriter(conn)
		if _, err := (wire.DataWriter{FW: fw}).Write(body); err != nil {
			t.Fatal(err)
		}
		if err := fw.Send(wire.FrameEnd, nil); err != nil {
			t.Fatal(err)
		}
	}
	typ, p, err := wire.NewFrameReader(bufio.NewReader(conn)).Next()
	if err != nil {
		t.Fatal(err)
	}
	switch typ {
	case wire.FrameEnd, wire.FrameResult:
		return nil
	case wire.FrameError:
		var we wire.Error
		if err := json.Unmarshal(p, &we); err != nil {
			t.Fatal(err)
		}
		return wire.ErrorFromWire(we)
	}
	t.Fatalf("unexpected %s frame", typ)
	return nil
}
