package sdk

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/berth-sh/berth/internal/testenv"
)

// TestTypeScriptSDK runs sdk/typescript's node:test suite (tests/*.test.mjs,
// examples included) after `npm ci` when its node_modules is missing.
func TestTypeScriptSDK(t *testing.T) {
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	// deno: an example runs as a Deno program too (npm's deno, which
	// scripts/install-deps.sh installs for the code interpreter's kernel).
	for _, tool := range []string{"node", "npm", "deno"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("the TypeScript SDK suite needs %s: run scripts/install-deps.sh (make deps)", tool)
		}
	}
	dir := filepath.Join(root, "sdk", "typescript")
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "ws", "package.json")); err != nil {
		ci := exec.CommandContext(ctx, "npm", "ci", "--prefer-offline", "--no-audit", "--no-fund")
		ci.Dir = dir
		if b, err := ci.CombinedOutput(); err != nil {
			t.Fatalf("npm ci in %s: %v\n%s", dir, err, b)
		}
	}

	dm := startDaemon(t)

	// One file at a time: the files share one daemon, and the retry tests
	// count requests through their own proxies.
	// A test that hangs fails by its name after two minutes instead of
	// the whole suite being killed at the context's end with its cause
	// unsaid.
	args := []string{"--test", "--test-concurrency=1", "--test-reporter=spec", "--test-timeout=120000"}
	// BERTH_SDK_TESTS: a test name pattern, to run some tests while
	// working on them (the harness and its checks are the same).
	if k := os.Getenv("BERTH_SDK_TESTS"); k != "" {
		args = append(args, "--test-name-pattern", k)
	}
	cmd := dm.command(ctx, "node", append(args, "tests/")...)
	cmd.Dir = dir
	cmd.Env = append(cleanEnv("NODE_"), dm.env()...)
	cmd.Env = append(cmd.Env, "BERTH_TEST_TMP="+dm.base)
	log := filepath.Join(dm.base, "requests-typescript.log")
	cmd.Env = append(cmd.Env, "BERTH_SDK_REQUEST_LOG="+log)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("node --test (sdk/typescript): %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "ℹ pass ") || strings.Contains(string(out), "ℹ pass 0\n") {
		t.Fatalf("node --test ran no test:\n%s", out)
	}
	if testing.Verbose() {
		t.Logf("node --test:\n%s", out)
	} else {
		t.Logf("node --test:\n%s", lastLines(string(out), 9))
	}
	if os.Getenv("BERTH_SDK_TESTS") != "" {
		t.Log("route coverage not checked: BERTH_SDK_TESTS ran some of the tests")
		return
	}
	checkCoverage(t, "TypeScript", log)
}
