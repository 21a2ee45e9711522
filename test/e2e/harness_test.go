// Package e2e drives a real berth daemon (the built binary, as a separate
// process with a private data dir, socket and cgroup parent) through its
// CLI and Go SDK, with real runc, overlayfs, cgroups and SQLite.
package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/berth-sh/berth/client"
	"github.com/berth-sh/berth/internal/cgroups"
	"github.com/berth-sh/berth/internal/node/local"
	"github.com/berth-sh/berth/internal/overlay"
)

// berthBin is the binary under test, built once by TestMain.
var berthBin string

// agentBin, when set, is a static build of the same source handed to the
// daemon as the sandboxes' agent (--agent): a -race daemon needs cgo and is
// dynamically linked, which templates without the host's /usr (busybox
// images) cannot run.
var agentBin string

func TestMain(m *testing.M) {
	if os.Geteuid() != 0 {
		fmt.Println("e2e tests need root (runc, mounts, cgroups); skipping")
		os.Exit(0)
	}
	if _, err := exec.LookPath("runc"); err != nil {
		fmt.Println("e2e tests need runc: run scripts/install-deps.sh")
		os.Exit(1)
	}
	dir, err := os.MkdirTemp("", "berth-e2e-bin-")
	if err != nil {
		panic(err)
	}
	berthBin = filepath.Join(dir, "berth")
	_, self, _, _ := runtime.Caller(0)
	root := filepath.Join(filepath.Dir(self), "..", "..")
	build := exec.Command("go", "build", "-o", berthBin, "./cmd/berth")
	build.Dir = root
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if os.Getenv("BERTH_E2E_RACE") != "" {
		// The daemon under the race detector; the static build above
		// becomes the agent.
		agentBin = filepath.Join(dir, "berth-agent")
		static := exec.Command("go", "build", "-o", agentBin, "./cmd/berth")
		static.Dir = root
		static.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := static.CombinedOutput(); err != nil {
			fmt.Printf("building the agent: %v\n%s", err, out)
			os.Exit(1)
		}
		build = exec.Command("go", "build", "-race", "-o", berthBin, "./cmd/berth")
		build.Dir = root
		build.Env = append(os.Environ(), "CGO_ENABLED=1")
	}
	if out, err := build.CombinedOutput(); err != nil {
		fmt.Printf("building berth: %v\n%s", err, out)
		os.Exit(1)
	}
	os.Chmod(dir, 0o755)
	code := m.Run()
	stopPG()
	os.RemoveAll(dir)
	os.Exit(code)
}

// daemon is one berth daemon process started by a test.
type daemon struct {
	t       *testing.T
	dataDir string
	socket  string
	cmd     *exec.Cmd
	logs    *bytes.Buffer
	waitErr chan error
	c       *client.Client
	extra   []string
	env     []string
	netns   string // run the daemon in this network namespace
}

// startDaemon starts a private daemon; it is stopped and every sandbox
// removed, with a leak check, when the test ends.
func startDaemon(t *testing.T) *daemon {
	t.Helper()
	base, err := os.MkdirTemp("", "berth-e2e-")
	if err != nil {
		t.Fatal(err)
	}
	os.Chmod(base, 0o711)
	d := &daemon{t: t, dataDir: filepath.Join(base, "data"), socket: filepath.Join(base, "berth.sock")}
	d.start()
	t.Cleanup(func() {
		d.cleanup()
		os.RemoveAll(base)
	})
	return d
}

func (d *daemon) start() {
	t := d.t
	t.Helper()
	d.logs = &bytes.Buffer{}
	args := append([]string{"serve", "--data-dir", d.dataDir, "--socket", d.socket, "--log-level", "debug"}, d.extra...)
	if agentBin != "" {
		args = append(args, "--agent", agentBin)
	}
	d.cmd = exec.Command(berthBin, args...)
	if d.netns != "" {
		d.cmd = exec.Command("nsenter", append([]string{"--net=/var/run/netns/" + d.netns, "--", berthBin}, args...)...)
	}
	d.cmd.Env = append(os.Environ(), d.env...)
	d.cmd.Stdout = d.logs
	d.cmd.Stderr = d.logs
	d.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := d.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	d.waitErr = make(chan error, 1)
	go func(cmd *exec.Cmd) { d.waitErr <- cmd.Wait() }(d.cmd)
	deadline := time.Now().Add(30 * time.Second)
	for {
		if c, err := net.Dial("unix", d.socket); err == nil {
			c.Close()
			break
		}
		select {
		case err := <-d.waitErr:
			t.Fatalf("daemon exited: %v\n%s", err, d.logs)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("daemon did not start\n%s", d.logs)
		}
		time.Sleep(20 * time.Millisecond)
	}
	c, err := client.New("unix://"+d.socket, "")
	if err != nil {
		t.Fatal(err)
	}
	d.c = c
}

// stop stops the daemon gracefully (SIGTERM).
func (d *daemon) stop() {
	d.t.Helper()
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-d.waitErr:
	case <-time.After(20 * time.Second):
		_ = d.cmd.Process.Kill()
		<-d.waitErr
		d.t.Errorf("daemon did not stop on SIGTERM\n%s", d.logs)
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
	_ = d.cmd.Process.Kill()
	<-d.waitErr
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
	select {
	case <-d.waitErr:
		// Not running (a test killed it): start it to clean up.
		d.start()
	default:
	}
	ctx := context.Background()
	// Warm pools hold sandboxes no list shows: empty them first.
	if pools, err := d.c.ListPools(ctx); err == nil {
		for _, p := range pools {
			d.c.SetPool(ctx, p.Template, 0)
		}
		deadline := time.Now().Add(30 * time.Second)
		for time.Now().Before(deadline) {
			left := 0
			pools, _ = d.c.ListPools(ctx)
			for _, p := range pools {
				left += p.Ready + p.Starting
			}
			if left == 0 {
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
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
	assertNoLeaks(t, d.dataDir)
	if ms, _ := overlay.MountsUnder(d.dataDir); len(slices.DeleteFunc(ms, func(m string) bool { return m == d.dataDir })) > 0 {
		t.Errorf("mounts stayed after the daemon stopped with no sandboxes: %v", ms)
	}
	if t.Failed() {
		t.Logf("daemon log:\n%s", tail(d.logs.String(), 8000))
	}
}

// assertNoLeaks checks the host directly, without the daemon: no mounts
// under the data dir, no runc containers, no sandbox dirs, no cgroups with
// processes under the daemon's cgroup parent.
func assertNoLeaks(t *testing.T, dataDir string) {
	t.Helper()
	// The storage pool and the share (agent binary, resolv.conf files)
	// are the daemon's own while it runs; they are checked separately
	// once the daemon has stopped.
	ms, _ := overlay.MountsUnder(dataDir)
	ms = slices.DeleteFunc(ms, func(m string) bool {
		return m == filepath.Join(dataDir, "pool") || m == filepath.Join(dataDir, "runsc", "null-netns") ||
			m == filepath.Join(dataDir, "share") || m == dataDir // a test's own filesystem for the data dir
	})
	if len(ms) > 0 {
		t.Errorf("leaked mounts: %v", ms)
	}
	if ents, _ := os.ReadDir(filepath.Join(dataDir, "sandboxes")); len(ents) > 0 {
		t.Errorf("leaked sandbox dirs: %d", len(ents))
	}
	if ents, _ := os.ReadDir(filepath.Join(dataDir, "runc")); len(ents) > 0 {
		var names []string
		for _, e := range ents {
			names = append(names, e.Name())
		}
		t.Errorf("leaked runc containers: %v", names)
	}
	parent := "/" + local.InstanceName(dataDir)
	if kids := cgroups.Children(parent); len(kids) > 0 {
		t.Errorf("leaked cgroups under %s: %v", parent, kids)
	}
	// The daemon's (now empty) cgroup parent goes with its data dir.
	for _, p := range cgroups.Paths(parent) {
		if err := os.Remove(p); err != nil && !os.IsNotExist(err) {
			t.Errorf("removing cgroup parent: %v", err)
		}
	}
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}
