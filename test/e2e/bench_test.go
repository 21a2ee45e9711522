package e2e

import (
	"context"
	"image/png"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/berth-sh/berth/internal/audit"
	"github.com/berth-sh/berth/internal/bench"
	"github.com/berth-sh/berth/internal/testenv"
)

// TestBenchTiny runs every measurement of `berth bench` end to end in a
// tiny configuration against the suite's binary, then checks that the
// bench left nothing behind: testenv's leak check over each of its
// scopes (daemon and raw runc peer, network daemon and its namespaces),
// no cgroup parent and no work dir.
func TestBenchTiny(t *testing.T) {
	parallel(t)
	// The binary is the sandboxes' agent too: mapped root must traverse to
	// it and to the work dir, so not t.TempDir (0700).
	dir, err := testenv.TempDir("", "bench")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	rep, err := bench.Run(ctx, bench.Options{
		Binary: filepath.Join(filepath.Dir(berthBin), testenv.DaemonName), Iterations: 3, Burst: 4, Idle: 3, Churn: time.Second, Expiry: 3, ExpiryStop: 2, TempRoot: dir,
		ForkSizes: []int64{1 << 20}, HibernateSizes: []int64{16 << 20}, NetBytes: 1 << 20, Images: 3, ImageBase: 1 << 20,
	}, testWriter{t})
	if rep != nil {
		var sb strings.Builder
		_ = bench.WriteTable(&sb, rep)
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
		if r.Measurement == bench.Egress && strings.Contains(r.Name, "extra") {
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
	if rep.Machine.CLIBytes <= 0 || rep.Machine.CLIBytes >= rep.Machine.BerthBytes {
		t.Errorf("the CLI (%d bytes) is not smaller than berthd (%d)", rep.Machine.CLIBytes, rep.Machine.BerthBytes)
	}
	for _, m := range bench.All {
		if !seen[m] {
			t.Errorf("no row for measurement %s", m)
		}
	}
	// berth bench --report: the Markdown names every row and every chart
	// it references is a PNG of a sane size.
	repDir := filepath.Join(dir, "report")
	if err := bench.WriteReport(repDir, rep); err != nil {
		t.Fatal(err)
	}
	md, err := os.ReadFile(filepath.Join(repDir, "report.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rep.Rows {
		if !strings.Contains(string(md), strings.ReplaceAll(strings.TrimSpace(r.Name), "|", `\|`)) {
			t.Errorf("report.md does not name %q", r.Name)
		}
	}
	refs := regexp.MustCompile(`\]\((charts/[a-z0-9-]+\.png)\)`).FindAllStringSubmatch(string(md), -1)
	if len(refs) == 0 {
		t.Error("report.md references no chart")
	}
	for _, ref := range refs {
		f, err := os.Open(filepath.Join(repDir, ref[1]))
		if err != nil {
			t.Fatal(err)
		}
		img, err := png.Decode(f)
		f.Close()
		if err != nil {
			t.Errorf("%s: %v", ref[1], err)
		} else if b := img.Bounds(); b.Dx() < 300 || b.Dy() < 150 {
			t.Errorf("%s is %v", ref[1], b)
		}
	}
	os.RemoveAll(repDir)

	// Cleanup: the bench's own report, then the host read directly.
	if !rep.Cleanup.Clean() {
		t.Errorf("cleanup: %+v", rep.Cleanup)
	}
	for _, s := range bench.LeakScopes(rep.WorkDir) {
		for _, l := range testenv.Check(s) {
			t.Errorf("left by the bench: %s", l)
		}
		for _, parent := range s.CgroupParents() {
			if left := testenv.CgroupDirs(parent); len(left) > 0 {
				t.Errorf("cgroup parent left: %v", left)
			}
		}
	}
	// The cgroup parents are the scopes' (checked above): the host-wide
	// glob would count the README's demo daemon's and those of daemons
	// test/node runs beside this package.
	if left := testenv.Sweep(testenv.SweepOptions{TempRoot: dir, NoCgroups: true}); len(left) > 0 {
		t.Errorf("left under %s: %v", dir, left)
	}
	if _, err := os.Stat(rep.WorkDir); !os.IsNotExist(err) {
		t.Errorf("work dir %s still there (%v)", rep.WorkDir, err)
	}
	// The daemon's audit anchor is written beside its data dir (the work
	// dir), outside it: the bench removes it too.
	if _, err := os.Stat(audit.DefaultAnchorPath(rep.WorkDir)); !os.IsNotExist(err) {
		t.Errorf("audit anchor %s still there (%v)", audit.DefaultAnchorPath(rep.WorkDir), err)
	}
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// berth bench --only images, tiny: a registry in its own namespace, three
// task images on a 1 MiB base; every row has figures, the storage row
// compares the layer store with the distinct layers, and the bench leaves
// nothing behind (its registry namespace included: cleanup reports it).
func TestBenchImagesTiny(t *testing.T) {
	parallel(t)
	dir, err := testenv.TempDir("", "bench")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	rep, err := bench.Run(ctx, bench.Options{Binary: berthBin, Iterations: 2, TempRoot: dir,
		Only: []string{bench.Images}, Images: 3, ImageBase: 1 << 20}, testWriter{t})
	if rep != nil {
		var sb strings.Builder
		_ = bench.WriteTable(&sb, rep)
		t.Logf("report:\n%s", sb.String())
	}
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Rows) != 6 {
		t.Fatalf("%d rows, want 6", len(rep.Rows))
	}
	for _, r := range rep.Rows {
		if r.Measurement != bench.Images || r.Berth.N <= 0 || r.Berth.P50 <= 0 {
			t.Errorf("row %+v", r)
		}
		if strings.HasPrefix(r.Name, "host storage") && (r.PeerStat == nil || r.PeerStat.P50 <= 0 || r.Ratio <= 0) {
			t.Errorf("storage row without the distinct layers' bytes: %+v", r)
		}
	}
	if !rep.Cleanup.Clean() {
		t.Errorf("cleanup: %+v", rep.Cleanup)
	}
	for _, s := range bench.LeakScopes(rep.WorkDir) {
		for _, l := range testenv.Check(s) {
			t.Errorf("left by the bench: %s", l)
		}
	}
	if _, err := os.Stat(rep.WorkDir); !os.IsNotExist(err) {
		t.Errorf("work dir %s still there (%v)", rep.WorkDir, err)
	}
}
