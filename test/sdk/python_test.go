// Package sdk runs the language SDKs' own test suites against a real
// daemon: sdk/python's pytest suite (python_test.go) and sdk/typescript's
// node:test suite (typescript_test.go). The harness builds berth, starts
// one private daemon per suite (testenv, as the e2e suite does) listening
// on its unix socket, on plain HTTP and on TLS (all loopback), and runs the
// suite with where to reach it in the environment (daemon_test.go). The
// suite's sandboxes must all be gone when it ends; the daemon is then
// stopped and the host checked for leaks. Root only; `make e2e` runs it. A
// missing python3, node, npm or module fails, it never skips.
package sdk

import (
	"context"
	"fmt"
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

	dm := startDaemon(t)

	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	args := []string{"-m", "pytest", "-q", "-p", "no:cacheprovider", "--basetemp", filepath.Join(dm.base, "pytest"), "-x", "tests"}
	if testing.Verbose() {
		args = append(args, "-v")
	}
	// BERTH_SDK_TESTS: a pytest -k expression, to run some tests while
	// working on them (the harness and its checks are the same).
	if k := os.Getenv("BERTH_SDK_TESTS"); k != "" {
		args = append(args, "-k", k)
	}
	cmd := dm.command(ctx, python, args...)
	cmd.Dir = filepath.Join(root, "sdk", "python")
	cmd.Env = append(cleanEnv("PYTHON"),
		"PYTHONPATH="+cmd.Dir,
		"PYTHONDONTWRITEBYTECODE=1",
	)
	cmd.Env = append(cmd.Env, dm.env()...)
	log := filepath.Join(dm.base, "requests-python.log")
	cmd.Env = append(cmd.Env, "BERTH_SDK_REQUEST_LOG="+log)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("pytest (sdk/python): %v\n%s", err, out)
	}
	if !strings.Contains(string(out), " passed") {
		t.Fatalf("pytest ran no test:\n%s", out)
	}
	t.Logf("pytest:\n%s", lastLines(string(out), 5))
	if os.Getenv("BERTH_SDK_TESTS") != "" {
		t.Log("route coverage not checked: BERTH_SDK_TESTS ran some of the tests")
		return
	}
	checkCoverage(t, "Python", log)
}
