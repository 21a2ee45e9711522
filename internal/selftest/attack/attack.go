// Package attack is what the selftest's catalogue and its runner share:
// the Attack type (id, category, expected containment, runtime classes, a
// Run that performs and judges it), the Outcome it observes, the Env it
// runs against (one runtime class of one daemon: sandboxes made and
// deleted for it, exec, raw API requests), and the building blocks
// attacks are written with (a python prelude for raw system calls,
// judging of refused calls, shared and fresh sandboxes).
package attack

import (
	"context"
	"fmt"
	"slices"
	"strings"
)

// Categories, in report order.
const (
	CatKernel   = "kernel"    // system calls and kernel interfaces
	CatProcSys  = "proc-sys"  // /proc and /sys
	CatCaps     = "caps"      // capabilities, no_new_privs, seccomp, setuid
	CatRuncCVE  = "runc-cve"  // CVE-2019-5736, CVE-2024-21626 classes
	CatAgent    = "agent"     // the agent channel and the agent process
	CatResource = "resources" // limits: pids, memory, disk, per-uid kernel limits
	CatNetwork  = "network"   // network modes none and egress
	CatCross    = "cross"     // one sandbox against another
	CatFiles    = "files"     // the file API: tar-slip, symlinks, ..
	CatAPI      = "api"       // API credentials
)

// Categories lists every category in report order.
var Categories = []string{CatKernel, CatProcSys, CatCaps, CatRuncCVE, CatAgent, CatResource, CatNetwork, CatCross, CatFiles, CatAPI}

// Runtime classes.
const (
	Runc  = "runc"
	Runsc = "runsc"
	Kata  = "kata"
)

// Attack is one entry of the catalogue.
type Attack struct {
	ID          string
	Category    string
	Description string // what the attack does
	Expected    string // what a secure system does
	// Classes are the runtime classes it applies to; empty: all.
	Classes []string
	// Run performs the attack against e and judges the result.
	Run func(ctx context.Context, e *Env) Outcome
}

// AppliesTo reports whether the attack runs on runtime class rt.
func (a *Attack) AppliesTo(rt string) bool {
	return len(a.Classes) == 0 || slices.Contains(a.Classes, rt)
}

// Outcome is what an attack observed.
type Outcome struct {
	Observed  string
	Contained bool
	// NA, when set, says why the attack could not be performed in this
	// setting (e.g. the API checks need a TCP endpoint). It is reported,
	// never silently dropped, and does not fail the run.
	NA string
}

// Contained is the outcome of an attack the system contained.
func Contained(format string, a ...any) Outcome {
	return Outcome{Observed: fmt.Sprintf(format, a...), Contained: true}
}

// Escaped is the outcome of an attack that got through (or could not be
// judged: a harness failure never counts as contained).
func Escaped(format string, a ...any) Outcome {
	return Outcome{Observed: fmt.Sprintf(format, a...)}
}

// Judged is Contained when ok, else Escaped.
func Judged(ok bool, format string, a ...any) Outcome {
	return Outcome{Observed: fmt.Sprintf(format, a...), Contained: ok}
}

// NotApplicable is the outcome of an attack that cannot be performed in
// this setting, saying why.
func NotApplicable(format string, a ...any) Outcome {
	return Outcome{NA: fmt.Sprintf(format, a...), Observed: "n/a: " + fmt.Sprintf(format, a...)}
}

// OneLine folds whitespace (newlines included) into single spaces.
func OneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

// Clip shortens s to n runes, marking the cut.
func Clip(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "…"
}
