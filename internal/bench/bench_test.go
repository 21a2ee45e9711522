package bench

import (
	"slices"
	"strings"
	"testing"
)

// The end-to-end run of the whole bench (a daemon, every measurement,
// the leak check after it) is test/e2e's TestBenchTiny: it needs root and
// runc, so it belongs to make e2e, not to the unit target.

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
