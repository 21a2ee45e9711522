// Package harness is what berth bench's measurements share: the report's
// row and statistics types, the private daemon they drive (internal/testenv's
// harness), the exec of `true` that marks a sandbox interactive, and the
// Recorder through which a measurement adds its rows and logs its progress.
// The parent package runs the measurements and re-exports these types, so
// its report is unchanged; measurement packages beside it (netbench) import
// this one, never the parent.
package harness

// Recorder is where a measurement puts what it found: rows of the report,
// progress lines, and a progress line every fifth of a loop.
type Recorder interface {
	// Add appends a row to the report, computing its ratio.
	Add(r Row)
	// Logf writes one progress line.
	Logf(format string, args ...any)
	// Every logs "what i+1/n" at each fifth of n and at the end.
	Every(i, n int, what string)
}

// Row is one line of the report: berth's figure beside its peer's.
type Row struct {
	Measurement string `json:"measurement"` // one of bench.All
	Name        string `json:"name"`
	Unit        string `json:"unit"` // ms, MiB, /s, s
	Berth       Stat   `json:"berth"`
	Peer        string `json:"peer,omitempty"`
	PeerStat    *Stat  `json:"peer_stat,omitempty"`
	// Ratio is berth's p50 divided by the peer's p50.
	Ratio  float64 `json:"ratio,omitempty"`
	Target string  `json:"target,omitempty"`
	// Pass is nil for informational rows.
	Pass *bool  `json:"pass,omitempty"`
	Note string `json:"note,omitempty"`
}

// Pass is the Pass of a row with a target: whether ok.
func Pass(ok bool) *bool { return &ok }

// Cleanup is what the end of the run found and removed.
type Cleanup struct {
	DoctorHealthy  bool     `json:"doctor_healthy"`
	DoctorFindings []string `json:"doctor_findings,omitempty"`
	// Leftover lists mounts, cgroups, containers or files that were still
	// there after the sandboxes were deleted (they are removed anyway).
	Leftover []string `json:"leftover,omitempty"`
	Errors   []string `json:"errors,omitempty"`
}

// Clean reports whether cleanup found nothing left behind.
func (c *Cleanup) Clean() bool {
	return c.DoctorHealthy && len(c.Leftover) == 0 && len(c.Errors) == 0
}
