package e2e

import (
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/client"
	"github.com/berth-sh/berth/internal/testenv"
)

// pgURL starts (once) the private PostgreSQL test server and returns a
// fresh database's URL.
func pgURL(t *testing.T) string {
	t.Helper()
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	script := filepath.Join(root, "scripts", "pg-test-server.sh")
	// Output to a file, not a pipe: the server it starts keeps inherited
	// descriptors open.
	outf, err := os.CreateTemp("", "berth-pg-url-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.Remove(outf.Name())
	defer outf.Close()
	cmd := exec.Command(script, "start")
	cmd.Stdout = outf
	if err := cmd.Run(); err != nil {
		t.Fatalf("starting the PostgreSQL test server: %v", err)
	}
	pgStopMu.Lock()
	pgStop = func() { exec.Command(script, "stop").Run() }
	pgStopMu.Unlock()
	out, _ := os.ReadFile(outf.Name())
	base := strings.TrimSpace(string(out))
	name := "berth_e2e_" + strings.ToLower(strings.ReplaceAll(t.Name(), "/", "_"))
	psql := func(sql string) {
		cmd := exec.Command("psql", "-v", "ON_ERROR_STOP=1", base, "-c", sql)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("psql %s: %v %s", sql, err, out)
		}
	}
	psql("DROP DATABASE IF EXISTS " + name + " WITH (FORCE)")
	psql("CREATE DATABASE " + name)
	t.Cleanup(func() { psql("DROP DATABASE IF EXISTS " + name + " WITH (FORCE)") })
	return strings.Replace(base, "/postgres?", "/"+name+"?", 1)
}

// TestTwoDaemonsShareOnePostgres: two daemons (own data dirs, one
// database) see each other's sandboxes but never act on them.
func TestTwoDaemonsShareOnePostgres(t *testing.T) {
	parallel(t)
	url := pgURL(t)
	a := startDaemonWith(t, "--store", url)
	b := startDaemonWith(t, "--store", url)
	ctx := context.Background()
	sa, err := a.c.CreateSandbox(ctx, api.CreateSandboxRequest{Name: "on-a", Persistent: true, Policy: api.Policy{IdleTimeoutSeconds: 600}})
	if err != nil {
		t.Fatal(err)
	}
	sbB, err := b.c.CreateSandbox(ctx, api.CreateSandboxRequest{Name: "on-b"})
	if err != nil {
		t.Fatal(err)
	}
	// Shared records: each daemon lists both.
	for _, d := range []*daemon{a, b} {
		sbs, err := d.c.ListSandboxes(ctx, false)
		if err != nil || len(sbs) != 2 {
			t.Fatalf("list: %d %v", len(sbs), err)
		}
	}
	// A daemon refuses to act on the other's sandbox, naming the node.
	for _, call := range []func() error{
		func() error { _, err := b.c.DeleteSandbox(ctx, sa.ID, true); return err },
		func() error { _, err := b.c.Pause(ctx, sa.ID); return err },
		func() error {
			_, err := b.c.Exec(ctx, sa.ID, api.ExecRequest{Cmd: []string{"true"}}, io.Discard, io.Discard)
			return err
		},
	} {
		if err := call(); !client.IsConflict(err) || !strings.Contains(err.Error(), "node") {
			t.Fatalf("cross-daemon operation: %v", err)
		}
	}
	// Reconcilers leave the other's sandboxes alone: restart b, and a's
	// sandbox is still running and healthy on a; doctor on b finds nothing.
	b.stop()
	b.startWithEnv()
	time.Sleep(1500 * time.Millisecond) // a few reconcile ticks
	if got, _ := a.c.GetSandbox(ctx, sa.ID); got.State != "running" {
		t.Fatalf("a's sandbox after b restarted: %s (%s)", got.State, got.Reason)
	}
	if out := execOut(t, a, sa.ID, "echo", "alive"); out != "alive\n" {
		t.Fatal(out)
	}
	assertDoctorClean(t, a)
	assertDoctorClean(t, b)
	// Live names are unique across the shared store.
	if _, err := b.c.CreateSandbox(ctx, api.CreateSandboxRequest{Name: "on-a"}); !client.IsConflict(err) {
		t.Fatalf("duplicate name across daemons: %v", err)
	}
	if _, err := b.c.DeleteSandbox(ctx, sbB.ID, true); err != nil {
		t.Fatal(err)
	}
}

// pgStop stops the test server; set by the first pgURL (tests that call
// it may run in parallel, hence the lock).
var (
	pgStopMu sync.Mutex
	pgStop   = func() {}
)

// stopPG stops the test server at the end of the suite if a test started it.
func stopPG() {
	pgStopMu.Lock()
	defer pgStopMu.Unlock()
	pgStop()
}
