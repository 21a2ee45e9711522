package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"text/tabwriter"
	"time"

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

func newTable(w io.Writer) *tabwriter.Writer {
	return tabwriter.NewWriter(w, 0, 0, 3, ' ', 0)
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
