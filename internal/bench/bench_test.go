package bench

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/berth-sh/berth/internal/node/local"
	"github.com/berth-sh/berth/internal/overlay"
)

func TestSummarize(t *testing.T) {
	s := summarize([]float64{5, 1, 4, 2, 3, 6, 7, 8, 9, 10})
	if s.N != 10 || s.P50 != 5 || s.P95 != 10 || s.Min != 1 || s.Max != 10 || s.Mean != 5.5 {
		t.Fatalf("summarize = %+v", s)
	}
	if s := summarize([]float64{42}); s.P50 != 42 || s.P95 != 42 {
		t.Fatalf("one sample: %+v", s)
	}
}

func TestOnlyNames(t *testing.T) {
	o := Options{Binary: "/proc/self/exe", Runc: "sh", Only: []string{"a,exec", " density ", "b", "i,j", "snapshot", "m,nat"}}
	if err := o.setDefaults(); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(o.Only, []string{TTI, Exec, Density, Fork, Pool, Snapshot, Egress, NAT}) {
		t.Fatalf("Only = %v", o.Only)
	}
	o = Options{Binary: "/proc/self/exe", Runc: "sh", Only: []string{"nope"}}
	if err := o.setDefaults(); err == nil || !strings.Contains(err.Error(), "nope") {
		t.Fatalf("unknown name: %v", err)
	}
}

// TestRunTiny runs every measurement end to end in a tiny configuration
// against a freshly built berth binary, then checks that the bench left no
// mounts, cgroups or files behind.
func TestRunTiny(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	if _, err := exec.LookPath("runc"); err != nil {
		t.Skip("needs runc")
	}
	if testing.Short() {
		t.Skip("builds berth and starts a daemon")
	}
	// The binary is the sandboxes' agent too: mapped root must traverse to
	// it, so not t.TempDir (0700).
	dir, err := os.MkdirTemp("/tmp", "berth-bench-test-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	if err := os.Chmod(dir, 0o711); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "berth")
	build := exec.Command("go", "build", "-o", bin, "./cmd/berth")
	build.Dir = filepath.Join("..", "..")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	rep, err := Run(ctx, Options{
		Binary: bin, Iterations: 3, Idle: 3, Churn: time.Second, Expiry: 3, ExpiryStop: 2, TempRoot: dir,
		ForkSizes: []int64{1 << 20}, NetBytes: 1 << 20,
	}, testWriter{t})
	if rep != nil {
		var sb strings.Builder
		_ = WriteTable(&sb, rep)
		t.Logf("report:\n%s", sb.String())
	}
	if err != nil {
		t.Fatal(err)
	}

	if len(rep.Rows) == 0 {
		t.Fatal("no rows")
	}
	seen := map[string]bool{}
	for _, r := range rep.Rows {
		seen[r.Measurement] = true
		timing := r.Unit == "ms" || r.Unit == "s" || r.Unit == "/s" || r.Unit == "MiB/s"
		if r.Measurement == Egress && strings.Contains(r.Name, "extra") {
			timing = false // a difference of two timings may be negative
		}
		if r.Berth.N <= 0 {
			t.Errorf("%s: berth n = %d", r.Name, r.Berth.N)
		}
		if timing && (r.Berth.P50 <= 0 || r.Berth.P95 <= 0) {
			t.Errorf("%s: berth timings %+v", r.Name, r.Berth)
		}
		if r.PeerStat != nil {
			if r.PeerStat.N <= 0 {
				t.Errorf("%s: peer n = %d", r.Name, r.PeerStat.N)
			}
			if timing && (r.PeerStat.P50 <= 0 || r.PeerStat.P95 <= 0) {
				t.Errorf("%s: peer timings %+v", r.Name, *r.PeerStat)
			}
		}
	}
	for _, m := range All {
		if !seen[m] {
			t.Errorf("no row for measurement %s", m)
		}
	}

	// Cleanup: doctor clean, nothing mounted, no cgroup parents, no dir.
	if !rep.Cleanup.Clean() {
		t.Errorf("cleanup: %+v", rep.Cleanup)
	}
	if ms, err := overlay.MountsUnder(dir); err != nil || len(ms) > 0 {
		t.Errorf("mounts left under %s: %v (%v)", dir, ms, err)
	}
	instance := local.InstanceName(rep.WorkDir)
	netInstance := local.InstanceName(netDataDir(rep.WorkDir))
	for _, parent := range []string{"/" + instance, "/" + peerParent(instance), "/" + netInstance} {
		if left := CgroupDirs(parent); len(left) > 0 {
			t.Errorf("cgroups left: %v", left)
		}
	}
	for _, ns := range NetNamespaces(rep.WorkDir) {
		if _, err := os.Stat(netnsPath(ns)); !os.IsNotExist(err) {
			t.Errorf("network namespace %s still there (%v)", ns, err)
		}
	}
	if _, err := os.Stat(rep.WorkDir); !os.IsNotExist(err) {
		t.Errorf("work dir %s still there (%v)", rep.WorkDir, err)
	}
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}
