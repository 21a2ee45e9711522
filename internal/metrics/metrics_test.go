package metrics

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

func fullSnapshot() Snapshot {
	return Snapshot{
		Sandboxes: []SandboxStat{
			{State: "running", Template: "base", Class: "runc"},
			{State: "running", Template: "base", Class: "runc"},
			{State: "paused", Template: "py", Class: "runsc"},
			{State: "deleting", Template: "base", Class: "runc", TeardownFailed: true},
		},
		Pools:         []PoolStat{{Template: "base", Target: 3, Ready: 2, Start: 1, Hits: 7, Misses: 2}},
		Storage:       map[string]int64{"volumes": 100, "scratch": 20, "layers": 5000},
		CapacityBytes: 1 << 30,
	}
}

func TestRecorderCounts(t *testing.T) {
	m := New()
	m.CreateFailed("not_found")
	m.CreateFailed("not_found")
	m.CreateFailed("invalid_argument")
	m.Created("base", "runc", "cold", 2*time.Second)
	m.Created("base", "runc", "pool", 50*time.Millisecond)
	m.ExecDone("ok", time.Millisecond)
	m.ExecDone("nonzero", time.Millisecond)
	m.ExecDone("nonzero", time.Millisecond)
	m.TeardownFailed(false)
	m.TeardownFailed(true)
	m.Orphan("dir", true)
	m.Orphan("cgroup", false)
	m.Egress("deny")
	m.Egress("allow")
	m.Egress("something-else")
	m.WebhookDelivery(false)
	for _, tc := range []struct {
		got  float64
		want float64
		what string
	}{
		{testutil.ToFloat64(m.creates.WithLabelValues("not_found")), 2, "creates not_found"},
		{testutil.ToFloat64(m.creates.WithLabelValues("invalid_argument")), 1, "creates invalid_argument"},
		{testutil.ToFloat64(m.creates.WithLabelValues("ok")), 2, "creates ok"},
		{testutil.ToFloat64(m.execs.WithLabelValues("nonzero")), 2, "execs nonzero"},
		{testutil.ToFloat64(m.teardownFails.WithLabelValues("attempt")), 1, "teardown attempt"},
		{testutil.ToFloat64(m.teardownFails.WithLabelValues("incomplete")), 1, "teardown incomplete"},
		{testutil.ToFloat64(m.orphansFound.WithLabelValues("cgroup")), 1, "orphans found cgroup"},
		{testutil.ToFloat64(m.orphansGone.WithLabelValues("cgroup")), 0, "orphans removed cgroup"},
		{testutil.ToFloat64(m.orphansGone.WithLabelValues("dir")), 1, "orphans removed dir"},
		{testutil.ToFloat64(m.egress.WithLabelValues("allow")), 2, "egress allow (unknown folds to allow)"},
		{testutil.ToFloat64(m.webhooks.WithLabelValues("failed")), 1, "webhook failed"},
		{float64(testutil.CollectAndCount(m.tti)), 2, "TTI series (cold, pool)"},
	} {
		if tc.got != tc.want {
			t.Errorf("%s = %v, want %v", tc.what, tc.got, tc.want)
		}
	}
}

// TestTemplateLabelIsBounded: past MaxTemplates distinct names, templates
// fold into "other", so operator-made names cannot grow the series
// without bound.
func TestTemplateLabelIsBounded(t *testing.T) {
	m := New()
	for i := range MaxTemplates + 50 {
		m.Created(fmt.Sprintf("tpl-%d", i), "runc", "cold", time.Second)
	}
	if n := testutil.CollectAndCount(m.tti); n != MaxTemplates+1 {
		t.Fatalf("TTI series: %d, want %d (MaxTemplates and other)", n, MaxTemplates+1)
	}
	if got := m.Template("tpl-3"); got != "tpl-3" {
		t.Fatalf("a known template became %q", got)
	}
	if got := m.Template("new-one"); got != OtherTemplate {
		t.Fatalf("a template past the cap is %q", got)
	}
}

func TestStateGaugesFromSnapshot(t *testing.T) {
	m := New()
	m.Watch(func(context.Context) (Snapshot, error) { return fullSnapshot(), nil }, time.Minute)
	want := `
# HELP berth_sandboxes Sandboxes by state, template and runtime class (this node's records).
# TYPE berth_sandboxes gauge
berth_sandboxes{class="runc",state="deleting",template="base"} 1
berth_sandboxes{class="runc",state="running",template="base"} 2
berth_sandboxes{class="runsc",state="paused",template="py"} 1
# HELP berth_sandboxes_undeleted Sandboxes left after a failed deletion: teardown failed and waits on the reconciler's retry.
# TYPE berth_sandboxes_undeleted gauge
berth_sandboxes_undeleted 1
# HELP berth_pool_hits_total Creates served by a warm pool member, by template.
# TYPE berth_pool_hits_total counter
berth_pool_hits_total{template="base"} 7
# HELP berth_pool_ready Warm pool members ready to claim, by template.
# TYPE berth_pool_ready gauge
berth_pool_ready{template="base"} 2
# HELP berth_storage_bytes Storage in use by kind: volumes, scratch (writable root layers), snapshots, layers.
# TYPE berth_storage_bytes gauge
berth_storage_bytes{kind="layers"} 5000
berth_storage_bytes{kind="scratch"} 20
berth_storage_bytes{kind="snapshots"} 0
berth_storage_bytes{kind="volumes"} 100
# HELP berth_storage_capacity_bytes Size of the storage pool sandboxes' disks and volumes come from.
# TYPE berth_storage_capacity_bytes gauge
berth_storage_capacity_bytes 1.073741824e+09
# HELP berth_metrics_source_up 1 if the last read of the scrape-time gauges (store, pools, storage) succeeded, 0 if not.
# TYPE berth_metrics_source_up gauge
berth_metrics_source_up 1
`
	if err := testutil.GatherAndCompare(m.Registry(), strings.NewReader(want),
		"berth_sandboxes", "berth_sandboxes_undeleted", "berth_pool_hits_total", "berth_pool_ready",
		"berth_storage_bytes", "berth_storage_capacity_bytes", "berth_metrics_source_up"); err != nil {
		t.Fatal(err)
	}
}

// TestSnapshotIsCached: scrapes within maxAge read the source once; a
// failed read says so (source_up 0) and keeps the last good figures.
func TestSnapshotIsCached(t *testing.T) {
	m := New()
	var reads atomic.Int32
	var fail atomic.Bool
	m.Watch(func(context.Context) (Snapshot, error) {
		reads.Add(1)
		if fail.Load() {
			return Snapshot{}, errors.New("store down")
		}
		return fullSnapshot(), nil
	}, 200*time.Millisecond)
	for range 5 {
		if _, err := m.Registry().Gather(); err != nil {
			t.Fatal(err)
		}
	}
	if n := reads.Load(); n != 1 {
		t.Fatalf("5 scrapes within maxAge read the source %d times", n)
	}
	fail.Store(true)
	time.Sleep(250 * time.Millisecond)
	const want = `
# HELP berth_metrics_source_up 1 if the last read of the scrape-time gauges (store, pools, storage) succeeded, 0 if not.
# TYPE berth_metrics_source_up gauge
berth_metrics_source_up 0
# HELP berth_sandboxes_undeleted Sandboxes left after a failed deletion: teardown failed and waits on the reconciler's retry.
# TYPE berth_sandboxes_undeleted gauge
berth_sandboxes_undeleted 1
`
	if err := testutil.GatherAndCompare(m.Registry(), strings.NewReader(want), "berth_metrics_source_up", "berth_sandboxes_undeleted"); err != nil {
		t.Fatal(err)
	}
	if n := reads.Load(); n != 2 {
		t.Fatalf("source reads after expiry: %d, want 2", n)
	}
}

// TestPoolsFoldedIntoOther: pools past the template cap are summed into
// one "other" series, never exported twice under the same labels.
func TestPoolsFoldedIntoOther(t *testing.T) {
	m := New()
	var pools []PoolStat
	for i := range MaxTemplates + 2 {
		pools = append(pools, PoolStat{Template: fmt.Sprintf("p%d", i), Target: 1, Ready: 1})
	}
	m.Watch(func(context.Context) (Snapshot, error) { return Snapshot{Pools: pools}, nil }, time.Minute)
	fams, err := m.Registry().Gather() // a duplicate series would fail the gather
	if err != nil {
		t.Fatal(err)
	}
	other := -1.0
	for _, f := range fams {
		if f.GetName() != "berth_pool_target" {
			continue
		}
		if len(f.GetMetric()) != MaxTemplates+1 {
			t.Fatalf("pool target series: %d, want %d", len(f.GetMetric()), MaxTemplates+1)
		}
		for _, s := range f.GetMetric() {
			if s.GetLabel()[0].GetValue() == OtherTemplate {
				other = s.GetGauge().GetValue()
			}
		}
	}
	if other != 2 {
		t.Fatalf(`berth_pool_target{template="other"} = %v, want 2`, other)
	}
}
