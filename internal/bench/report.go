package bench

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/berth-sh/berth/internal/bench/harness"
)

// WriteTable prints rep for people: machine, one line per row, notes,
// cleanup and a verdict.
func WriteTable(w io.Writer, rep *Report) error {
	m := rep.Machine
	fmt.Fprintf(w, "berth bench  %s\n", rep.Started.Format("2006-01-02 15:04:05 UTC"))
	fmt.Fprintf(w, "machine: %d CPUs (%s), %d MiB RAM, %s, cgroup %s\n", m.CPUs, orDash(m.CPUModel), m.MemTotalMiB, m.Kernel, m.Cgroup)
	fmt.Fprintf(w, "runc %s, berth %s (%s)", orDash(m.Runc), orDash(m.Berth), m.Go)
	if m.BerthBytes > 0 {
		fmt.Fprintf(w, "; binaries: berthd %s, berth (CLI) %s, berth-agent %s", sizeMiB(m.BerthBytes), sizeMiB(m.CLIBytes), sizeMiB(m.AgentBytes))
	}
	fmt.Fprintln(w)
	fmt.Fprintf(w, "iterations %d, idle %d, churn %gs, concurrency %d, expiry %d", rep.Iterations, rep.Idle,
		rep.ChurnSecs, rep.Concurrency, rep.Expiry)
	if rep.ExpiryStop > 0 {
		fmt.Fprintf(w, " (stop %d)", rep.ExpiryStop)
	}
	if len(rep.ForkSizes) > 0 {
		sizes := make([]string, len(rep.ForkSizes))
		for i, sz := range rep.ForkSizes {
			sizes[i] = harness.SizeLabel(sz)
		}
		fmt.Fprintf(w, "; fork sizes %s (%d iterations each)", strings.Join(sizes, ", "), rep.ForkIterations)
	}
	if len(rep.ServeArgs) > 0 {
		fmt.Fprintf(w, "; daemon flags %s", strings.Join(rep.ServeArgs, " "))
	}
	fmt.Fprintf(w, "; took %.0fs\n\n", rep.Seconds)

	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "MEASUREMENT\tBERTH p50\tp95\tn\tPEER\tp50\tp95\tn\tRATIO\tTARGET\tRESULT")
	var notes []string
	for _, r := range rep.Rows {
		peer, pp50, pp95, pn, ratio := "-", "-", "-", "-", "-"
		if r.PeerStat != nil {
			peer = r.Peer
			pp50, pp95 = value(r.PeerStat.P50, r.Unit), p95(*r.PeerStat, r.Unit)
			pn = strconv.Itoa(r.PeerStat.N)
		}
		if r.Ratio > 0 {
			ratio = fmt.Sprintf("%.2f×", r.Ratio)
		}
		result := "-"
		if r.Pass != nil {
			result = "PASS"
			if !*r.Pass {
				result = "FAIL"
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.Name,
			value(r.Berth.P50, r.Unit), p95(r.Berth, r.Unit), r.Berth.N,
			peer, pp50, pp95, pn, ratio, orDash(r.Target), result)
		if r.Note != "" {
			notes = append(notes, fmt.Sprintf("  %s: %s", strings.TrimSpace(r.Name), r.Note))
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w, "\nratio = berth p50 / peer p50. Aggregates (rates, totals, averages over N) show one value.")
	if len(notes) > 0 {
		fmt.Fprintln(w, "notes:")
		for _, n := range notes {
			fmt.Fprintln(w, n)
		}
	}
	cl := rep.Cleanup
	state := "clean"
	if !cl.Clean() {
		state = "NOT clean"
	}
	fmt.Fprintf(w, "cleanup: %s (doctor healthy: %v", state, cl.DoctorHealthy)
	if len(cl.DoctorFindings) > 0 {
		fmt.Fprintf(w, "; findings: %s", strings.Join(cl.DoctorFindings, "; "))
	}
	if len(cl.Leftover) > 0 {
		fmt.Fprintf(w, "; left over: %s", strings.Join(cl.Leftover, ", "))
	}
	if len(cl.Errors) > 0 {
		fmt.Fprintf(w, "; errors: %s", strings.Join(cl.Errors, "; "))
	}
	fmt.Fprintln(w, ")")
	targets := 0
	for _, r := range rep.Rows {
		if r.Pass != nil {
			targets++
		}
	}
	_, err := fmt.Fprintf(w, "targets: %d of %d met\n", targets-rep.Failed, targets)
	return err
}

// value formats v in unit.
func value(v float64, unit string) string {
	switch unit {
	case "ms":
		switch {
		case v < 10:
			return fmt.Sprintf("%.2f ms", v)
		case v < 100:
			return fmt.Sprintf("%.1f ms", v)
		}
		return fmt.Sprintf("%.0f ms", v)
	case "MiB":
		return fmt.Sprintf("%.1f MiB", v)
	case "MiB/s":
		return fmt.Sprintf("%.0f MiB/s", v)
	case "/s":
		return fmt.Sprintf("%.1f/s", v)
	case "s":
		return fmt.Sprintf("%.2f s", v)
	case "":
		return fmt.Sprintf("%g", v)
	}
	return fmt.Sprintf("%g %s", v, unit)
}

func p95(s Stat, unit string) string {
	if s.Aggregate {
		return "-"
	}
	return value(s.P95, unit)
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
