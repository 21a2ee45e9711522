package main

import (
	"testing"
	"time"
)

func TestParseRate(t *testing.T) {
	for in, want := range map[string]struct {
		n     int64
		per   time.Duration
		burst int64
	}{"10/s": {10, time.Second, 0}, "30/m,5": {30, time.Minute, 5}, "0": {0, time.Second, 0}, "0/m": {0, time.Minute, 0}} {
		n, per, b, err := parseRate(in)
		if err != nil || n != want.n || per != want.per || b != want.burst {
			t.Errorf("parseRate(%q) = %d %v %d %v", in, n, per, b, err)
		}
	}
	for _, in := range []string{"", "10", "10/h", "-1/s", "1.5/s", "10/s,", "10/s,0", "10/s,x", "/s", "1/s,2,3", "9999999999/s", " 1/s"} {
		if _, _, _, err := parseRate(in); err == nil {
			t.Errorf("parseRate(%q) accepted", in)
		}
	}
}

// FuzzParseRate: what is accepted is a non-negative count a second or a
// minute and a non-negative burst, and never panics.
func FuzzParseRate(f *testing.F) {
	for _, s := range []string{"10/s", "30/m,5", "0", "10/s,", "1/s,2,3", "999999999/m,999999999", "+1/s", "1e3/s"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, per, b, err := parseRate(s)
		if err != nil {
			return
		}
		if n < 0 || b < 0 || n > 999999999 || b > 999999999 || (per != time.Second && per != time.Minute) {
			t.Fatalf("%q accepted as %d/%v,%d", s, n, per, b)
		}
	})
}
