package selftest

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/berth-sh/berth/internal/selftest/attack"
)

// Column widths of the table (the JSON output carries everything).
const (
	expectedWidth = 44
	observedWidth = 72
)

// WriteTable prints the report: one row per attack and class (attack,
// expected, observed, contained), a total line per class, an overall
// line and what cleanup found.
func WriteTable(w io.Writer, rep *Report) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "RUNTIME\tATTACK\tEXPECTED\tOBSERVED\tCONTAINED")
	for _, r := range rep.Results {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", r.Runtime, r.ID, attack.Clip(r.Expected, expectedWidth), attack.Clip(r.Observed, observedWidth), status(r))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, t := range rep.Totals {
		fmt.Fprintln(w, TotalLine(t))
	}
	if len(rep.Cleanup) > 0 {
		fmt.Fprintf(w, "cleanup: %d problem(s):\n", len(rep.Cleanup))
		for _, c := range rep.Cleanup {
			fmt.Fprintln(w, "  "+c)
		}
	} else {
		fmt.Fprintln(w, "cleanup: every sandbox deleted, doctor healthy")
	}
	verdict := "PASS"
	if rep.Failed() {
		verdict = "FAIL"
	}
	_, err := fmt.Fprintf(w, "%s: %d attack runs on %s in %.0fs, %d not contained\n", verdict, len(rep.Results), strings.Join(rep.Runtimes, ","), rep.Seconds, rep.Uncontained())
	return err
}

// TotalLine is the total line of one class.
func TotalLine(t Total) string {
	return fmt.Sprintf("total %s: %d attacks, %d contained, %d not contained, %d n/a", t.Runtime, t.Attacks, t.Contained, t.Uncontained, t.NA)
}

// WriteJSON prints the report as indented JSON.
func WriteJSON(w io.Writer, rep *Report) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(rep)
}

// WriteCatalogue prints the catalogue as a markdown table (id, category,
// classes, what it does, what a secure system does), with counts per
// category: the attack table of docs/security.md.
func WriteCatalogue(w io.Writer, as []*attack.Attack) error {
	counts := Counts(as)
	fmt.Fprintf(w, "%d attacks:", len(as))
	for i, c := range attack.Categories {
		sep := ","
		if i == 0 {
			sep = ""
		}
		fmt.Fprintf(w, "%s %s %d", sep, c, counts[c])
	}
	fmt.Fprint(w, ".\n\n| id | classes | attack | expected (contained) |\n|---|---|---|---|\n")
	esc := func(s string) string { return strings.ReplaceAll(s, "|", "\\|") }
	for _, a := range as {
		cl := "all"
		if len(a.Classes) > 0 {
			cl = strings.Join(a.Classes, ", ")
		}
		if _, err := fmt.Fprintf(w, "| `%s` | %s | %s | %s |\n", a.ID, cl, esc(a.Description), esc(a.Expected)); err != nil {
			return err
		}
	}
	return nil
}
