// Package selftest is berth's in-sandbox attack suite (`berth selftest`,
// `make security-test`).
//
// The catalogue (catalogue*.go) is data plus code: every Attack has an id,
// a category, what it tries, what a secure system does (Expected), the
// runtime classes it applies to, and a Run that really performs it —
// mostly shell or python3 (ctypes for raw system calls) executed inside a
// sandbox through the Go SDK, sometimes Go steps of the harness outside
// (API requests, host files, sockets) — and judges the observed result
// against the expected containment. Expected outcomes are what a secure
// system does, not what berth happens to do today.
//
// Run executes the catalogue on every runtime class the daemon offers (or
// those asked for), sharing one sandbox per attack group, deletes every
// sandbox it made and ends with the daemon's doctor check. The report is a
// table (WriteTable) or JSON; any attack not contained fails the run.
package selftest

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/client"
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

func contained(format string, a ...any) Outcome {
	return Outcome{Observed: fmt.Sprintf(format, a...), Contained: true}
}

func escaped(format string, a ...any) Outcome {
	return Outcome{Observed: fmt.Sprintf(format, a...)}
}

func judged(ok bool, format string, a ...any) Outcome {
	return Outcome{Observed: fmt.Sprintf(format, a...), Contained: ok}
}

func notApplicable(format string, a ...any) Outcome {
	return Outcome{NA: fmt.Sprintf(format, a...), Observed: "n/a: " + fmt.Sprintf(format, a...)}
}

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
func Select(only []string) []*Attack {
	var out []*Attack
	for _, a := range Catalogue() {
		if matches(a, only) {
			out = append(out, a)
		}
	}
	return out
}

func matches(a *Attack, only []string) bool {
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
	for _, rt := range classes {
		e, err := newEnv(opts, rt)
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
				Expected: a.Expected, Observed: oneLine(o.Observed), Contained: o.Contained && o.NA == "",
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
				fmt.Fprintf(opts.Progress, "%-6s %-34s %-4s %5.1fs  %s\n", rt, a.ID, status(res), res.Seconds, clip(res.Observed, 100))
			}
		}
		for _, msg := range e.cleanup(context.WithoutCancel(ctx)) {
			rep.Cleanup = append(rep.Cleanup, rt+": "+msg)
		}
		rep.Totals = append(rep.Totals, tot)
	}
	rep.Cleanup = append(rep.Cleanup, finalCheck(context.WithoutCancel(ctx), opts.Client, preexisting)...)
	rep.Seconds = time.Since(t0).Seconds()
	return rep, ctx.Err()
}

// runOne runs an attack, turning a panic into an uncontained outcome.
func runOne(ctx context.Context, e *Env, a *Attack) (o Outcome) {
	defer func() {
		if r := recover(); r != nil {
			o = escaped("the attack's harness panicked: %v", r)
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

// Env is what an attack runs against: one runtime class of one daemon.
type Env struct {
	opts  Options
	Class string
	C     *client.Client
	raw   *rawClient // same host and key, for requests the SDK would not send
	// HostDir is a private directory on the harness's host for markers,
	// decoy sockets and secrets that must stay out of reach.
	HostDir string
	// Tag makes markers unique to this run.
	Tag string

	mu        sync.Mutex
	groups    map[string]*api.Sandbox
	sandboxes []string // every sandbox this env created, to delete at the end
}

func newEnv(opts Options, rt string) (*Env, error) {
	dir, err := os.MkdirTemp("", "berth-selftest-host-")
	if err != nil {
		return nil, err
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		return nil, err
	}
	raw, err := newRawClient(opts.Host, opts.APIKey)
	if err != nil {
		return nil, err
	}
	return &Env{opts: opts, Class: rt, C: opts.Client, raw: raw, HostDir: dir,
		Tag: fmt.Sprintf("%x", time.Now().UnixNano()&0xffffffffff), groups: map[string]*api.Sandbox{}}, nil
}

// DataDir is the daemon's data dir ("" when unknown).
func (e *Env) DataDir() string { return e.opts.DataDir }

// Local reports whether the daemon runs on this host (so host-side checks
// of its files, processes and sockets mean something).
func (e *Env) Local() bool {
	return strings.HasPrefix(e.opts.Host, "unix://") || strings.Contains(e.opts.Host, "127.0.0.1") || strings.Contains(e.opts.Host, "localhost")
}

// Create makes a sandbox of this env's class, to be deleted at cleanup.
func (e *Env) Create(ctx context.Context, req api.CreateSandboxRequest) (*api.Sandbox, error) {
	req.Runtime = e.Class
	if req.Labels == nil {
		req.Labels = map[string]string{}
	}
	req.Labels["berth-selftest"] = e.Tag
	if req.TimeoutSeconds == 0 {
		req.TimeoutSeconds = 900 // a crashed harness leaves nothing running for long
	}
	sb, err := e.C.CreateSandbox(ctx, req)
	if err != nil {
		return nil, fmt.Errorf("create (%s): %w", e.Class, err)
	}
	e.mu.Lock()
	e.sandboxes = append(e.sandboxes, sb.ID)
	e.mu.Unlock()
	return sb, nil
}

// Delete deletes a sandbox this env made.
func (e *Env) Delete(ctx context.Context, id string) error {
	_, err := e.C.DeleteSandbox(ctx, id, true)
	if client.IsNotFound(err) {
		err = nil
	}
	e.mu.Lock()
	e.sandboxes = slices.DeleteFunc(e.sandboxes, func(s string) bool { return s == id })
	for g, sb := range e.groups {
		if sb.ID == id {
			delete(e.groups, g)
		}
	}
	e.mu.Unlock()
	return err
}

// Group returns the shared sandbox of an attack group, created on first
// use with the default request.
func (e *Env) Group(ctx context.Context, group string) (*api.Sandbox, error) {
	e.mu.Lock()
	sb := e.groups[group]
	e.mu.Unlock()
	if sb != nil {
		return sb, nil
	}
	sb, err := e.Create(ctx, api.CreateSandboxRequest{})
	if err != nil {
		return nil, err
	}
	e.mu.Lock()
	e.groups[group] = sb
	e.mu.Unlock()
	return sb, nil
}

// Exec runs cmd in sandbox id and returns its combined output.
func (e *Env) Exec(ctx context.Context, id string, req api.ExecRequest) (string, api.ExecExit, error) {
	if req.TimeoutSeconds == 0 {
		req.TimeoutSeconds = 60
	}
	// A hijacked agent channel may never answer: bound the call itself.
	ctx, cancel := context.WithTimeout(ctx, time.Duration(req.TimeoutSeconds*float64(time.Second))+20*time.Second)
	defer cancel()
	var out syncBuffer
	exit, err := e.C.Exec(ctx, id, req, &out, &out)
	return out.String(), exit, err
}

// Sh runs a shell script in sandbox id.
func (e *Env) Sh(ctx context.Context, id, script string) (string, api.ExecExit, error) {
	return e.Exec(ctx, id, api.ExecRequest{Cmd: []string{"sh", "-c", script}, Env: e.scriptEnv()})
}

// Py runs a python3 program (with the prelude of helpers) in sandbox id.
func (e *Env) Py(ctx context.Context, id, code string) (string, api.ExecExit, error) {
	return e.Exec(ctx, id, api.ExecRequest{Cmd: []string{"python3", "-c", pyPrelude + code}, Env: e.scriptEnv()})
}

// scriptEnv is what attack scripts are told: the host paths they must not
// reach, the run's tag.
func (e *Env) scriptEnv() map[string]string {
	return map[string]string{"ST_DATADIR": e.opts.DataDir, "ST_HOSTDIR": e.HostDir, "ST_TAG": e.Tag}
}

// Alive reports whether sandbox id still answers an exec.
func (e *Env) Alive(ctx context.Context, id string) (bool, string) {
	cctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	out, exit, err := e.Exec(cctx, id, api.ExecRequest{Cmd: []string{"echo", "alive"}, TimeoutSeconds: 15})
	if err != nil {
		return false, "exec failed: " + err.Error()
	}
	if exit.Code != 0 || !strings.Contains(out, "alive") {
		return false, fmt.Sprintf("exec answered exit %d %q", exit.Code, clip(out, 60))
	}
	return true, "alive"
}

// cleanup deletes every sandbox the env made and removes its host dir.
func (e *Env) cleanup(ctx context.Context) []string {
	var out []string
	e.mu.Lock()
	ids := slices.Clone(e.sandboxes)
	e.mu.Unlock()
	for _, id := range ids {
		if err := e.Delete(ctx, id); err != nil {
			out = append(out, fmt.Sprintf("deleting sandbox %s: %v", id, err))
		}
	}
	if err := os.RemoveAll(e.HostDir); err != nil {
		out = append(out, err.Error())
	}
	return out
}

// Counts summarises results per category for docs and tests.
func Counts(as []*Attack) map[string]int {
	m := map[string]int{}
	for _, a := range as {
		m[a.Category]++
	}
	return m
}

type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.b.Len() < 1<<20 {
		s.b.Write(p)
	}
	return len(p), nil
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// denied reports whether an HTTP status is an authorization denial.
func denied(status int) bool {
	return status == http.StatusUnauthorized || status == http.StatusForbidden
}
