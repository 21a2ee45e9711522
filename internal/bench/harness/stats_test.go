package harness

import "testing"

func TestSummarize(t *testing.T) {
	s := Summarize([]float64{5, 1, 4, 2, 3, 6, 7, 8, 9, 10})
	if s.N != 10 || s.P50 != 5 || s.P95 != 10 || s.Min != 1 || s.Max != 10 || s.Mean != 5.5 {
		t.Fatalf("Summarize = %+v", s)
	}
	if s := Summarize([]float64{42}); s.P50 != 42 || s.P95 != 42 {
		t.Fatalf("one sample: %+v", s)
	}
}
