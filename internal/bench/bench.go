// Package bench is berth's performance report (`berth bench`).
//
// Run starts a private daemon as a subprocess of the berth binary (its own
// data dir, socket, cgroup parent and runc root under a fresh temporary
// directory), drives it through the Go SDK and the CLI as users do, and
// measures each figure beside a peer measured in the same run: raw runc,
// the same runc binary, given an equivalent bundle (runtime.BuildSpec with
// the same overlay root over the daemon's base template layers, the host
// /usr bind, the same id map, resources, seccomp profile and a cgroup under
// a bench-only parent), so that both pay the same user namespace, seccomp
// and cgroup costs.
//
// The measurements:
//
//	tti      time to interactive: CreateSandbox until the first exec of
//	         `true` returns, vs `runc run` of true
//	exec     exec round trip of `true` via the SDK, vs `runc exec`
//	run      one-shot `berth run -- true` (CLI process wall time), vs `runc run`
//	churn    create/exec/delete cycles per second from concurrent clients,
//	         vs `runc run` cycles from as many concurrent callers
//	density  host memory per idle sandbox, daemon RSS, exec round trip
//	         with all of them running, and the time to delete them all
//	pause    pause and resume of a running persistent sandbox via the SDK,
//	         vs `runc pause` / `runc resume` of a running sleep
//	restart  stop → start → first exec of a persistent sandbox with a
//	         filled workspace, vs a fresh create → first exec of the same
//	         request in the same run
//	expiry   lag from idle deadline to completed pause of many sandboxes
//	         expiring together (and, optionally, to completed stop)
//	fork     fork (count 1, until the child runs) of a persistent parent
//	         whose workspace holds each of ForkSizes, and the parent's
//	         freeze time, vs a full copy (cp --reflink=never + fsync) of
//	         the parent's volume image on the same filesystem
//	pool     warm-pool claim → first exec result, vs a cold create (a
//	         request no pool member fits) → first exec
//	snapshot snapshot and restore of the same parents, vs the full copy
//	         and a stop → start of the same sandbox
//	runsc    create → first exec on gVisor beside runc, and hibernate /
//	         wake of a runsc sandbox holding 100 MiB and 1 GiB of memory
//	egress   create → first exec in network mode egress vs mode none, and
//	         the extra time (a second daemon, in a bench-made netns)
//	nat      TCP throughput from an egress sandbox through berth's NAT to a
//	         sink in a bench-made "internet" netns, vs the same transfer
//	         over a plain veth pair (nothing leaves the machine)
//	images   per-task images from a test registry in a bench-made netns
//	         (images.go): create → first command from an image not yet
//	         pulled and from a cached one, vs cp of the same bytes and a
//	         local template; import throughput; host storage vs the bytes
//	         of the distinct layers
//
// Every figure is a p50 and p95 over n samples. At the end the bench
// deletes its sandboxes, checks `doctor` is clean, stops the daemon by pid,
// verifies that no mounts or cgroups are left and removes what it created.
//
// compute.go is --only compute: create → first command result (true, and
// node -v in the burst) under three arrivals — sequential, staggered 200 ms
// apart, and a burst of --burst at once (default 100) — with success count,
// p99 and wall time, beside raw runc run true under the same arrivals and
// the published hosted figures as a fixed reference; failures are counted,
// not fatal. run also reports the CLI's start-up (berth help vs runc
// --version) and both binaries' sizes. markdown.go is WriteReport (berth
// bench --report DIR; make bench writes bench-report/): report.md with the
// machine, date and version, and a PNG per row with a distribution under
// charts/ (gonum.org/v1/plot). Subpackages: harness (what the measurements
// share: Row, Stat, Cleanup, statistics, the private daemon wrapper, the
// Recorder), netbench (egress and nat in their bench-made namespaces) and
// peer (the raw runc peer). The daemons and their cleanup are
// internal/testenv's; LeakScopes names them for the check after a run.
package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	goruntime "runtime"
	"slices"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/berth-sh/berth/internal/bench/harness"
	"github.com/berth-sh/berth/internal/bench/netbench"
	"github.com/berth-sh/berth/internal/bench/peer"
	"github.com/berth-sh/berth/internal/cgroups"
	"github.com/berth-sh/berth/internal/testenv/regtest"
)

// Measurement names, as --only takes them.
const (
	TTI     = "tti"
	Exec    = "exec"
	RunCLI  = "run"
	Churn   = "churn"
	Density = "density"
	Pause   = "pause"
	Restart = "restart"
	Expiry  = "expiry"
	// Issue 4: parent workspaces with ephemeral children.
	Fork     = "fork"
	Pool     = "pool"
	Snapshot = "snapshot"
	// Compute: create -> first command under sequential, staggered and
	// burst arrivals (compute.go).
	Compute = "compute"
	// Issue 5: sandbox networking (internal/bench/netbench).
	Egress = netbench.Egress
	NAT    = netbench.NAT
	// Issue 32: per-task images pulled from a registry (images.go).
	Images = "images"
)

// DefaultNetBytes is what each transfer of the nat measurement sends.
const DefaultNetBytes = netbench.DefaultNetBytes

// NetNamespaces are the network namespaces a bench working in workDir
// makes (and deletes) for the egress and nat measurements.
func NetNamespaces(workDir string) []string { return netbench.NetNamespaces(workDir) }

// All lists every measurement in the order Run performs them.
var All = []string{TTI, Exec, RunCLI, Churn, Density, Pause, Restart, Expiry, Fork, Pool, Snapshot, Runsc, Egress, NAT, Compute, Images}

// aliases lets --only name measurements by their letter in the design notes.
var aliases = map[string]string{"a": TTI, "b": Exec, "c": RunCLI, "d": Churn, "e": Density,
	"f": Pause, "g": Restart, "h": Expiry, "i": Fork, "j": Pool, "k": Snapshot, "l": Runsc,
	"m": Egress, "n": NAT, "o": Compute, "p": Images}

// Options configures a bench run. Zero values take the defaults.
type Options struct {
	// Binary is the full berth executable (berthd): the daemon the bench
	// starts, with the sandboxes' agent beside it. Default: this
	// executable.
	Binary string
	// CLI is the CLI measured by "run" and "exec" (bin/berth, built with
	// -tags berthcli). Default: berth beside Binary, else Binary.
	CLI string
	// Runc is the runc binary the peer uses (the daemon uses the same).
	// Default: "runc" from PATH.
	Runc string
	// Iterations is the number of samples of each latency (default 50).
	Iterations int
	// Idle is how many sandboxes the density measurement keeps running
	// (default 300).
	Idle int
	// Churn is how long the churn measurement runs (default 10s).
	Churn time.Duration
	// Concurrency is the number of concurrent clients in churn, in the
	// density creates and deletes and in the expiry creates, touches and
	// deletes (default 4).
	Concurrency int
	// Expiry is how many sandboxes the expiry measurement lets expire
	// together with on_idle=pause (default 200).
	Expiry int
	// ExpiryStop is how many expire together with on_idle=stop, measured
	// after the pause ones; 0 skips it, negative: as many as Expiry.
	ExpiryStop int
	// ForkSizes are the workspace sizes, in bytes, of the parents that
	// fork and snapshot measure (default 10 MiB, 100 MiB, 1 GiB).
	ForkSizes []int64
	// HibernateSizes are the memory, in bytes, a runsc sandbox's process
	// holds in the hibernate / wake measurement (default 100 MiB, 1 GiB).
	HibernateSizes []int64
	// ForkIterations is the number of samples of each fork, snapshot and
	// restore size, and of their copy peer (default: Iterations, at most 10).
	ForkIterations int
	// NetBytes is what each transfer of the nat measurement sends
	// (default 256 MiB).
	NetBytes int64
	// Burst is how many creates the compute measurement starts at once
	// (default 100).
	Burst int
	// Images is how many per-task images the images measurement pulls
	// (default 200), and ImageBase the size of the base they share
	// (default 300 MiB).
	Images    int
	ImageBase int64
	// Only restricts the run to these measurements (see All); empty: all.
	Only []string
	// TempRoot is where the private temporary directory is made
	// (default /tmp).
	TempRoot string
	// ServeArgs are more flags for the measured daemon's berth serve (a
	// setting compared with its default, e.g. --max-starts -1).
	ServeArgs []string
}

// Defaults of Options.
const (
	DefaultIterations  = 50
	DefaultIdle        = 300
	DefaultChurn       = 10 * time.Second
	DefaultConcurrency = 4
	DefaultExpiry      = 200
	// DefaultForkIterations bounds the default ForkIterations.
	DefaultForkIterations = 10
)

// DefaultForkSizes are the parent workspace sizes of fork and snapshot.
var DefaultForkSizes = []int64{10 << 20, 100 << 20, 1 << 30}

// DefaultHibernateSizes are the memory a hibernated runsc sandbox's
// process holds.
var DefaultHibernateSizes = []int64{100 << 20, 1 << 30}

// The report's types are the harness's, which the measurement packages
// share.
type (
	// Row is one line of the report: berth's figure beside its peer's.
	Row = harness.Row
	// Stat summarises the samples of one measurement, in its row's unit.
	Stat = harness.Stat
	// Cleanup is what the end of the run found and removed.
	Cleanup = harness.Cleanup
)

// Machine describes the host the figures come from.
type Machine struct {
	CPUs        int    `json:"cpus"`
	CPUModel    string `json:"cpu_model,omitempty"`
	MemTotalMiB int64  `json:"mem_total_mib"`
	Kernel      string `json:"kernel"`
	Runc        string `json:"runc"`
	Cgroup      string `json:"cgroup"`
	Go          string `json:"go"`
	Berth       string `json:"berth,omitempty"`
	// BerthBytes, CLIBytes and AgentBytes are the sizes of the full
	// binary measured (the daemon), of the CLI, and of the agent binary its
	// daemons mount into sandboxes.
	BerthBytes int64 `json:"berth_bytes,omitempty"`
	CLIBytes   int64 `json:"cli_bytes,omitempty"`
	AgentBytes int64 `json:"agent_bytes,omitempty"`
}

// Report is the result of a bench run.
type Report struct {
	Started time.Time `json:"started"`
	// WorkDir was the private temporary directory (data dir of the daemon,
	// the peer's bundles); it is removed at the end.
	WorkDir     string  `json:"work_dir"`
	Seconds     float64 `json:"seconds"`
	Machine     Machine `json:"machine"`
	Iterations  int     `json:"iterations"`
	Idle        int     `json:"idle"`
	ChurnSecs   float64 `json:"churn_seconds"`
	Concurrency int     `json:"concurrency"`
	Expiry      int     `json:"expiry"`
	ExpiryStop  int     `json:"expiry_stop,omitempty"`
	// ForkSizes and ForkIterations are those of fork and snapshot.
	ForkSizes      []int64 `json:"fork_sizes,omitempty"`
	ForkIterations int     `json:"fork_iterations,omitempty"`
	// HibernateSizes are those of the runsc measurement's hibernate.
	HibernateSizes []int64 `json:"hibernate_sizes,omitempty"`
	// ServeArgs are the daemon's flags beyond the bench's own.
	ServeArgs []string `json:"serve_args,omitempty"`
	// Images and ImageBase are those of the images measurement.
	Images    int     `json:"images,omitempty"`
	ImageBase int64   `json:"image_base,omitempty"`
	Rows      []Row   `json:"rows"`
	Cleanup   Cleanup `json:"cleanup"`
	// Failed counts the rows whose target was missed.
	Failed int `json:"failed"`
}

func (o *Options) setDefaults() error {
	if o.Binary == "" {
		exe, err := os.Executable()
		if err != nil {
			return err
		}
		o.Binary = exe
	}
	bin, err := filepath.EvalSymlinks(o.Binary)
	if err != nil {
		return fmt.Errorf("berth binary: %w", err)
	}
	if o.Binary, err = filepath.Abs(bin); err != nil {
		return err
	}
	if o.CLI == "" {
		o.CLI = o.Binary
		if p := filepath.Join(filepath.Dir(o.Binary), "berth"); p != o.Binary {
			if st, err := os.Stat(p); err == nil && st.Mode().IsRegular() {
				o.CLI = p
			}
		}
	}
	if o.Runc == "" {
		o.Runc = "runc"
	}
	if o.Runc, err = exec.LookPath(o.Runc); err != nil {
		return fmt.Errorf("runc not found (install it with `apt-get install runc`): %w", err)
	}
	if o.Iterations == 0 {
		o.Iterations = DefaultIterations
	}
	if o.Burst == 0 {
		o.Burst = DefaultBurst
	}
	if o.Burst < 0 || o.Burst > 10000 {
		return fmt.Errorf("bench: --burst must be between 1 and 10000, not %d", o.Burst)
	}
	if o.Idle == 0 {
		o.Idle = DefaultIdle
	}
	if o.Churn == 0 {
		o.Churn = DefaultChurn
	}
	if o.Concurrency == 0 {
		o.Concurrency = DefaultConcurrency
	}
	if o.Expiry == 0 {
		o.Expiry = DefaultExpiry
	}
	if o.ExpiryStop < 0 {
		o.ExpiryStop = o.Expiry
	}
	if o.NetBytes == 0 {
		o.NetBytes = DefaultNetBytes
	}
	if o.NetBytes < 1<<10 {
		return fmt.Errorf("bench: net bytes must be at least 1 KiB")
	}
	if o.TempRoot == "" {
		o.TempRoot = "/tmp"
	}
	if o.Images == 0 {
		o.Images = DefaultImages
	}
	if o.ImageBase == 0 {
		o.ImageBase = DefaultImageBase
	}
	if o.Images < 2 || o.Images > 10000 {
		return fmt.Errorf("bench: --images must be between 2 and 10000, not %d", o.Images)
	}
	if o.ImageBase < 1<<10 || o.ImageBase > 16<<30 {
		return fmt.Errorf("bench: --image-base-size must be between 1 KiB and 16 GiB, not %d bytes", o.ImageBase)
	}
	if len(o.ForkSizes) == 0 {
		o.ForkSizes = slices.Clone(DefaultForkSizes)
	}
	for _, sz := range o.ForkSizes {
		if sz < 1<<10 || sz > 64<<30 {
			return fmt.Errorf("bench: fork sizes must be between 1 KiB and 64 GiB, not %d bytes", sz)
		}
	}
	if len(o.HibernateSizes) == 0 {
		o.HibernateSizes = slices.Clone(DefaultHibernateSizes)
	}
	for _, sz := range o.HibernateSizes {
		if sz < 1<<20 || sz > 64<<30 {
			return fmt.Errorf("bench: hibernate sizes must be between 1 MiB and 64 GiB, not %d bytes", sz)
		}
	}
	if o.ForkIterations == 0 {
		o.ForkIterations = min(o.Iterations, DefaultForkIterations)
	}
	if o.ForkIterations < 1 {
		return fmt.Errorf("bench: fork iterations must be positive")
	}
	if o.Iterations < 1 || o.Idle < 1 || o.Churn <= 0 || o.Concurrency < 1 || o.Expiry < 1 {
		return fmt.Errorf("bench: iterations, idle, churn duration, concurrency and expiry must be positive")
	}
	var only []string
	for _, n := range o.Only {
		for _, f := range strings.Split(n, ",") {
			f = strings.ToLower(strings.TrimSpace(f))
			if f == "" {
				continue
			}
			if a, ok := aliases[f]; ok {
				f = a
			}
			if !slices.Contains(All, f) {
				return fmt.Errorf("bench: unknown measurement %q: want one of %s", f, strings.Join(All, ", "))
			}
			if !slices.Contains(only, f) {
				only = append(only, f)
			}
		}
	}
	o.Only = only
	return nil
}

func (o *Options) selected(name string) bool {
	return len(o.Only) == 0 || slices.Contains(o.Only, name)
}

// Run performs the bench and returns its report. progress, if not nil,
// receives one line per phase. The report is returned also with an error
// (a failed measurement or an unclean cleanup), holding what was measured.
func Run(ctx context.Context, opts Options, progress io.Writer) (*Report, error) {
	if err := opts.setDefaults(); err != nil {
		return nil, err
	}
	if os.Geteuid() != 0 {
		return nil, errors.New("bench: must run as root (it starts a daemon, mounts overlays and runs runc)")
	}
	if progress == nil {
		progress = io.Discard
	}
	rep := &Report{
		Started:     time.Now().UTC(),
		Machine:     machineInfo(opts.Runc),
		Iterations:  opts.Iterations,
		Idle:        opts.Idle,
		ChurnSecs:   opts.Churn.Seconds(),
		Concurrency: opts.Concurrency,
		Expiry:      opts.Expiry,
		ExpiryStop:  opts.ExpiryStop,
		ServeArgs:   opts.ServeArgs,
		Rows:        []Row{},
	}
	if opts.selected(Fork) || opts.selected(Snapshot) {
		rep.ForkSizes, rep.ForkIterations = opts.ForkSizes, opts.ForkIterations
	}
	if opts.selected(Runsc) {
		rep.HibernateSizes = opts.HibernateSizes
	}
	if opts.selected(Images) {
		rep.Images, rep.ImageBase = opts.Images, opts.ImageBase
	}
	b := &bench{opts: opts, log: progress, rep: rep}
	err := b.run(ctx)
	if err != nil && b.d != nil {
		// The work dir goes away with cleanup; keep the daemon's log.
		if kept, kerr := b.keepLog(); kerr == nil {
			err = fmt.Errorf("%w (daemon log kept in %s)", err, kept)
		}
	}
	// Cleanup runs whatever happened, and is not cut short by ctx.
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Minute)
	defer cancel()
	b.cleanup(cctx)
	rep.Seconds = time.Since(rep.Started).Seconds()
	for _, r := range rep.Rows {
		if r.Pass != nil && !*r.Pass {
			rep.Failed++
		}
	}
	if err == nil && !rep.Cleanup.Clean() {
		err = fmt.Errorf("bench: cleanup was not clean: leftover %v, errors %v, doctor findings %v",
			rep.Cleanup.Leftover, rep.Cleanup.Errors, rep.Cleanup.DoctorFindings)
	}
	return rep, err
}

// bench is the state of one run.
type bench struct {
	opts Options
	log  io.Writer
	rep  *Report

	tmp  string
	d    *harness.Daemon
	peer *peer.Peer
	// net is the network measurements (their namespaces, sink and daemon).
	net *netbench.Bench
	// reg is the images measurement's registry (images.go).
	reg *regtest.Registry

	// parents are the filled parents of fork and snapshot, by size, and
	// copies the copy peer's samples of each.
	parents map[int64]*forkParent
	copies  map[int64][]float64
}

// Logf writes one progress line.
func (b *bench) Logf(format string, args ...any) {
	fmt.Fprintf(b.log, "bench: "+format+"\n", args...)
}

func (b *bench) run(ctx context.Context) error {
	tmp, err := os.MkdirTemp(b.opts.TempRoot, "berth-bench-")
	if err != nil {
		return err
	}
	// Sandbox root (a mapped uid) must traverse to the overlay roots below.
	if err := os.Chmod(tmp, 0o711); err != nil {
		return err
	}
	b.tmp = tmp
	b.rep.WorkDir = tmp
	b.Logf("working in %s", tmp)
	b.net = netbench.New(netbench.Options{Binary: b.opts.Binary, WorkDir: tmp,
		Iterations: b.opts.Iterations, NetBytes: b.opts.NetBytes}, b)
	serveArgs := b.opts.ServeArgs
	if b.opts.selected(Images) {
		more, err := b.startRegistry()
		if err != nil {
			return err
		}
		serveArgs = append(slices.Clone(serveArgs), more...)
	}
	b.d, err = harness.StartDaemon(ctx, b.opts.Binary, tmp, "", serveArgs...)
	if err != nil {
		return err
	}
	b.Logf("daemon pid %d ready on %s", b.d.PID(), b.d.Sock)
	if v, err := b.d.C.Version(ctx); err == nil {
		b.rep.Machine.Berth = v.Version
	}
	if st, err := os.Stat(b.opts.Binary); err == nil {
		b.rep.Machine.BerthBytes = st.Size()
	}
	if st, err := os.Stat(b.opts.CLI); err == nil {
		b.rep.Machine.CLIBytes = st.Size()
	}
	if st, err := os.Stat(filepath.Join(filepath.Dir(b.opts.Binary), "berth-agent")); err == nil {
		b.rep.Machine.AgentBytes = st.Size()
	}
	b.peer, err = peer.New(ctx, b.opts.Runc, tmp, b.d.C, b.d.Instance)
	if err != nil {
		return fmt.Errorf("setting up the runc peer: %w", err)
	}
	if err := b.warmUp(ctx); err != nil {
		return err
	}
	steps := []struct {
		name string
		fn   func(context.Context) error
	}{
		{TTI, b.measureTTI},
		{Exec, b.measureExec},
		{RunCLI, b.measureRunCLI},
		{Churn, b.measureChurn},
		{Density, b.measureDensity},
		{Pause, b.measurePause},
		{Restart, b.measureRestart},
		{Expiry, b.measureExpiry},
		{Fork, b.measureFork},
		{Pool, b.measurePool},
		{Snapshot, b.measureSnapshot},
		{Runsc, b.measureRunsc},
		{Egress, b.net.MeasureEgress},
		{NAT, b.net.MeasureNAT},
		{Compute, b.measureCompute},
		{Images, b.measureImages},
	}
	for _, s := range steps {
		if !b.opts.selected(s.name) {
			continue
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := s.fn(ctx); err != nil {
			return fmt.Errorf("%s: %w", s.name, err)
		}
	}
	return b.dropParents(ctx)
}

// Add appends a row, computing its ratio.
func (b *bench) Add(r Row) {
	if r.PeerStat != nil && r.PeerStat.P50 > 0 {
		r.Ratio = r.Berth.P50 / r.PeerStat.P50
	}
	b.rep.Rows = append(b.rep.Rows, r)
}

// machineInfo describes the host.
func machineInfo(runc string) Machine {
	m := Machine{CPUs: goruntime.NumCPU(), Go: goruntime.Version(), Cgroup: "v1"}
	if cgroups.V2() {
		m.Cgroup = "v2"
	}
	var u unix.Utsname
	if unix.Uname(&u) == nil {
		m.Kernel = unix.ByteSliceToString(u.Sysname[:]) + " " + unix.ByteSliceToString(u.Release[:]) +
			" " + unix.ByteSliceToString(u.Machine[:])
	}
	if out, err := exec.Command(runc, "--version").Output(); err == nil {
		m.Runc = strings.TrimPrefix(strings.SplitN(strings.TrimSpace(string(out)), "\n", 2)[0], "runc version ")
	}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(l, ":"); ok && strings.TrimSpace(k) == "model name" {
				m.CPUModel = strings.TrimSpace(v)
				break
			}
		}
	}
	if v, err := harness.Meminfo("MemTotal"); err == nil {
		m.MemTotalMiB = v >> 20
	}
	return m
}

// keepLog copies the daemon's log out of the work dir.
func (b *bench) keepLog() (string, error) {
	data, err := os.ReadFile(b.d.LogPath)
	if err != nil {
		return "", err
	}
	dst := b.tmp + "-daemon.log"
	return dst, os.WriteFile(dst, data, 0o600)
}
