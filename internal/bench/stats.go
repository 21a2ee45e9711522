package bench

import (
	"math"
	"slices"
	"time"
)

// Stat summarises the samples of one measurement, in its row's unit.
type Stat struct {
	N    int     `json:"n"`
	P50  float64 `json:"p50"`
	P95  float64 `json:"p95"`
	P99  float64 `json:"p99"`
	Min  float64 `json:"min"`
	Max  float64 `json:"max"`
	Mean float64 `json:"mean"`
	// Aggregate marks a figure that is one value over N items (a rate, a
	// total, a per-item average); P50 and P95 then both hold that value.
	Aggregate bool `json:"aggregate,omitempty"`
}

// summarize computes nearest-rank percentiles of samples.
func summarize(samples []float64) Stat {
	if len(samples) == 0 {
		return Stat{}
	}
	s := slices.Clone(samples)
	slices.Sort(s)
	sum := 0.0
	for _, v := range s {
		sum += v
	}
	return Stat{
		N:    len(s),
		P50:  percentile(s, 0.50),
		P95:  percentile(s, 0.95),
		P99:  percentile(s, 0.99),
		Min:  s[0],
		Max:  s[len(s)-1],
		Mean: sum / float64(len(s)),
	}
}

// percentile returns the nearest-rank q-quantile of sorted samples.
func percentile(sorted []float64, q float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(q*float64(len(sorted)))) - 1
	i = max(0, min(i, len(sorted)-1))
	return sorted[i]
}

// aggregate is a Stat holding one value computed over n items.
func aggregate(v float64, n int) Stat {
	return Stat{N: n, P50: v, P95: v, P99: v, Min: v, Max: v, Mean: v, Aggregate: true}
}

// ms converts a duration to milliseconds.
func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// mib converts bytes to MiB.
func mib(b float64) float64 { return b / (1 << 20) }

// durations collects latency samples from concurrent goroutines.
type samples struct{ v []float64 }

func (s *samples) add(d time.Duration) { s.v = append(s.v, ms(d)) }
