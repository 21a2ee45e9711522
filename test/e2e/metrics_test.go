package e2e

import (
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/berth-sh/berth/api"
)

// TestMetricsScenario: the seed's measures move as a scripted scenario
// says they must, read from /metrics of a real daemon before and after
// each step: a failing create counted with its reason, a create's time to
// interactive, execs by outcome, a resume timed, a deletion's cleanup
// lag, and an orphan planted and counted when the sweep removes it.
func TestMetricsScenario(t *testing.T) {
	parallel(t)
	d := startDaemon(t)
	ctx := context.Background()
	before := scrape(t, d)

	// A create of a template that does not exist: refused, counted as not_found.
	if _, err := d.c.CreateSandbox(ctx, api.CreateSandboxRequest{Template: "no-such-template"}); err == nil {
		t.Fatal("create of a missing template succeeded")
	}
	after := scrape(t, d)
	if n := delta(before, after, "berth_sandbox_creates_total", "code", "not_found"); n != 1 {
		t.Fatalf("failed creates counted as not_found: %v, want 1", n)
	}

	sb, err := d.c.CreateSandbox(ctx, api.CreateSandboxRequest{})
	if err != nil {
		t.Fatal(err)
	}
	before, after = after, scrape(t, d)
	if n := delta(before, after, "berth_sandbox_creates_total", "code", "ok"); n != 1 {
		t.Fatalf("successful creates counted: %v, want 1", n)
	}
	if n := delta(before, after, "berth_time_to_interactive_seconds", "template", "base", "path", "cold"); n != 1 {
		t.Fatalf("time to interactive observations of a cold base create: %v, want 1", n)
	}
	if s := sum(after, "berth_time_to_interactive_seconds"); s <= 0 {
		t.Fatalf("time to interactive sums to %v", s)
	}
	// Each step of the cold create's provision is timed (a warm pool
	// sized from the create rate may add its own): the network default is
	// none, so netns and network are near nothing but observed.
	for _, step := range []string{"mounts", "userns", "netns", "agent-channel", "runtime-start", "network", "agent-ready"} {
		if n := delta(before, after, "berth_provision_step_seconds", "step", step); n < 1 {
			t.Errorf("provision step %s observed %v times in a cold create, want at least 1", step, n)
		}
	}
	if s := sum(after, "berth_provision_step_seconds"); s <= 0 {
		t.Errorf("provision steps sum to %v", s)
	}
	// The state gauges are read from the store at most every 5s.
	deadline := time.Now().Add(10 * time.Second)
	for {
		m := scrape(t, d)
		running, scratch := value(m, "berth_sandboxes", "state", "running", "template", "base"), value(m, "berth_storage_bytes", "kind", "scratch")
		if running == 1 && scratch > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after a create: berth_sandboxes{state=running,template=base} %v, scratch bytes %v", running, scratch)
		}
		time.Sleep(500 * time.Millisecond)
	}

	if out := execOut(t, d, sb.ID, "true"); out != "" {
		t.Fatalf("true printed %q", out)
	}
	exit, err := d.c.Exec(ctx, sb.ID, api.ExecRequest{Cmd: []string{"sh", "-c", "exit 3"}}, io.Discard, io.Discard)
	if err != nil || exit.Code != 3 {
		t.Fatalf("exit 3: %+v, %v", exit, err)
	}
	before, after = after, scrape(t, d)
	if n := delta(before, after, "berth_exec_completions_total", "outcome", "ok"); n != 1 {
		t.Fatalf("execs ok: %v, want 1", n)
	}
	if n := delta(before, after, "berth_exec_completions_total", "outcome", "nonzero"); n != 1 {
		t.Fatalf("execs nonzero: %v, want 1", n)
	}
	if n := delta(before, after, "berth_exec_duration_seconds", "outcome", "nonzero"); n != 1 {
		t.Fatalf("exec durations of nonzero exits: %v, want 1", n)
	}

	if _, err := d.c.Pause(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := d.c.Resume(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	before, after = after, scrape(t, d)
	if n := delta(before, after, "berth_resume_seconds", "kind", "unpause"); n != 1 {
		t.Fatalf("unpause resumes timed: %v, want 1", n)
	}

	if _, err := d.c.DeleteSandbox(ctx, sb.ID, false); err != nil {
		t.Fatal(err)
	}
	before, after = after, scrape(t, d)
	if n := delta(before, after, "berth_cleanup_lag_seconds", "cause", "user"); n != 1 {
		t.Fatalf("cleanup lags of user deletions: %v, want 1", n)
	}
	if n := value(after, "berth_sandboxes_undeleted"); n != 0 {
		t.Fatalf("sandboxes left after a failed deletion: %v", n)
	}

	// A policy deletion: max age reached, deleted by the reconciler; its
	// cleanup lag counts from the deadline.
	aged, err := d.c.CreateSandbox(ctx, api.CreateSandboxRequest{Policy: api.Policy{MaxAgeSeconds: 2, OnMaxAge: "delete"}})
	if err != nil {
		t.Fatal(err)
	}
	deadline = time.Now().Add(20 * time.Second)
	for {
		got, err := d.c.GetSandbox(ctx, aged.ID)
		if err != nil {
			t.Fatal(err)
		}
		if got.State == "deleted" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("max-age sandbox still %s after 20s", got.State)
		}
		time.Sleep(200 * time.Millisecond)
	}
	before, after = after, scrape(t, d)
	if n := delta(before, after, "berth_policy_actions_total", "policy", "max_age", "action", "delete"); n != 1 {
		t.Fatalf("max_age deletions counted: %v, want 1", n)
	}
	if n := delta(before, after, "berth_cleanup_lag_seconds", "cause", "policy"); n != 1 {
		t.Fatalf("cleanup lags of policy deletions: %v, want 1", n)
	}

	// An orphan: a sandbox state dir no record accounts for (as a crash
	// between creating it and writing the record would leave).
	orphan := filepath.Join(d.dataDir, "sandboxes", "orphanmetrics001")
	if err := os.MkdirAll(orphan, 0o700); err != nil {
		t.Fatal(err)
	}
	rep, err := d.c.Doctor(ctx, true)
	if err != nil {
		t.Fatal(err)
	}
	fixed := false
	for _, f := range rep.Findings {
		if f.Kind == "dir" && f.ID == "orphanmetrics001" && f.Fixed {
			fixed = true
		}
	}
	if !fixed {
		t.Fatalf("doctor --fix did not remove the planted dir: %+v", rep.Findings)
	}
	if _, err := os.Stat(orphan); !os.IsNotExist(err) {
		t.Fatalf("planted orphan still there: %v", err)
	}
	before, after = after, scrape(t, d)
	if n := delta(before, after, "berth_orphans_found_total", "kind", "dir"); n != 1 {
		t.Fatalf("dir orphans found: %v, want 1", n)
	}
	if n := delta(before, after, "berth_orphans_removed_total", "kind", "dir"); n != 1 {
		t.Fatalf("dir orphans removed: %v, want 1", n)
	}
	// The scrape-time gauges: always exported, storage of every kind.
	for _, kind := range []string{"volumes", "scratch", "snapshots", "layers"} {
		if _, ok := find(after, "berth_storage_bytes", "kind", kind); !ok {
			t.Errorf("no berth_storage_bytes{kind=%q}", kind)
		}
	}
	if n := value(after, "berth_storage_bytes", "kind", "layers"); n <= 0 {
		t.Errorf("layers in use: %v bytes, want > 0 (the base template's)", n)
	}
	if n := value(after, "berth_metrics_source_up"); n != 1 {
		t.Errorf("berth_metrics_source_up = %v", n)
	}
	assertDoctorClean(t, d)
	assertNoLeaks(t, d)
}

// scrape reads and parses the daemon's /metrics.
func scrape(t *testing.T, d *daemon) map[string]*dto.MetricFamily {
	t.Helper()
	hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", d.socket)
	}}}
	resp, err := hc.Get("http://berth/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("/metrics: %s", resp.Status)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("parsing /metrics: %v", err)
	}
	return fams
}

// find returns the first sample of name whose labels include the pairs.
func find(fams map[string]*dto.MetricFamily, name string, pairs ...string) (*dto.Metric, bool) {
	ms := matching(fams, name, pairs...)
	if len(ms) == 0 {
		return nil, false
	}
	return ms[0], true
}

func matching(fams map[string]*dto.MetricFamily, name string, pairs ...string) []*dto.Metric {
	f := fams[name]
	if f == nil {
		return nil
	}
	var out []*dto.Metric
next:
	for _, m := range f.GetMetric() {
		for i := 0; i+1 < len(pairs); i += 2 {
			ok := false
			for _, l := range m.GetLabel() {
				if l.GetName() == pairs[i] && l.GetValue() == pairs[i+1] {
					ok = true
				}
			}
			if !ok {
				continue next
			}
		}
		out = append(out, m)
	}
	return out
}

// value sums the matching samples: counters' and gauges' values,
// histograms' observation counts.
func value(fams map[string]*dto.MetricFamily, name string, pairs ...string) float64 {
	var v float64
	for _, m := range matching(fams, name, pairs...) {
		switch {
		case m.Counter != nil:
			v += m.Counter.GetValue()
		case m.Gauge != nil:
			v += m.Gauge.GetValue()
		case m.Histogram != nil:
			v += float64(m.Histogram.GetSampleCount())
		}
	}
	return v
}

// sum is the sum of a histogram's observations.
func sum(fams map[string]*dto.MetricFamily, name string, pairs ...string) float64 {
	var v float64
	for _, m := range matching(fams, name, pairs...) {
		v += m.GetHistogram().GetSampleSum()
	}
	return v
}

func delta(before, after map[string]*dto.MetricFamily, name string, pairs ...string) float64 {
	return value(after, name, pairs...) - value(before, name, pairs...)
}

// TestMetricsEgressDecisions: the egress firewall's flow log is counted by
// decision: an allowed fetch and a refused one move allow and deny.
func TestMetricsEgressDecisions(t *testing.T) {
	parallel(t)
	topo := newNetTopo(t)
	d := startDaemonIn(t, topo.host)
	ctx := context.Background()
	before := scrape(t, d)
	sb, err := d.c.CreateSandbox(ctx, api.CreateSandboxRequest{Network: "egress", Allow: []string{"tcp://198.51.100.2:8080"}})
	if err != nil {
		t.Fatal(err)
	}
	fetch := func(url string) int {
		exit, err := d.c.Exec(ctx, sb.ID, api.ExecRequest{Cmd: []string{"python3", "-c",
			"import urllib.request,sys\ntry:\n urllib.request.urlopen('" + url + "', timeout=3).read()\nexcept Exception:\n sys.exit(1)"}}, io.Discard, io.Discard)
		if err != nil {
			t.Fatalf("exec: %v", err)
		}
		return exit.Code
	}
	code := 1
	for i := 0; i < 30 && code != 0; i++ { // the test server is starting
		if code = fetch("http://198.51.100.2:8080/index.html"); code != 0 {
			time.Sleep(100 * time.Millisecond)
		}
	}
	if code != 0 {
		t.Fatal("allowed destination unreachable")
	}
	if fetch("http://203.0.113.10:8080/") == 0 {
		t.Fatal("a destination no rule allows was reachable")
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		after := scrape(t, d)
		allow := delta(before, after, "berth_egress_decisions_total", "decision", "allow")
		deny := delta(before, after, "berth_egress_decisions_total", "decision", "deny")
		if allow >= 1 && deny >= 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("egress decisions after an allowed and a refused fetch: allow +%v, deny +%v", allow, deny)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if _, err := d.c.DeleteSandbox(ctx, sb.ID, false); err != nil {
		t.Fatal(err)
	}
	assertNoLeaks(t, d)
}

// TestMetricsPool: a create served by a warm pool member is timed as
// path="pool" and as a pool_claim resume, and the pool's gauges and hit
// counter show it.
func TestMetricsPool(t *testing.T) {
	parallel(t)
	d := startDaemon(t)
	ctx := context.Background()
	if _, err := d.c.SetPool(ctx, "base", 1); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		p, err := d.c.GetPool(ctx, "base")
		if err == nil && p.Ready >= 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("pool not filled: %+v %v", p, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	before := scrape(t, d)
	sb, err := d.c.CreateSandbox(ctx, api.CreateSandboxRequest{})
	if err != nil {
		t.Fatal(err)
	}
	after := scrape(t, d)
	if n := delta(before, after, "berth_time_to_interactive_seconds", "template", "base", "path", "pool"); n != 1 {
		t.Fatalf("pool creates timed: %v, want 1", n)
	}
	if n := delta(before, after, "berth_resume_seconds", "kind", "pool_claim"); n != 1 {
		t.Fatalf("pool claims timed: %v, want 1", n)
	}
	// The gauges are read at most every 5s: wait for the claim to show.
	deadline = time.Now().Add(15 * time.Second)
	for {
		after = scrape(t, d)
		if value(after, "berth_pool_hits_total", "template", "base") == 1 && value(after, "berth_pool_target", "template", "base") == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("pool gauges: hits %v, target %v", value(after, "berth_pool_hits_total", "template", "base"),
				value(after, "berth_pool_target", "template", "base"))
		}
		time.Sleep(500 * time.Millisecond)
	}
	if _, err := d.c.DeleteSandbox(ctx, sb.ID, false); err != nil {
		t.Fatal(err)
	}
	if _, err := d.c.SetPool(ctx, "base", 0); err != nil {
		t.Fatal(err)
	}
}
