package sdk

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/berth-sh/berth/internal/testenv"
)

// sdkDaemon is one private daemon for an SDK suite: on its unix socket
// (the host's admin), on plain HTTP and on TLS, all loopback.
type sdkDaemon struct {
	d                 *testenv.Daemon
	base              string // a temp dir the suite may use; removed at the end
	httpAddr, tlsAddr string
	fingerprint       string
}

// startDaemon starts the daemon of one suite; the test's cleanup fails it
// for any sandbox the suite left, stops the daemon and checks for leaks.
func startDaemon(t *testing.T) *sdkDaemon {
	t.Helper()
	base, err := testenv.TempDir("", "e2e-sdk")
	if err != nil {
		t.Fatal(err)
	}
	httpAddr, tlsAddr := freePort(t), freePort(t)
	d, err := testenv.Start(context.Background(), testenv.Config{
		Binary: berthBin, DataDir: filepath.Join(base, "data"), Socket: filepath.Join(base, "berth.sock"),
		// A 2 GiB default disk cap: creates and forks are admitted against
		// what their caps may grow to, and the suites' forks must not need
		// tens of GiB free on the test machine.
		Args:     []string{"--insecure-listen", httpAddr, "--listen", tlsAddr, "--warm-pool=off", "--disk-default", "2GiB"},
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
	return &sdkDaemon{d: d, base: base, httpAddr: httpAddr, tlsAddr: tlsAddr, fingerprint: v.TLSFingerprint}
}

// env says where the daemon is, as both suites read it: BERTH_HOST (its
// unix socket), BERTH_TEST_HTTP / BERTH_TEST_HTTPS (+ the TLS fingerprint
// and CA file) for its loopback TCP listeners.
func (s *sdkDaemon) env() []string {
	return []string{
		"BERTH_HOST=" + s.d.Host(),
		"BERTH_TEST_HTTP=http://" + s.httpAddr,
		"BERTH_TEST_HTTPS=https://" + s.tlsAddr,
		"BERTH_TEST_TLS_FINGERPRINT=" + s.fingerprint,
		"BERTH_TEST_TLS_CA=" + filepath.Join(s.d.DataDir(), "tls", "cert.pem"),
	}
}

// cleanEnv is the test's environment minus what names a daemon or
// configures a language runtime: the suite names its own daemon; a
// caller's settings must not leak in.
func cleanEnv(prefixes ...string) []string {
	env := []string{}
	for _, kv := range os.Environ() {
		skip := strings.HasPrefix(kv, "BERTH_")
		for _, p := range prefixes {
			skip = skip || strings.HasPrefix(kv, p)
		}
		if !skip {
			env = append(env, kv)
		}
	}
	return env
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
