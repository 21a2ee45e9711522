package bench

import (
	"slices"
	"strings"
	"testing"
)

// The end-to-end run of the whole bench (a daemon, every measurement,
// the leak check after it) is test/e2e's TestBenchTiny: it needs root and
// runc, so it belongs to make e2e, not to the unit target.

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
