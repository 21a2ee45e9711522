package bench

import (
	"fmt"
	"image/color"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
)

// WriteReport writes rep into dir for people who would rather look than
// read the table: dir/report.md (the table as Markdown, berth's p50 and
// p95 beside the peer's of the same run, the machine, date and version)
// and, for every row with a distribution (not an aggregate), a PNG chart
// of its percentiles, berth beside its peer, under dir/charts, referenced
// from the Markdown. dir is made if missing; files in it are replaced.
func WriteReport(dir string, rep *Report) error {
	if err := os.MkdirAll(filepath.Join(dir, "charts"), 0o755); err != nil {
		return err
	}
	var b strings.Builder
	m := rep.Machine
	fmt.Fprintf(&b, "# berth bench, %s\n\n", rep.Started.UTC().Format("2006-01-02 15:04 UTC"))
	fmt.Fprintf(&b, "- berth %s (%s), runc %s\n", mdCell(orDash(m.Berth)), mdCell(m.Go), mdCell(orDash(m.Runc)))
	fmt.Fprintf(&b, "- machine: %d CPUs (%s), %d MiB RAM, kernel %s, cgroup %s\n", m.CPUs, mdCell(orDash(m.CPUModel)),
		m.MemTotalMiB, mdCell(m.Kernel), mdCell(m.Cgroup))
	fmt.Fprintf(&b, "- iterations %d, idle %d, churn %gs, concurrency %d, expiry %d; took %.0fs\n\n",
		rep.Iterations, rep.Idle, rep.ChurnSecs, rep.Concurrency, rep.Expiry, rep.Seconds)
	b.WriteString("| measurement | berth p50 | berth p95 | n | peer | peer p50 | peer p95 | n | ratio | target | result |\n")
	b.WriteString("|---|---:|---:|---:|---|---:|---:|---:|---:|---|---|\n")
	var charts []string
	used := map[string]int{}
	for _, r := range rep.Rows {
		peer, pp50, pp95, pn, ratio := "-", "-", "-", "-", "-"
		if r.PeerStat != nil {
			peer, pp50, pp95 = r.Peer, value(r.PeerStat.P50, r.Unit), p95(*r.PeerStat, r.Unit)
			pn = strconv.Itoa(r.PeerStat.N)
		}
		if r.Ratio > 0 {
			ratio = fmt.Sprintf("%.2f×", r.Ratio)
		}
		result := "-"
		if r.Pass != nil {
			result = "PASS"
			if !*r.Pass {
				result = "**FAIL**"
			}
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %d | %s | %s | %s | %s | %s | %s | %s |\n", mdCell(strings.TrimSpace(r.Name)),
			value(r.Berth.P50, r.Unit), p95(r.Berth, r.Unit), r.Berth.N, mdCell(peer), pp50, pp95, pn, ratio,
			mdCell(orDash(r.Target)), result)
		if r.Berth.Aggregate || r.Berth.N == 0 {
			continue
		}
		name := slug(r.Name)
		if used[name]++; used[name] > 1 {
			name += "-" + strconv.Itoa(used[name])
		}
		file := filepath.Join("charts", name+".png")
		if err := chart(filepath.Join(dir, file), r); err != nil {
			return fmt.Errorf("chart of %s: %w", r.Name, err)
		}
		charts = append(charts, fmt.Sprintf("### %s\n\n![%s](%s)\n", mdCell(strings.TrimSpace(r.Name)), mdCell(strings.TrimSpace(r.Name)), filepath.ToSlash(file)))
	}
	b.WriteString("\nratio = berth p50 / peer p50. Aggregates (rates, totals, averages over N) show one value.\n")
	for _, r := range rep.Rows {
		if r.Note != "" {
			fmt.Fprintf(&b, "\n- %s: %s", mdCell(strings.TrimSpace(r.Name)), mdCell(r.Note))
		}
	}
	cl := rep.Cleanup
	state := "clean"
	if !cl.Clean() {
		state = "**not clean**"
	}
	fmt.Fprintf(&b, "\n\ncleanup: %s (doctor healthy: %v)\n", state, cl.DoctorHealthy)
	if len(charts) > 0 {
		b.WriteString("\n## Latency distributions\n\nmin, p50, p95, p99 and max of each measure, berth beside its peer.\n\n")
		b.WriteString(strings.Join(charts, "\n"))
	}
	return os.WriteFile(filepath.Join(dir, "report.md"), []byte(b.String()), 0o644)
}

// chart draws r's percentiles as grouped bars, berth beside its peer.
func chart(path string, r Row) error {
	p := plot.New()
	p.Title.Text = strings.TrimSpace(r.Name)
	p.Y.Label.Text = r.Unit
	p.Y.Min = 0
	labels := []string{"min", "p50", "p95", "p99", "max"}
	vals := func(s Stat) plotter.Values { return plotter.Values{s.Min, s.P50, s.P95, s.P99, s.Max} }
	w := vg.Points(14)
	berth, err := plotter.NewBarChart(vals(r.Berth), w)
	if err != nil {
		return err
	}
	berth.Color = color.RGBA{R: 0x1f, G: 0x6f, B: 0xb4, A: 0xff}
	berth.LineStyle.Width = 0
	p.Add(berth)
	p.Legend.Add("berth", berth)
	if r.PeerStat != nil && !r.PeerStat.Aggregate && r.PeerStat.N > 0 {
		peer, err := plotter.NewBarChart(vals(*r.PeerStat), w)
		if err != nil {
			return err
		}
		peer.Color = color.RGBA{R: 0xe0, G: 0x7b, B: 0x22, A: 0xff}
		peer.LineStyle.Width = 0
		berth.Offset, peer.Offset = -w/2, w/2
		p.Add(peer)
		p.Legend.Add(r.Peer, peer)
	}
	// Headroom above the tallest bar for the legend.
	top := r.Berth.Max
	if r.PeerStat != nil {
		top = max(top, r.PeerStat.Max)
	}
	p.Y.Max = top * 1.3
	p.Legend.Top = true
	p.NominalX(labels...)
	return p.Save(6*vg.Inch, 3.5*vg.Inch, path)
}

// slug is a file name for a row name: lower-case letters, digits and dashes.
func slug(s string) string {
	var b strings.Builder
	dash := false
	for _, c := range strings.ToLower(s) {
		if c >= 'a' && c <= 'z' || c >= '0' && c <= '9' {
			b.WriteRune(c)
			dash = false
		} else if !dash && b.Len() > 0 {
			b.WriteByte('-')
			dash = true
		}
	}
	out := strings.TrimSuffix(b.String(), "-")
	if out == "" {
		out = "row"
	}
	return out
}

// mdCell keeps a value inside its Markdown table cell.
func mdCell(s string) string {
	return strings.NewReplacer("|", `\|`, "\n", " ", "\r", " ").Replace(s)
}
