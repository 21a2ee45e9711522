// Package e2e drives a real berth daemon (the built binary, as a separate
// process with a private data dir, socket and cgroup parent) through its
// CLI and Go SDK, with real runc, overlayfs, cgroups and SQLite.
package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/berth-sh/berth/client"
	"github.com/berth-sh/berth/internal/testenv"
)

// berthBin is the binary under test, built once by TestMain.
var berthBin string

func TestMain(m *testing.M) {
	// A suite that cannot run must fail, not pass with nothing tested.
	if err := testenv.RequireRoot("the e2e suite (test/e2e)"); err != nil {
		fmt.Fprintln(os.Stderr, "FAIL:", err)
		os.Exit(1)
	}
	if _, err := exec.LookPath("runc"); err != nil {
		fmt.Fprintln(os.Stderr, "FAIL: the e2e suite needs runc: run scripts/install-deps.sh (make deps)")
		os.Exit(1)
	}
	root, err := testenv.RepoRoot()
	if err != nil {
		fmt.Fprintln(os.Stderr, "FAIL:", err)
		os.Exit(1)
	}
	dir, err := testenv.TempDir("", "e2e-bin")
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	berthBin = filepath.Join(dir, "berth")
	// BERTH_E2E_RACE: the daemon under the race detector. The agent
	// beside it, which the daemon finds there, is static either way.
	race := os.Getenv("BERTH_E2E_RACE") != ""
	if err := testenv.Build(ctx, root, berthBin, race); err != nil {
		fmt.Fprintln(os.Stderr, "building berth:", err)
		os.Exit(1)
	}
	code := m.Run()
	stopPG()
	os.RemoveAll(dir)
	os.Exit(code)
}

// parallel lets test t run beside the suite's other parallel tests (at
// most go test's -parallel at once: make e2e gives 4). A test that
// calls it holds nothing of the host that another daemon could see or
// change: its daemons, data dirs, network namespaces and cgroup parents
// are its own, and it asserts no wall-clock bound that a busy machine
// would break. The tests that do not call it run first, one at a time:
// those that read host-wide state (host id ranges, which two daemons'
// first sandboxes share today) or set the process environment.
// BERTH_E2E_SERIAL=1 runs every test alone, to tell a flake of load from
// one of the code.
func parallel(t *testing.T) {
	if os.Getenv("BERTH_E2E_SERIAL") == "" {
		t.Parallel()
	}
}

// daemon is one berth daemon process started by a test: a testenv.Daemon
// with the test's failure reporting around it.
type daemon struct {
	t       *testing.T
	dataDir string
	socket  string
	proc    *testenv.Daemon
	logs    *testenv.Log // the current process's output
	c       *client.Client
	extra   []string
	env     []string
	netns   string // run the daemon in this network namespace
}

// newDaemon starts a private daemon in a fresh temp dir; it is stopped and
// every sandbox removed, with a leak check, when the test ends.
func newDaemon(t *testing.T, d *daemon) *daemon {
	t.Helper()
	base, err := testenv.TempDir("", "e2e")
	if err != nil {
		t.Fatal(err)
	}
	d.t, d.dataDir, d.socket = t, filepath.Join(base, "data"), filepath.Join(base, "berth.sock")
	d.start()
	t.Cleanup(func() {
		d.cleanup()
		if err := testenv.RemoveDir(base); err != nil {
			t.Error(err)
		}
	})
	return d
}

// startDaemon starts a private daemon; it is stopped and every sandbox
// removed, with a leak check, when the test ends.
func startDaemon(t *testing.T) *daemon {
	t.Helper()
	return newDaemon(t, &daemon{})
}

func (d *daemon) start() {
	d.t.Helper()
	if err := d.tryStart(); err != nil {
		d.t.Fatal(err)
	}
}

// tryStart starts the daemon, reporting a failure instead of ending the
// test (cleanup must go on to clean the host when a start fails).
func (d *daemon) tryStart() error {
	args := slices.Clone(d.extra)
	// The automatic warm pool would make members in the background of
	// every test's creates (more load, sandboxes no test asked for): it is
	// on only where a test asks for it (pool_test.go).
	if !slices.ContainsFunc(args, func(a string) bool { return strings.HasPrefix(a, "--warm-pool") }) {
		args = append(args, "--warm-pool=off")
	}
	// Creates and forks are admitted against what their disk caps may grow
	// to, per daemon: with the 10 GiB default, the suite's daemons side by
	// side would each need tens of GiB free on the test machine. Tests of
	// the default itself name their own.
	if !slices.ContainsFunc(args, func(a string) bool { return strings.HasPrefix(a, "--disk-default") }) {
		args = append(args, "--disk-default", "2GiB")
	}
	p, err := testenv.Start(context.Background(), testenv.Config{
		Binary: berthBin, DataDir: d.dataDir, Socket: d.socket, Args: args, Env: d.env,
		Netns: d.netns, LogLevel: "debug", UserAgent: "berth-e2e", ReadyTimeout: 30 * time.Second,
		StopTimeout: 20 * time.Second,
	})
	if err != nil {
		return err
	}
	d.proc, d.logs, d.c = p, p.Log(), p.Client()
	return nil
}

// running reports whether the daemon process is alive.
func (d *daemon) running() bool {
	select {
	case <-d.proc.Done():
		return false
	default:
		return true
	}
}

// pid is the daemon's process id.
func (d *daemon) pid() int { return d.proc.PID() }

// stop stops the daemon gracefully (SIGTERM to its pid).
func (d *daemon) stop() {
	d.t.Helper()
	if err := d.proc.Stop(); err != nil {
		d.t.Errorf("stopping the daemon: %v\n%s", err, d.logs)
	}
	d.checkRaces()
}

// checkRaces fails the test if the daemon (built with BERTH_E2E_RACE)
// reported a data race.
func (d *daemon) checkRaces() {
	if log := d.logs.String(); strings.Contains(log, "WARNING: DATA RACE") {
		i := strings.Index(log, "WARNING: DATA RACE")
		d.t.Errorf("the daemon reported a data race:\n%s", tail(log[i:], 6000)[:min(6000, len(log)-i)])
	}
}

// kill stops the daemon with SIGKILL, as a crash would.
func (d *daemon) kill() {
	d.proc.Kill()
	d.checkRaces()
}

// cli runs the berth CLI against this daemon.
func (d *daemon) cli(args ...string) (stdout, stderr string, code int) {
	return d.cliIn("", args...)
}

func (d *daemon) cliIn(stdin string, args ...string) (stdout, stderr string, code int) {
	d.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, berthBin, args...)
	cmd.Env = append(os.Environ(), "BERTH_HOST=unix://"+d.socket)
	cmd.Stdin = strings.NewReader(stdin)
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		code = ee.ExitCode()
	default:
		d.t.Fatalf("berth %v: %v", args, err)
	}
	return o.String(), e.String(), code
}

// cleanup removes what the test left, stops the daemon and checks that
// nothing of it remains on the host.
func (d *daemon) cleanup() {
	t := d.t
	if !d.running() {
		// Not running (a test killed it): start it to clean up. If it
		// cannot start, the sandboxes it would delete are cleaned from the
		// host directly, so that one failed test does not leave mounts and
		// loop devices to every later run on the machine.
		if err := d.tryStart(); err != nil {
			t.Errorf("cleanup: the daemon does not start again, cleaning the host without it: %v", err)
			d.cleanHost()
			return
		}
	}
	ctx := context.Background()
	// Warm pools hold sandboxes no list shows: empty them first.
	// (A daemon that cannot list them leaves them to the leak check.)
	if err := testenv.DrainPools(ctx, d.c, 30*time.Second); err != nil {
		t.Logf("cleanup: %v", err)
	}
	if sbs, err := d.c.ListSandboxes(ctx, false); err == nil {
		for _, sb := range sbs {
			if _, err := d.c.DeleteSandbox(ctx, sb.ID, true); err != nil {
				if client.IsConflict(err) && strings.Contains(err.Error(), "runs on node") {
					continue // another daemon's, in a shared store: its own cleanup removes it
				}
				t.Errorf("cleanup: deleting %s: %v", sb.ID, err)
			}
		}
	} else {
		t.Errorf("cleanup: listing: %v", err)
	}
	rep, err := d.c.Doctor(ctx, false)
	if err != nil {
		t.Errorf("doctor: %v", err)
	} else if !rep.Healthy {
		t.Errorf("doctor found leaks after the test: %+v", rep.Findings)
	}
	d.stop()
	// The host, read directly: nothing of the daemon may be left once it
	// stopped with no sandboxes (testenv.Check is the definition).
	leaks, err := testenv.Clean(d.proc.Scope())
	for _, l := range leaks {
		t.Errorf("leaked after the daemon stopped: %s", l)
	}
	if err != nil {
		t.Errorf("cleanup: %v", err)
	}
	if t.Failed() {
		t.Logf("daemon log:\n%s", tail(d.logs.String(), 8000))
	}
}

// cleanHost removes what a daemon that will not start again left: its
// sandboxes' processes, mounts, loop devices, cgroups and network
// (testenv.Clean), then checks that nothing is left. The test has failed
// already; this keeps its leftovers from failing every later run.
func (d *daemon) cleanHost() {
	t := d.t
	s := d.proc.Scope()
	if _, err := testenv.Clean(s); err != nil {
		t.Errorf("cleanup without the daemon: %v", err)
	}
	for _, l := range testenv.Check(s) {
		t.Errorf("left after cleaning without the daemon: %s", l)
	}
	t.Logf("daemon log:\n%s", tail(d.logs.String(), 8000))
}

// assertNoLeaks checks the host directly, without the daemon, while it
// runs with no sandboxes: only its own mounts, pool device, bridge and
// process group may be there.
func assertNoLeaks(t *testing.T, d *daemon) {
	t.Helper()
	s := d.proc.Scope()
	s.Running = true
	for _, l := range testenv.Check(s) {
		t.Errorf("leaked: %s", l)
	}
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}
