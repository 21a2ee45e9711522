package bench

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os/exec"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/berth-sh/berth/internal/bench/harness"
	"github.com/berth-sh/berth/internal/node/local"
)

// stepTotals are berth_provision_step_seconds' sum and count by step, as
// the daemon's /metrics said at one moment.
type stepTotals map[string]struct{ sum, n float64 }

// provisionSteps reads the daemon's provision step histogram.
func (b *bench) provisionSteps(ctx context.Context) (stepTotals, error) {
	hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", b.d.Sock)
	}}}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://berth/metrics", nil)
	if err != nil {
		return nil, err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("/metrics: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("/metrics: %s", resp.Status)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("/metrics: %w", err)
	}
	out := stepTotals{}
	if f := fams["berth_provision_step_seconds"]; f != nil {
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "step" {
					h := m.GetHistogram()
					out[l.GetValue()] = struct{ sum, n float64 }{h.GetSampleSum(), float64(h.GetSampleCount())}
				}
			}
		}
	}
	return out, nil
}

// addStepRows adds, under time to interactive, each provision step's mean
// over the creates between before and after, and the namespaces' floor:
// `unshare` of the namespaces a sandbox gets, running true, timed floor.V
// in the same loop.
func (b *bench) addStepRows(before, after stepTotals, floor *harness.Samples) {
	var total float64
	for _, step := range local.Steps {
		a, o := after[step], before[step]
		n := a.n - o.n
		if n <= 0 {
			continue
		}
		mean := (a.sum - o.sum) / n * 1000
		total += mean
		b.Add(harness.Row{Measurement: TTI, Name: "  provision step " + step + " (mean)", Unit: "ms",
			Berth: harness.Stat{N: int(n), P50: mean, P95: mean, Mean: mean, Aggregate: true}, Note: "berth_provision_step_seconds: Δsum/Δcount over the creates above"})
	}
	fs := harness.Summarize(floor.V)
	b.Add(harness.Row{Measurement: TTI, Name: "  provision, all steps (mean) vs the namespaces' floor", Unit: "ms",
		Berth: harness.Stat{N: fs.N, P50: total, P95: total, Mean: total, Aggregate: true}, Peer: "unshare -Umpnicu --fork true", PeerStat: &fs,
		Note: "the floor: a process in new user, mount, pid, net, ipc, uts and cgroup namespaces, exec of true, exit"})
}

// unshareTrue times one process in the namespaces a sandbox gets.
func unshareTrue(ctx context.Context) (time.Duration, error) {
	cmd := exec.CommandContext(ctx, "unshare", "--user", "--map-root-user", "--mount", "--pid", "--fork",
		"--net", "--ipc", "--uts", "--cgroup", "true")
	t0 := time.Now()
	out, err := cmd.CombinedOutput()
	if err != nil {
		return 0, fmt.Errorf("unshare: %w: %s", err, out)
	}
	return time.Since(t0), nil
}
