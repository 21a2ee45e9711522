// Package node runs the node backend conformance suite (internal/node/
// nodetest) on the local backend with real runc and runsc, overlayfs,
// loop images and cgroups. Root only; `make e2e` runs it.
package node

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/berth-sh/berth/internal/image"
	"github.com/berth-sh/berth/internal/node/local"
	"github.com/berth-sh/berth/internal/node/nodetest"
	"github.com/berth-sh/berth/internal/runtime"
	"github.com/berth-sh/berth/internal/testenv"
)

// agentBin is the static agent binary (cmd/berth-agent) the sandboxes run.
var agentBin string

func TestMain(m *testing.M) {
	// A suite that cannot run must fail, not pass with nothing tested.
	if err := testenv.RequireRoot("the node conformance suite (test/node)"); err != nil {
		fmt.Fprintln(os.Stderr, "FAIL:", err)
		os.Exit(1)
	}
	if _, err := exec.LookPath("runc"); err != nil {
		fmt.Fprintln(os.Stderr, "FAIL: the node conformance suite needs runc: run scripts/install-deps.sh (make deps)")
		os.Exit(1)
	}
	dir, err := testenv.TempDir("", "node-bin")
	if err != nil {
		fmt.Fprintln(os.Stderr, "FAIL:", err)
		os.Exit(1)
	}
	// The same checks the daemon makes of runsc (on PATH, static).
	if _, err := runtime.NewRunsc("", filepath.Join(dir, "runsc-check")); err != nil {
		fmt.Fprintf(os.Stderr, "FAIL: the node conformance suite needs gVisor's runsc, statically linked, on PATH (%v): "+
			"install it with scripts/install-runsc.sh (make deps runs it)\n", err)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	root, err := testenv.RepoRoot()
	if err != nil {
		fmt.Fprintln(os.Stderr, "FAIL:", err)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	agentBin = filepath.Join(dir, testenv.AgentName)
	if err := testenv.BuildAgent(context.Background(), root, agentBin); err != nil {
		fmt.Fprintln(os.Stderr, "FAIL: building the agent:", err)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// TestLocal runs the suite on one local backend offering both classes
// (runc the default), as the daemon opens it.
func TestLocal(t *testing.T) {
	nodetest.Run(t, func(t *testing.T) nodetest.Harness {
		return newLocal(t)
	})
}

// newLocal opens a local backend in a fresh data dir; when the test ends
// (after the suite closed the backend) nothing of it may be left on the
// host: testenv's leak check, then its cleanup of whatever was.
func newLocal(t *testing.T) nodetest.Harness {
	base, err := testenv.TempDir("", "node")
	if err != nil {
		t.Fatal(err)
	}
	dataDir := filepath.Join(base, "data")
	if err := os.MkdirAll(dataDir, 0o711); err != nil {
		t.Fatal(err)
	}
	scope := testenv.Scope{DataDir: dataDir}
	var images *image.Store
	var rs *runtime.Runsc
	t.Cleanup(func() {
		if rs != nil {
			if err := rs.Close(); err != nil {
				t.Errorf("closing runsc: %v", err)
			}
		}
		if images != nil {
			images.Close()
		}
		leaks, err := testenv.Clean(scope)
		for _, l := range leaks {
			t.Errorf("leak: %s", l)
		}
		if err != nil {
			t.Errorf("cleaning up: %v", err)
		}
		if err := testenv.RemoveDir(base); err != nil {
			t.Error(err)
		}
	})
	idmap := local.DefaultIDMap
	images, err = image.Open(filepath.Join(dataDir, "images"),
		image.IDMap{HostUID: idmap.HostUID, HostGID: idmap.HostGID, Size: idmap.Size})
	if err != nil {
		t.Fatal(err)
	}
	builtin, err := images.Builtin(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	runc, err := runtime.NewRunc("", filepath.Join(dataDir, "runc"))
	if err != nil {
		t.Fatal(err)
	}
	rs, err = runtime.NewRunsc("", filepath.Join(dataDir, "runsc"))
	if err != nil {
		t.Fatalf("%v (scripts/install-runsc.sh)", err)
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	if testing.Verbose() {
		log = slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	b, err := local.New(local.Config{
		DataDir: dataDir, AgentPath: agentBin, IDMap: idmap, Logger: log,
		DiskDefault: 1 << 30, Runtimes: []runtime.Runtime{runc, rs}, Images: images,
	})
	if err != nil {
		t.Fatal(err)
	}
	return nodetest.Harness{Backend: b, Layers: builtin.Layers, HostUsr: true}
}

// testWriter sends the backend's warnings to the test's log.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(string(p))
	return len(p), nil
}
