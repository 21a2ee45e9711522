// Package sdk runs the language SDKs' own test suites against a real
// daemon: today sdk/python's pytest suite (sdk/python/tests). The harness
// builds berth, starts one private daemon (testenv, as the e2e suite does)
// listening on its unix socket, on plain HTTP and on TLS (all loopback),
// and runs Debian's /usr/bin/python3 -m pytest with where to reach it in
// the environment. The suite's sandboxes must all be gone when it ends;
// the daemon is then stopped and the host checked for leaks. Root only;
// `make e2e` runs it. A missing python3 or module fails, it never skips.
package sdk

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/berth-sh/berth/internal/testenv"
)

// python is Debian's interpreter, the one scripts/install-deps.sh installs
// python3-httpx, -websockets, -pytest and -pytest-asyncio for (a pyenv or
// venv python3 on PATH would not have them).
const python = "/usr/bin/python3"

var berthBin string

func TestMain(m *testing.M) {
	if err := testenv.RequireRoot("the SDK suites (test/sdk)"); err != nil {
		fmt.Fprintln(os.Stderr, "FAIL:", err)
		os.Exit(1)
	}
	if _, err := exec.LookPath("runc"); err != nil {
		fmt.Fprintln(os.Stderr, "FAIL: the SDK suites need runc: run scripts/install-deps.sh (make deps)")
		os.Exit(1)
	}
	root, err := testenv.RepoRoot()
	if err != nil {
		fmt.Fprintln(os.Stderr, "FAIL:", err)
		os.Exit(1)
	}
	dir, err := testenv.TempDir("", "e2e-sdk-bin")
	if err != nil {
		fmt.Fprintln(os.Stderr, "FAIL:", err)
		os.Exit(1)
	}
	berthBin = filepath.Join(dir, "berth")
	if err := testenv.Build(context.Background(), root, berthBin, os.Getenv("BERTH_E2E_RACE") != ""); err != nil {
		fmt.Fprintln(os.Stderr, "FAIL: building berth:", err)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// freePort picks a loopback port for a listener of the daemon.
func freePort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// TestPythonSDK runs sdk/python's pytest suite, examples included.
func TestPythonSDK(t *testing.T) {
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(python); err != nil {
		t.Fatalf("the Python SDK suite needs Debian's %s: run scripts/install-deps.sh (%v)", python, err)
	}
	if out, err := exec.Command(python, "-c", "import httpx, websockets, pytest, pytest_asyncio, setuptools, pip").CombinedOutput(); err != nil {
		t.Fatalf("the Python SDK suite needs python3-httpx, python3-websockets, python3-pytest, python3-pytest-asyncio "+
			"and python3-pip for %s: run scripts/install-deps.sh: %v\n%s", python, err, out)
	}

	base, err := testenv.TempDir("", "e2e-sdk")
	if err != nil {
		t.Fatal(err)
	}
	httpAddr, tlsAddr := freePort(t), freePort(t)
	d, err := testenv.Start(context.Background(), testenv.Config{
		Binary: berthBin, DataDir: filepath.Join(base, "data"), Socket: filepath.Join(base, "berth.sock"),
		Args:     []string{"--insecure-listen", httpAddr, "--listen", tlsAddr},
		LogLevel: "debug", UserAgent: "berth-sdk-test", ReadyTimeout: 30 * time.Second, StopTimeout: 20 * time.Second,
	})
	if err != nil {
		testenv.RemoveDir(base)
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cleanup(t, d)
		if err := testenv.RemoveDir(base); err != nil {
			t.Error(err)
		}
	})
	v, err := d.Client().Version(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if v.TLSFingerprint == "" {
		t.Fatal("the daemon's version has no TLS fingerprint though it listens on TLS")
	}

	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	args := []string{"-m", "pytest", "-q", "-p", "no:cacheprovider", "--basetemp", filepath.Join(base, "pytest"), "-x", "tests"}
	if testing.Verbose() {
		args = append(args, "-v")
	}
	cmd := exec.CommandContext(ctx, python, args...)
	cmd.Dir = filepath.Join(root, "sdk", "python")
	env := []string{}
	for _, kv := range os.Environ() {
		// The suite names its own daemon; a caller's settings must not leak in.
		if strings.HasPrefix(kv, "BERTH_") || strings.HasPrefix(kv, "PYTHON") {
			continue
		}
		env = append(env, kv)
	}
	cmd.Env = append(env,
		"PYTHONPATH="+cmd.Dir,
		"PYTHONDONTWRITEBYTECODE=1",
		"BERTH_HOST="+d.Host(),
		"BERTH_TEST_HTTP=http://"+httpAddr,
		"BERTH_TEST_HTTPS=https://"+tlsAddr,
		"BERTH_TEST_TLS_FINGERPRINT="+v.TLSFingerprint,
		"BERTH_TEST_TLS_CA="+filepath.Join(d.DataDir(), "tls", "cert.pem"),
	)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("pytest (sdk/python): %v\n%s", err, out)
	}
	if !strings.Contains(string(out), " passed") {
		t.Fatalf("pytest ran no test:\n%s", out)
	}
	t.Logf("pytest:\n%s", lastLines(string(out), 5))
}

// cleanup fails the test for any sandbox the suite left (it must delete
// what it creates), removes them, stops the daemon and checks the host.
func cleanup(t *testing.T, d *testenv.Daemon) {
	ctx := context.Background()
	c := d.Client()
	if pools, err := c.ListPools(ctx); err == nil {
		for _, p := range pools {
			if p.Min > 0 {
				t.Errorf("the suite left a warm pool of %s (min %d)", p.Template, p.Min)
				c.SetPool(ctx, p.Template, 0)
			}
		}
	}
	// An emptied pool's members are deleted in the background; they are
	// in no list, so wait for them before the leak check.
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		left := 0
		pools, _ := c.ListPools(ctx)
		for _, p := range pools {
			left += p.Ready + p.Starting
		}
		if left == 0 {
			break
		}
	}
	sbs, err := c.ListSandboxes(ctx, false)
	if err != nil {
		t.Errorf("cleanup: listing: %v", err)
	}
	for _, sb := range sbs {
		t.Errorf("the suite left sandbox %s (%s, %s)", sb.ID, sb.Name, sb.State)
		if _, err := c.DeleteSandbox(ctx, sb.ID, true); err != nil {
			t.Errorf("cleanup: deleting %s: %v", sb.ID, err)
		}
	}
	if rep, err := c.Doctor(ctx, false); err != nil {
		t.Errorf("doctor: %v", err)
	} else if !rep.Healthy {
		t.Errorf("doctor found leaks after the suite: %+v", rep.Findings)
	}
	if err := d.Stop(); err != nil {
		t.Errorf("stopping the daemon: %v", err)
	}
	leaks, err := testenv.Clean(d.Scope())
	for _, l := range leaks {
		t.Errorf("leaked after the daemon stopped: %s", l)
	}
	if err != nil {
		t.Errorf("cleanup: %v", err)
	}
	if t.Failed() {
		t.Logf("daemon log:\n%s", d.LogTail(8000))
	}
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
