package bench

import (
	"image/png"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/berth-sh/berth/internal/bench/harness"
)

// TestWriteReport: the report writer over recorded results writes a
// Markdown table naming every measure and PNG charts that decode, of a
// sane size, each referenced from the Markdown.
func TestWriteReport(t *testing.T) {
	rep := &Report{
		Started: time.Date(2026, 12, 2, 17, 0, 0, 0, time.UTC), Seconds: 42, Iterations: 20,
		Machine: Machine{CPUs: 2, MemTotalMiB: 4096, Kernel: "6.1.0", Runc: "1.1.12", Cgroup: "v2", Go: "go1.26", Berth: "v0.0.0-test"},
		Rows: []Row{
			{Measurement: "tti", Name: "time to interactive", Unit: "ms",
				Berth: harness.Summarize([]float64{40, 42, 45, 50, 80}), Peer: "runc run",
				PeerStat: ptr(harness.Summarize([]float64{30, 31, 33, 40, 60})), Ratio: 1.35, Target: "p50 < 200 ms", Pass: harness.Pass(true)},
			{Measurement: "exec", Name: "exec | echo", Unit: "ms", Berth: harness.Summarize([]float64{3, 4, 5, 9})},
			{Measurement: "churn", Name: "churn", Unit: "/s", Berth: Stat{N: 100, P50: 12.5, P95: 12.5, Aggregate: true}, Note: "rate over 10 s"},
		},
		Cleanup: harness.Cleanup{DoctorHealthy: true},
	}
	dir := t.TempDir()
	if d := os.Getenv("BERTH_REPORT_KEEP"); d != "" {
		dir = d
	}
	if err := WriteReport(dir, rep); err != nil {
		t.Fatal(err)
	}
	md, err := os.ReadFile(filepath.Join(dir, "report.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"time to interactive", `exec \| echo`, "churn", "runc run", "v0.0.0-test", "2026-12-02", "2 CPUs"} {
		if !strings.Contains(string(md), want) {
			t.Errorf("report.md lacks %q:\n%s", want, md)
		}
	}
	refs := regexp.MustCompile(`\]\((charts/[a-z0-9-]+\.png)\)`).FindAllStringSubmatch(string(md), -1)
	if len(refs) != 2 { // the aggregate has no distribution to draw
		t.Fatalf("%d chart references, want 2:\n%s", len(refs), md)
	}
	for _, ref := range refs {
		f, err := os.Open(filepath.Join(dir, ref[1]))
		if err != nil {
			t.Fatal(err)
		}
		img, err := png.Decode(f)
		f.Close()
		if err != nil {
			t.Fatalf("%s: %v", ref[1], err)
		}
		if b := img.Bounds(); b.Dx() < 300 || b.Dy() < 150 || b.Dx() > 4000 {
			t.Errorf("%s is %v", ref[1], b)
		}
	}
}

func ptr[T any](v T) *T { return &v }
