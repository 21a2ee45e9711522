package pools

import (
	"testing"
	"time"
)

// TestDemandPeak: the automatic pool's size is the most creates of one
// 10-second bucket within the idle window; older buckets are forgotten.
func TestDemandPeak(t *testing.T) {
	var d demand
	t0 := time.Date(2026, 12, 7, 4, 0, 0, 0, time.UTC)
	if got := d.peak(t0, time.Minute); got != 0 {
		t.Fatalf("no demand: peak %d", got)
	}
	for i := range 5 {
		d.note(t0.Add(time.Duration(i) * time.Second))
	}
	d.note(t0.Add(12 * time.Second))
	d.note(t0.Add(13 * time.Second))
	for _, tc := range []struct {
		at   time.Duration
		want int
	}{
		{14 * time.Second, 5},
		{59 * time.Second, 5},  // the burst's bucket is within the minute
		{65 * time.Second, 5},  // a bucket counts while its end is within it
		{75 * time.Second, 2},  // only the later bucket is
		{85 * time.Second, 0},  // both are older than a minute
		{200 * time.Second, 0}, // and forgotten
	} {
		if got := d.peak(t0.Add(tc.at), time.Minute); got != tc.want {
			t.Errorf("peak at +%s = %d, want %d", tc.at, got, tc.want)
		}
	}
	if len(d.buckets) != 0 {
		t.Errorf("old buckets kept: %v", d.buckets)
	}
}
