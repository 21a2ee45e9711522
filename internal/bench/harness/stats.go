package harness

import (
	"math"
	"slices"
	"strconv"
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

// Summarize computes nearest-rank percentiles of samples.
func Summarize(samples []float64) Stat {
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
		P50:  Percentile(s, 0.50),
		P95:  Percentile(s, 0.95),
		P99:  Percentile(s, 0.99),
		Min:  s[0],
		Max:  s[len(s)-1],
		Mean: sum / float64(len(s)),
	}
}

// Percentile returns the nearest-rank q-quantile of sorted samples.
func Percentile(sorted []float64, q float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(q*float64(len(sorted)))) - 1
	i = max(0, min(i, len(sorted)-1))
	return sorted[i]
}

// Aggregate is a Stat holding one value computed over n items.
func Aggregate(v float64, n int) Stat {
	return Stat{N: n, P50: v, P95: v, P99: v, Min: v, Max: v, Mean: v, Aggregate: true}
}

// MS converts a duration to milliseconds.
func MS(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// MiB converts bytes to MiB.
func MiB(b float64) float64 { return b / (1 << 20) }

// Samples collects latency samples, in milliseconds.
type Samples struct{ V []float64 }

// Add records d.
func (s *Samples) Add(d time.Duration) { s.V = append(s.V, MS(d)) }

// SizeLabel formats a byte size for row names: "10 MiB", "1 GiB".
func SizeLabel(b int64) string {
	units := []struct {
		n    int64
		name string
	}{{1 << 30, "GiB"}, {1 << 20, "MiB"}, {1 << 10, "KiB"}}
	for _, u := range units {
		if b >= u.n {
			if b%u.n == 0 {
				return strconv.FormatInt(b/u.n, 10) + " " + u.name
			}
			return strconv.FormatFloat(float64(b)/float64(u.n), 'f', 1, 64) + " " + u.name
		}
	}
	return strconv.FormatInt(b, 10) + " B"
}
