// Package selftest is berth's in-sandbox attack suite (`berth selftest`,
// `make security-test`): the runner and its report. The attacks are
// internal/selftest/catalogue's; the Attack type, the Env an attack runs
// against and the judging helpers are internal/selftest/attack's.
//
// Run executes the catalogue on every runtime class the daemon offers (or
// those asked for), sharing one sandbox per attack group, deletes every
// sandbox it made and ends with the daemon's doctor check. The report is a
// table (WriteTable) or JSON; any attack not contained fails the run.
// RunPrivate does the same against a private daemon it starts and removes.
package selftest

import (
	"context"
	"fmt"
	"io"
	"path"
	"slices"
	"strings"
	"time"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/client"
	"github.com/berth-sh/berth/internal/selftest/attack"
	"github.com/berth-sh/berth/internal/selftest/catalogue"
)

// Result is one row of the report.
type Result struct {
	ID          string  `json:"id"`
	Category    string  `json:"category"`
	Runtime     string  `json:"runtime"`
	Description string  `json:"description"`
	Expected    string  `json:"expected"`
	Observed    string  `json:"observed"`
	Contained   bool    `json:"contained"`
	NA          bool    `json:"not_applicable,omitempty"`
	Seconds     float64 `json:"seconds"`
}

// Total is the summary of one runtime class.
type Total struct {
	Runtime     string `json:"runtime"`
	Attacks     int    `json:"attacks"`
	Contained   int    `json:"contained"`
	Uncontained int    `json:"not_contained"`
	NA          int    `json:"not_applicable"`
}

// Report is the result of a run.
type Report struct {
	Started  time.Time `json:"started"`
	Seconds  float64   `json:"seconds"`
	Host     string    `json:"host"`
	DataDir  string    `json:"data_dir"`
	Runtimes []string  `json:"runtimes"`
	Results  []Result  `json:"results"`
	Totals   []Total   `json:"totals"`
	// Cleanup lists what was left behind: sandboxes not deleted, doctor
	// findings, errors. Empty when everything was removed.
	Cleanup []string `json:"cleanup,omitempty"`
}

// Uncontained counts the attacks not contained, over all classes.
func (r *Report) Uncontained() int {
	n := 0
	for _, x := range r.Results {
		if !x.Contained && !x.NA {
			n++
		}
	}
	return n
}

// Failed reports whether the run must exit non-zero.
func (r *Report) Failed() bool { return r.Uncontained() > 0 || len(r.Cleanup) > 0 }

// Options configures a run.
type Options struct {
	// Client is the admin client (unix socket, or TCP with an admin key).
	Client *client.Client
	// Host is the client's host (for raw requests) and APIKey its key.
	Host, APIKey string
	// TCP is an http://host:port base of the daemon's TCP listener for the
	// API credential attacks ("" when Host is already TCP, or none).
	TCP string
	// E2B is an http://host:port base of the daemon's E2B door for the
	// door's attacks ("" when it has none: they are not applicable).
	E2B string
	// DataDir is the daemon's data dir on this host (host paths must not
	// show inside sandboxes; symlink targets of the agent attacks).
	DataDir string
	// DaemonPID is the daemon's pid when known (stdout flood RSS).
	DaemonPID int
	// Runtimes restricts the classes; empty: all the daemon offers.
	Runtimes []string
	// Only restricts attacks to ids or categories matching any of these
	// patterns (path.Match globs, or substrings).
	Only []string
	// Binary is the berth executable and WorkDir a private directory of
	// this run: both set (by RunPrivate) the egress attacks start their
	// own daemon in a selftest-made network namespace.
	Binary, WorkDir string
	// Progress receives one line per attack; nil: none.
	Progress io.Writer
}

// Select returns the attacks of the catalogue matching only (see
// Options.Only); all when only is empty.
func Select(only []string) []*attack.Attack {
	var out []*attack.Attack
	for _, a := range catalogue.All() {
		if matches(a, only) {
			out = append(out, a)
		}
	}
	return out
}

func matches(a *attack.Attack, only []string) bool {
	if len(only) == 0 {
		return true
	}
	for _, p := range only {
		p = strings.TrimSpace(p)
		if p == "" {
			continue
		}
		if ok, _ := path.Match(p, a.ID); ok || strings.Contains(a.ID, p) || a.Category == p {
			return true
		}
	}
	return false
}

// Run executes the selected attacks on every runtime class and cleans up.
func Run(ctx context.Context, opts Options) (*Report, error) {
	t0 := time.Now()
	rep := &Report{Started: t0, Host: opts.Host, DataDir: opts.DataDir}
	v, err := opts.Client.Version(ctx)
	if err != nil {
		return nil, fmt.Errorf("daemon version: %w", err)
	}
	offered := strings.Split(v.Runtime, ",")
	classes := offered
	if len(opts.Runtimes) > 0 {
		classes = nil
		for _, rt := range opts.Runtimes {
			if !slices.Contains(offered, rt) {
				return nil, fmt.Errorf("runtime class %q is not offered by the daemon (it offers %s)", rt, v.Runtime)
			}
			classes = append(classes, rt)
		}
	}
	attacks := Select(opts.Only)
	if len(attacks) == 0 {
		return nil, fmt.Errorf("--only %v matches no attack", opts.Only)
	}
	before, err := opts.Client.ListSandboxes(ctx, false)
	if err != nil {
		return nil, fmt.Errorf("listing sandboxes: %w", err)
	}
	preexisting := map[string]bool{}
	for _, sb := range before {
		preexisting[sb.ID] = true
	}
	rep.Runtimes = classes
	target := attack.Target{Host: opts.Host, APIKey: opts.APIKey, TCP: opts.TCP, E2B: opts.E2B, DataDir: opts.DataDir,
		DaemonPID: opts.DaemonPID, Binary: opts.Binary, WorkDir: opts.WorkDir}
	for _, rt := range classes {
		e, err := attack.NewEnv(opts.Client, target, rt)
		if err != nil {
			return nil, err
		}
		tot := Total{Runtime: rt}
		for _, a := range attacks {
			if !a.AppliesTo(rt) {
				continue
			}
			if ctx.Err() != nil {
				break
			}
			t := time.Now()
			o := runOne(ctx, e, a)
			res := Result{ID: a.ID, Category: a.Category, Runtime: rt, Description: a.Description,
				Expected: a.Expected, Observed: attack.OneLine(o.Observed), Contained: o.Contained && o.NA == "",
				NA: o.NA != "", Seconds: time.Since(t).Seconds()}
			rep.Results = append(rep.Results, res)
			tot.Attacks++
			switch {
			case res.NA:
				tot.NA++
			case res.Contained:
				tot.Contained++
			default:
				tot.Uncontained++
			}
			if opts.Progress != nil {
				fmt.Fprintf(opts.Progress, "%-6s %-34s %-4s %5.1fs  %s\n", rt, a.ID, status(res), res.Seconds, attack.Clip(res.Observed, 100))
			}
		}
		for _, msg := range e.Cleanup(context.WithoutCancel(ctx)) {
			rep.Cleanup = append(rep.Cleanup, rt+": "+msg)
		}
		rep.Totals = append(rep.Totals, tot)
	}
	rep.Cleanup = append(rep.Cleanup, finalCheck(context.WithoutCancel(ctx), opts.Client, preexisting)...)
	rep.Seconds = time.Since(t0).Seconds()
	return rep, ctx.Err()
}

// runOne runs an attack, turning a panic into an uncontained outcome.
func runOne(ctx context.Context, e *attack.Env, a *attack.Attack) (o attack.Outcome) {
	defer func() {
		if r := recover(); r != nil {
			o = attack.Escaped("the attack's harness panicked: %v", r)
		}
	}()
	actx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	return a.Run(actx, e)
}

// finalCheck deletes any sandbox the run left, then asks doctor.
func finalCheck(ctx context.Context, c *client.Client, preexisting map[string]bool) []string {
	var out []string
	sbs, err := c.ListSandboxes(ctx, false)
	if err != nil {
		return []string{"listing sandboxes: " + err.Error()}
	}
	for _, sb := range sbs {
		if preexisting[sb.ID] {
			continue
		}
		out = append(out, fmt.Sprintf("sandbox %s (%s) was left behind; deleting it", sb.ID, sb.State))
		if _, err := c.DeleteSandbox(ctx, sb.ID, true); err != nil && !client.IsNotFound(err) {
			out = append(out, fmt.Sprintf("deleting %s: %v", sb.ID, err))
		}
	}
	// Deletes are synchronous, but a one-shot or a fork child may still
	// be on its way out: give doctor a moment to see a settled host.
	var rep *api.DoctorReport
	for i := 0; i < 20; i++ {
		if rep, err = c.Doctor(ctx, false); err == nil && rep.Healthy {
			return out
		}
		time.Sleep(250 * time.Millisecond)
	}
	if err != nil {
		return append(out, "doctor: "+err.Error())
	}
	for _, f := range rep.Findings {
		out = append(out, fmt.Sprintf("doctor: %s %s: %s", f.Kind, f.ID, f.Detail))
	}
	return out
}

func status(r Result) string {
	switch {
	case r.NA:
		return "n/a"
	case r.Contained:
		return "yes"
	}
	return "NO"
}

// Counts summarises results per category for docs and tests.
func Counts(as []*attack.Attack) map[string]int {
	m := map[string]int{}
	for _, a := range as {
		m[a.Category]++
	}
	return m
}
