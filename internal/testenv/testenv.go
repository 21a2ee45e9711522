// Package testenv is the one test environment of berth's end-to-end
// suites (test/e2e, its soak) and of the harnesses in the production
// binary (`berth bench`, `berth selftest --private`): it builds the
// binary, starts private daemons (Start: a data dir, socket, cgroup parent
// and process group of their own, logs captured, stopped by pid), and
// decides what counts as a leak (Check, Clean, Sweep) — one definition for
// every suite and for scripts/leakcheck.sh.
//
// It is not a test package: `berth bench` and `berth selftest` link it.
// Nothing in it needs the testing package; callers turn its errors and
// leaks into test failures or report lines.
//
// A daemon's Scope is what Check and Clean look at: mounts under its data
// dir, loop devices backed by files there, child cgroups of its instance in
// every hierarchy, its veths, bridge and nft tables in its netns
// (network.Objects), the netns the harness made, processes of its group or
// naming its data dir, and sandbox and runtime state files. Clean kills what
// is left of those processes and cgroups by pid before it unmounts, so no
// mount is only lazily detached. Sweep runs after a whole suite over every
// berth-{e2e,bench,selftest,node,k8s}-* temp dir and what a Kubernetes test
// cluster leaves outside its dir (its links, nft tables, CNI result files,
// /var/log/containers links); make test and make test-k8s record what is
// there before they run (leakcheck --record) and count only what is new
// (--before).
package testenv

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
)

// Prefixes are the names of the temporary directories the harnesses make
// (TempDir): Sweep looks for what is left of them and only of them.
var Prefixes = []string{"berth-e2e-", "berth-bench-", "berth-selftest-", "berth-node-", "berth-k8s-"}

// TempDir makes a fresh directory root/berth-<kind>-XXXX (root "" = the
// system's temp dir), mode 0711: sandboxes' mapped root must traverse it
// to reach the agent binary and the data dir beneath, but not list it.
func TempDir(root, kind string) (string, error) {
	dir, err := os.MkdirTemp(root, "berth-"+kind+"-")
	if err != nil {
		return "", err
	}
	if err := os.Chmod(dir, 0o711); err != nil {
		os.RemoveAll(dir)
		return "", err
	}
	return dir, nil
}

// RepoRoot is the root of the berth module this package was built from:
// the directory holding go.mod above this file, else above the working
// directory.
func RepoRoot() (string, error) {
	var starts []string
	if _, file, _, ok := runtime.Caller(0); ok && filepath.IsAbs(file) {
		starts = append(starts, filepath.Dir(file))
	}
	if wd, err := os.Getwd(); err == nil {
		starts = append(starts, wd)
	}
	for _, dir := range starts {
		for d := dir; ; d = filepath.Dir(d) {
			if b, err := os.ReadFile(filepath.Join(d, "go.mod")); err == nil && strings.Contains(string(b), "module github.com/berth-sh/berth\n") {
				return d, nil
			}
			if d == filepath.Dir(d) {
				break
			}
		}
	}
	return "", errors.New("testenv: the berth module's root (go.mod) not found")
}

// Build compiles the module at root's binaries as shipped, into out's
// directory: out is the CLI (cmd/berth with -tags berthcli), beside it
// berthd (cmd/berth whole: the daemon, bench and selftest, to which the
// CLI hands those verbs; static as shipped or with the race detector, cgo
// and dynamically linked) and the agent cmd/berth-agent, always static: it
// runs inside sandboxes, and the daemon finds it there.
func Build(ctx context.Context, root, out string, race bool) error {
	if err := goBuild(ctx, root, filepath.Join(filepath.Dir(out), DaemonName), "./cmd/berth", race); err != nil {
		return err
	}
	if err := goBuild(ctx, root, out, "./cmd/berth", false, "-tags", "berthcli"); err != nil {
		return err
	}
	return BuildAgent(ctx, root, filepath.Join(filepath.Dir(out), AgentName))
}

// DaemonName is the full binary's file name beside the CLI's.
const DaemonName = "berthd"

// AgentName is the agent binary's file name beside berth's
// (daemon.AgentName; testenv does not import the daemon).
const AgentName = "berth-agent"

// BuildAgent compiles cmd/berth-agent of the module at root into out,
// static.
func BuildAgent(ctx context.Context, root, out string) error {
	return goBuild(ctx, root, out, "./cmd/berth-agent", false)
}

func goBuild(ctx context.Context, root, out, pkg string, race bool, flags ...string) error {
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return err
	}
	args := append([]string{"build", "-o", out}, flags...)
	env := append(os.Environ(), "CGO_ENABLED=0")
	if race {
		args = append(args, "-race")
		env = append(os.Environ(), "CGO_ENABLED=1")
	}
	cmd := exec.CommandContext(ctx, "go", append(args, pkg)...)
	cmd.Dir = root
	cmd.Env = env
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("testenv: go %s %s: %w\n%s", strings.Join(args, " "), pkg, err, b)
	}
	return nil
}

// RequireRoot is the end-to-end suites' first check: they drive runc,
// mounts, cgroups and network namespaces, and a run that cannot must fail
// rather than pass with nothing tested.
func RequireRoot(suite string) error {
	if os.Geteuid() == 0 {
		return nil
	}
	return fmt.Errorf("%s needs root (runc, overlayfs, cgroups, loop devices, network namespaces) and runs as uid %d: "+
		"run it as root (sudo make e2e, or make test on a CI machine as root); it does not skip", suite, os.Geteuid())
}
