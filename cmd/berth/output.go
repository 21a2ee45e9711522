package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/spf13/cobra"
)

// outputValue is the -o flag of read verbs: table (for people) or json (the
// API's own JSON, for programs).
type outputValue string

func (o *outputValue) Set(v string) error {
	switch v {
	case "table", "json":
		*o = outputValue(v)
		return nil
	}
	return fmt.Errorf("invalid output %q: want table or json", v)
}
func (o *outputValue) Type() string   { return "table|json" }
func (o *outputValue) String() string { return string(*o) }
func (o *outputValue) json() bool     { return *o == "json" }

func addOutputFlag(cmd *cobra.Command) *outputValue {
	o := outputValue("table")
	cmd.Flags().VarP(&o, "output", "o", "output format: table or json")
	return &o
}

// printJSON writes v as indented JSON with a trailing newline.
func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// newTable is the tabwriter of every table the CLI prints. Its cells carry
// text that sandbox code chose (file names, process argv, hostnames, event
// messages that quote an agent): it writes through termSafe, so none of it
// reaches the terminal as a control sequence.
// The cleaning comes before the tabwriter, so a 0xff byte of a name
// cannot open one of tabwriter's escaped segments either.
func newTable(w io.Writer) table {
	return table{tabwriter.NewWriter(w, 0, 0, 3, ' ', 0)}
}

// table is a tabwriter whose input is termSafe's.
type table struct{ *tabwriter.Writer }

func (t table) Write(p []byte) (int, error) { return termSafe{t.Writer}.Write(p) }

// termSafe writes what it is given with every control character but tab
// and newline (the table's own separators), DEL, the C1 controls and
// invalid UTF-8 written out as \xNN or \uNNNN, so text from a sandbox can
// neither move the cursor, retitle the window, nor start an escape
// sequence in the reader's terminal.
type termSafe struct{ w io.Writer }

func (t termSafe) Write(p []byte) (int, error) {
	clean := true
	for _, c := range p {
		if (c < 0x20 && c != '\t' && c != '\n') || c >= 0x7f {
			clean = false
			break
		}
	}
	if clean {
		return t.w.Write(p)
	}
	out := make([]byte, 0, len(p)+16)
	for i := 0; i < len(p); {
		r, n := utf8.DecodeRune(p[i:])
		switch {
		case r == utf8.RuneError && n <= 1:
			out = fmt.Appendf(out, `\x%02x`, p[i])
			n = 1
		case (r < 0x20 && r != '\t' && r != '\n') || r == 0x7f:
			out = fmt.Appendf(out, `\x%02x`, r)
		case r >= 0x80 && r < 0xa0:
			out = fmt.Appendf(out, `\u%04x`, r)
		default:
			out = append(out, p[i:i+n]...)
		}
		i += n
	}
	if _, err := t.w.Write(out); err != nil {
		return 0, err
	}
	return len(p), nil
}

// age prints how long ago t was, compactly: 45s, 12m, 3h, 5d.
func age(now, t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	d := now.Sub(t)
	switch {
	case d < 0:
		return "0s"
	case d < time.Minute:
		return strconv.Itoa(int(d.Seconds())) + "s"
	case d < time.Hour:
		return strconv.Itoa(int(d.Minutes())) + "m"
	case d < 48*time.Hour:
		return strconv.Itoa(int(d.Hours())) + "h"
	default:
		return strconv.Itoa(int(d.Hours()/24)) + "d"
	}
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}
