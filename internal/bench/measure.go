package bench

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/berth-sh/berth/client"
	"github.com/berth-sh/berth/internal/bench/harness"
	"github.com/berth-sh/berth/internal/cgroups"
)

// cycle creates a sandbox, execs true in it and deletes it. It returns the
// time until the first exec returned (time to interactive), the time of the
// create call alone and of the delete call. The create is cold (coldReq):
// the rows beside raw runc measure the cold path, and none of their creates
// counts as demand for the automatic warm pool.
func cycle(ctx context.Context, c *client.Client) (tti, create, del time.Duration, err error) {
	t0 := time.Now()
	sb, err := c.CreateSandbox(ctx, coldReq)
	if err != nil {
		return 0, 0, 0, fmt.Errorf("create: %w", err)
	}
	create = time.Since(t0)
	if _, err = harness.ExecTrue(ctx, c, sb.ID); err != nil {
		_, _ = c.DeleteSandbox(context.WithoutCancel(ctx), sb.ID, true)
		return 0, 0, 0, err
	}
	tti = time.Since(t0)
	t1 := time.Now()
	if _, err = c.DeleteSandbox(ctx, sb.ID, true); err != nil {
		return 0, 0, 0, fmt.Errorf("delete %s: %w", sb.ID, err)
	}
	return tti, create, time.Since(t1), nil
}

// warmUp pays the one-time costs (page cache, first connections, runc's
// first start) on both sides before anything is timed.
func (b *bench) warmUp(ctx context.Context) error {
	b.Logf("warming up")
	for range 2 {
		if _, _, _, err := cycle(ctx, b.d.C); err != nil {
			return fmt.Errorf("warm-up: %w", err)
		}
		if _, err := b.peer.RunTrue(ctx); err != nil {
			return fmt.Errorf("warm-up: %w", err)
		}
	}
	return nil
}

// Every logs "what i+1/n" at each fifth of n and at the end.
func (b *bench) Every(i, n int, what string) {
	if step := max(n/5, 1); (i+1)%step == 0 || i+1 == n {
		b.Logf("%s %d/%d", what, i+1, n)
	}
}

// (a) time to interactive.
func (b *bench) measureTTI(ctx context.Context) error {
	n := b.opts.Iterations
	var tti, create, del, peer, bare, floor harness.Samples
	steps0, err := b.provisionSteps(ctx)
	if err != nil {
		return err
	}
	for i := range n {
		t, c, d, err := cycle(ctx, b.d.C)
		if err != nil {
			return err
		}
		fd, err := unshareTrue(ctx)
		if err != nil {
			return err
		}
		floor.Add(fd)
		tti.Add(t)
		create.Add(c)
		del.Add(d)
		pd, err := b.peer.RunTrue(ctx)
		if err != nil {
			return err
		}
		peer.Add(pd)
		bd, err := b.peer.RunTrueSeccomp(ctx, false)
		if err != nil {
			return err
		}
		bare.Add(bd)
		b.Every(i, n, "time to interactive")
	}
	ps := harness.Summarize(peer.V)
	row := Row{Measurement: TTI, Name: "time to interactive (create + first exec)", Unit: "ms",
		Berth: harness.Summarize(tti.V), Peer: "runc run true", PeerStat: &ps, Target: "≤ 1.0× peer"}
	row.Pass = harness.Pass(row.Berth.P50 <= ps.P50)
	b.Add(row)
	b.Add(Row{Measurement: TTI, Name: "  of which: create call", Unit: "ms", Berth: harness.Summarize(create.V),
		Peer: "runc run true", PeerStat: &ps})
	steps1, err := b.provisionSteps(ctx)
	if err != nil {
		return err
	}
	b.addStepRows(steps0, steps1, &floor)
	b.Add(Row{Measurement: TTI, Name: "  delete call (after the exec)", Unit: "ms", Berth: harness.Summarize(del.V),
		Note: "runc run's own teardown is inside the peer's figure"})
	// berth's agent installs the same profile, compiled once (see
	// internal/seccomp); this row shows runc without any profile, the
	// floor of what a runc-based create can cost.
	bs := harness.Summarize(bare.V)
	b.Add(Row{Measurement: TTI, Name: "  vs runc without seccomp (floor)", Unit: "ms", Berth: harness.Summarize(tti.V),
		Peer: "runc run true, no seccomp", PeerStat: &bs,
		Note: "berth's agent installs the profile the peer has runc compile on every run"})
	return nil
}

// (b) exec round trip in a running sandbox.
func (b *bench) measureExec(ctx context.Context) error {
	c := b.d.C
	sb, err := c.CreateSandbox(ctx, coldReq)
	if err != nil {
		return fmt.Errorf("create: %w", err)
	}
	defer c.DeleteSandbox(context.WithoutCancel(ctx), sb.ID, true)
	pid, _, err := b.peer.StartSleep(ctx)
	if err != nil {
		return err
	}
	defer b.peer.Remove(context.WithoutCancel(ctx), pid)
	for range 5 {
		if _, err := harness.ExecTrue(ctx, c, sb.ID); err != nil {
			return err
		}
	}
	for range 2 {
		if _, err := b.peer.ExecTrue(ctx, pid); err != nil {
			return err
		}
	}
	bs, ps, err := b.sideBySide("exec round trip",
		func() (time.Duration, error) { return harness.ExecTrue(ctx, c, sb.ID) },
		func() (time.Duration, error) { return b.peer.ExecTrue(ctx, pid) })
	if err != nil {
		return err
	}
	peer := harness.Summarize(ps.V)
	row := Row{Measurement: Exec, Name: "exec round trip of true (SDK)", Unit: "ms", Berth: harness.Summarize(bs.V),
		Peer: "runc exec true", PeerStat: &peer, Target: "p50 ≤ 3 ms and ≤ 0.1× peer"}
	row.Pass = harness.Pass(row.Berth.P50 <= 3 && row.Berth.P50 <= 0.1*peer.P50)
	b.Add(row)
	return b.measureCLIExec(ctx, sb.ID, pid)
}

// measureCLIExec times `berth exec ID -- true`, the CLI's whole process
// (start-up, the daemon's round trip, exit), beside `runc exec` of the
// peer's container: CLI to CLI.
func (b *bench) measureCLIExec(ctx context.Context, id, pid string) error {
	run := func() (time.Duration, error) { return b.timeCLI(ctx, "exec", id, "--", "true") }
	if _, err := run(); err != nil { // warm the binary's pages
		return err
	}
	bs, ps, err := b.sideBySide("berth exec (CLI)", run, func() (time.Duration, error) { return b.peer.ExecTrue(ctx, pid) })
	if err != nil {
		return err
	}
	peer := harness.Summarize(ps.V)
	row := Row{Measurement: Exec, Name: "  `berth exec ID -- true` (CLI wall time)", Unit: "ms", Berth: harness.Summarize(bs.V),
		Peer: "runc exec true (CLI)", PeerStat: &peer, Target: "≤ 0.25× peer"}
	row.Pass = harness.Pass(row.Berth.P50 <= 0.25*peer.P50)
	b.Add(row)
	return nil
}

// cliEnv is the environment of the CLI processes: the private daemon's
// host, no API key.
func (b *bench) cliEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "BERTH_HOST=") && !strings.HasPrefix(kv, "BERTH_API_KEY=") {
			env = append(env, kv)
		}
	}
	return append(env, "BERTH_HOST="+b.d.Host)
}

// timeCLI runs the CLI with args against the private daemon and returns
// its whole process's wall time.
func (b *bench) timeCLI(ctx context.Context, args ...string) (time.Duration, error) {
	cmd := exec.CommandContext(ctx, b.opts.CLI, args...)
	cmd.Env = b.cliEnv()
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	t0 := time.Now()
	err := cmd.Run()
	d := time.Since(t0)
	if err != nil {
		return d, fmt.Errorf("berth %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(out.String()))
	}
	return d, nil
}

// sideBySide takes Iterations samples of berth and of its peer,
// alternating, so that both see the same moments of the host.
func (b *bench) sideBySide(what string, berth, peer func() (time.Duration, error)) (bs, ps harness.Samples, err error) {
	n := b.opts.Iterations
	for i := range n {
		d, err := berth()
		if err != nil {
			return bs, ps, err
		}
		bs.Add(d)
		pd, err := peer()
		if err != nil {
			return bs, ps, err
		}
		ps.Add(pd)
		b.Every(i, n, what)
	}
	return bs, ps, nil
}

// waitNoSandboxes waits (untimed) until the daemon has no live sandbox:
// `berth run` returns with the command's exit, while its sandbox is
// still being destroyed.
func (b *bench) waitNoSandboxes(ctx context.Context) error {
	deadline := time.Now().Add(60 * time.Second)
	for {
		sbs, err := b.d.C.ListSandboxes(ctx, false)
		if err != nil {
			return err
		}
		if len(sbs) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d sandboxes still live 60s after their run ended", len(sbs))
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// (c) one-shot `berth run -- true` from the CLI binary.
func (b *bench) measureRunCLI(ctx context.Context) error {
	run := func() (time.Duration, error) {
		d, err := b.timeCLI(ctx, "run", "--", "true")
		if err != nil {
			return d, err
		}
		return d, b.waitNoSandboxes(ctx)
	}
	if _, err := run(); err != nil { // warm the binary's pages
		return err
	}
	bs, ps, err := b.sideBySide("berth run", run, func() (time.Duration, error) { return b.peer.RunTrue(ctx) })
	if err != nil {
		return err
	}
	peer := harness.Summarize(ps.V)
	row := Row{Measurement: RunCLI, Name: "one-shot `berth run -- true` (CLI wall time)", Unit: "ms",
		Berth: harness.Summarize(bs.V), Peer: "runc run true", PeerStat: &peer, Target: "≤ 1.5× peer"}
	row.Pass = harness.Pass(row.Berth.P50 <= 1.5*peer.P50)
	b.Add(row)
	return b.measureCLIStart(ctx)
}

// measureCLIStart times the CLI's own start-up, no daemon asked: `berth
// help` (package init and the command tree) beside `runc --version`, the
// peer's smallest whole-process call.
func (b *bench) measureCLIStart(ctx context.Context) error {
	timed := func(name string, args ...string) (time.Duration, error) {
		cmd := exec.CommandContext(ctx, name, args...)
		t0 := time.Now()
		out, err := cmd.CombinedOutput()
		if err != nil {
			return 0, fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
		}
		return time.Since(t0), nil
	}
	var bs, ps harness.Samples
	for i := range b.opts.Iterations + 1 {
		bd, err := timed(b.opts.CLI, "help")
		if err != nil {
			return err
		}
		pd, err := timed(b.opts.Runc, "--version")
		if err != nil {
			return err
		}
		if i > 0 { // the first warms the binaries' pages
			bs.Add(bd)
			ps.Add(pd)
		}
	}
	peer := harness.Summarize(ps.V)
	b.Add(Row{Measurement: RunCLI, Name: "  CLI start (`berth help`, no daemon)", Unit: "ms",
		Berth: harness.Summarize(bs.V), Peer: "runc --version", PeerStat: &peer,
		Note: fmt.Sprintf("berth (CLI) %s, berthd %s, berth-agent %s", sizeMiB(b.rep.Machine.CLIBytes), sizeMiB(b.rep.Machine.BerthBytes), sizeMiB(b.rep.Machine.AgentBytes))})
	return nil
}

func sizeMiB(n int64) string { return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20)) }

// loop runs fn from workers goroutines until d has passed and returns the
// per-call latencies and the wall time until the last call ended.
func loop(ctx context.Context, workers int, d time.Duration, fn func(ctx context.Context, w int) (time.Duration, error)) ([]float64, time.Duration, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		mu       sync.Mutex
		lat      []float64
		firstErr error
		wg       sync.WaitGroup
	)
	start := time.Now()
	deadline := start.Add(d)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(deadline) && ctx.Err() == nil {
				l, err := fn(ctx, w)
				mu.Lock()
				if err != nil {
					if firstErr == nil {
						firstErr = err
					}
					mu.Unlock()
					cancel()
					return
				}
				lat = append(lat, harness.MS(l))
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return lat, time.Since(start), firstErr
}

// (d) churn: create/exec/delete cycles from concurrent clients.
func (b *bench) measureChurn(ctx context.Context) error {
	workers := b.opts.Concurrency
	clients := make([]*client.Client, workers)
	for i := range clients {
		c, err := client.New(b.d.Host, "", client.WithUserAgent("berth-bench"))
		if err != nil {
			return err
		}
		defer c.Close()
		clients[i] = c
	}
	b.Logf("churn: %d clients for %s", workers, b.opts.Churn)
	bl, bwall, err := loop(ctx, workers, b.opts.Churn, func(ctx context.Context, w int) (time.Duration, error) {
		t0 := time.Now()
		_, _, _, err := cycle(ctx, clients[w])
		return time.Since(t0), err
	})
	if err != nil {
		return err
	}
	b.Logf("churn: %d runc run callers for %s", workers, b.opts.Churn)
	pl, pwall, err := loop(ctx, workers, b.opts.Churn, func(ctx context.Context, _ int) (time.Duration, error) {
		return b.peer.RunTrue(ctx)
	})
	if err != nil {
		return err
	}
	peerLat := harness.Summarize(pl)
	b.Add(Row{Measurement: Churn, Name: fmt.Sprintf("churn cycle create+exec+delete (%d clients)", workers), Unit: "ms",
		Berth: harness.Summarize(bl), Peer: fmt.Sprintf("runc run true (%d concurrent)", workers), PeerStat: &peerLat})
	brate := float64(len(bl)) / bwall.Seconds()
	prate := harness.Aggregate(float64(len(pl))/pwall.Seconds(), len(pl))
	row := Row{Measurement: Churn, Name: fmt.Sprintf("churn throughput (%d clients)", workers), Unit: "/s",
		Berth: harness.Aggregate(brate, len(bl)), Peer: fmt.Sprintf("runc run true (%d concurrent)", workers), PeerStat: &prate,
		Target: "≥ 20/s", Pass: harness.Pass(brate >= 20),
		Note: fmt.Sprintf("%d cycles in %.1fs; peer %d in %.1fs", len(bl), bwall.Seconds(), len(pl), pwall.Seconds())}
	b.Add(row)
	return nil
}

// parallel runs fn(i) for i in [0,n) on workers goroutines and returns
// the latencies of the calls that succeeded. After the first error no new
// call starts, but calls in flight finish (their side effects are known to
// the caller); that error is returned.
func parallel(ctx context.Context, n, workers int, progress func(done int), fn func(ctx context.Context, i int) error) ([]float64, time.Duration, error) {
	var (
		next     atomic.Int64
		done     atomic.Int64
		stop     atomic.Bool
		mu       sync.Mutex
		lat      []float64
		firstErr error
		wg       sync.WaitGroup
	)
	start := time.Now()
	for range min(workers, n) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !stop.Load() && ctx.Err() == nil {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				t0 := time.Now()
				err := fn(ctx, i)
				d := time.Since(t0)
				mu.Lock()
				if err != nil {
					if firstErr == nil {
						firstErr = err
					}
					stop.Store(true)
				} else {
					lat = append(lat, harness.MS(d))
				}
				mu.Unlock()
				if err == nil && progress != nil {
					progress(int(done.Add(1)))
				}
			}
		}()
	}
	wg.Wait()
	if firstErr == nil && ctx.Err() != nil {
		firstErr = ctx.Err()
	}
	return lat, time.Since(start), firstErr
}

// cgroupMemory returns the memory charged to cgroup rel, in bytes.
func cgroupMemory(rel string) (int64, error) {
	file := filepath.Join(cgroups.Root, "memory", rel, "memory.usage_in_bytes")
	if cgroups.V2() {
		file = filepath.Join(cgroups.Root, rel, "memory.current")
	}
	b, err := os.ReadFile(file)
	if err != nil {
		return 0, err
	}
	return strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
}

// cgroupRSS sums the VmRSS of the processes in cgroup rel, in bytes.
func cgroupRSS(rel string) (int64, int, error) {
	pids := cgroups.Procs(rel)
	var sum int64
	n := 0
	for _, pid := range pids {
		r, err := harness.RSS(pid)
		if err != nil {
			continue // exited meanwhile
		}
		sum += r
		n++
	}
	if n == 0 {
		return 0, 0, fmt.Errorf("cgroup %s has no processes", rel)
	}
	return sum, n, nil
}

// memOf measures the cgroup memory and process RSS (MiB) of each cgroup.
func memOf(rels []string) (cg, rs []float64, err error) {
	for _, rel := range rels {
		m, err := cgroupMemory(rel)
		if err != nil {
			return nil, nil, err
		}
		r, _, err := cgroupRSS(rel)
		if err != nil {
			return nil, nil, err
		}
		cg = append(cg, harness.MiB(float64(m)))
		rs = append(rs, harness.MiB(float64(r)))
	}
	return cg, rs, nil
}

// peerIdleMax bounds the idle raw runc containers of the density peer.
const peerIdleMax = 20

// (e) density: many idle sandboxes.
func (b *bench) measureDensity(ctx context.Context) error {
	c := b.d.C
	n, workers := b.opts.Idle, b.opts.Concurrency
	k := min(n, peerIdleMax)
	if err := b.waitNoSandboxes(ctx); err != nil {
		return err
	}
	settle := func() { time.Sleep(time.Second) }
	settle()
	m0, err := harness.Meminfo("MemAvailable")
	if err != nil {
		return err
	}

	// The peer's containers first: they draw on the same per-uid kernel
	// key quota as the sandboxes (see below), and are few.
	b.Logf("density: starting %d raw runc containers", k)
	pids := make([]string, k)
	peerStart, _, err := parallel(ctx, k, workers, nil, func(ctx context.Context, i int) error {
		id, _, err := b.peer.StartSleep(ctx)
		pids[i] = id
		return err
	})
	defer func() {
		for _, id := range pids {
			if id != "" {
				b.peer.Remove(context.WithoutCancel(ctx), id)
			}
		}
	}()
	if err != nil {
		return err
	}
	settle()
	m1, err := harness.Meminfo("MemAvailable")
	if err != nil {
		return err
	}
	prels := make([]string, k)
	for i, id := range pids {
		prels[i] = b.peer.CgroupRel(id)
	}
	pcg, prss, err := memOf(prels)
	if err != nil {
		return err
	}
	// runc exec needs a key too (a new session keyring for the process):
	// measure it before the sandboxes may have used up the quota.
	var pex harness.Samples
	for i := range b.opts.Iterations {
		pd, err := b.peer.ExecTrue(ctx, pids[i%k])
		if err != nil {
			return err
		}
		pex.Add(pd)
	}

	// Each sandbox's root is a host uid of its own range (internal/node/
	// local/ids.go), so the kernel's per-uid key quota (a session keyring
	// per container) is not shared between sandboxes.
	ids := make([]string, n)
	b.Logf("density: creating %d sandboxes (%d concurrent)", n, workers)
	createLat, createWall, err := parallel(ctx, n, workers, func(done int) { b.Every(done-1, n, "density: created") },
		func(ctx context.Context, i int) error {
			sb, err := c.CreateSandbox(ctx, coldReq) // no automatic pool beside the idle ones
			if err != nil {
				return fmt.Errorf("create %d of %d: %w", i+1, n, err)
			}
			ids[i] = sb.ID
			return nil
		})
	// A create that fails (a host limit reached) ends the creates; the
	// figures are then those of the sandboxes that were made.
	createErr := err
	if createErr != nil {
		b.Logf("density: create failed after %d sandboxes: %v", len(createLat), createErr)
		if ctx.Err() != nil {
			return createErr
		}
	}
	ids = slices.DeleteFunc(ids, func(id string) bool { return id == "" })
	want := n
	if n = len(ids); n == 0 {
		return createErr
	}
	settle()
	m2, err := harness.Meminfo("MemAvailable")
	if err != nil {
		return err
	}
	rels := make([]string, n)
	for i, id := range ids {
		rels[i] = "/" + b.d.Instance + "/" + id
	}
	bcg, brss, err := memOf(rels)
	if err != nil {
		return err
	}
	drss, err := harness.RSS(b.d.PID())
	if err != nil {
		return err
	}

	b.Logf("density: exec round trips with %d sandboxes running", n)
	var bex harness.Samples
	for i := range b.opts.Iterations {
		d, err := harness.ExecTrue(ctx, c, ids[i%n])
		if err != nil {
			return err
		}
		bex.Add(d)
	}

	b.Logf("density: deleting %d sandboxes (%d concurrent)", n, workers)
	delLat, delWall, err := parallel(ctx, n, workers, func(done int) { b.Every(done-1, n, "density: deleted") },
		func(ctx context.Context, i int) error {
			if _, err := c.DeleteSandbox(ctx, ids[i], true); err != nil {
				return fmt.Errorf("delete %s: %w", ids[i], err)
			}
			return nil
		})
	if err != nil {
		return err
	}
	pdel, _, err := parallel(ctx, k, workers, nil, func(ctx context.Context, i int) error {
		_, err := b.peer.Remove(ctx, pids[i])
		if err == nil {
			pids[i] = ""
		}
		return err
	})
	if err != nil {
		return err
	}

	if createErr != nil {
		note := fmt.Sprintf("creates stopped after %d sandboxes: %v", n, createErr)
		if b.d.LogContains("session keyring") || strings.Contains(createErr.Error(), "keyring") {
			note += " (daemon log: runc could not create the container's session keyring)"
			note += fmt.Sprintf(" — a session keyring counts against its owner uid's kernel key quota "+
				"(kernel.keys.maxkeys=%s, maxbytes=%s)", sysctl("kernel/keys/maxkeys"), sysctl("kernel/keys/maxbytes"))
		}
		b.Add(Row{Measurement: Density, Name: "density: idle sandboxes reached", Unit: "",
			Berth: harness.Aggregate(float64(n), n), Target: fmt.Sprintf("= %d", want), Pass: harness.Pass(false), Note: note})
	}
	peerName := fmt.Sprintf("runc, %d idle `sleep` containers", k)
	ps := harness.Summarize(peerStart)
	b.Add(Row{Measurement: Density, Name: fmt.Sprintf("density: create %d (%d concurrent), per create", n, workers), Unit: "ms",
		Berth: harness.Summarize(createLat), Peer: fmt.Sprintf("runc run -d sleep (%d, %d concurrent)", k, workers), PeerStat: &ps,
		Note: fmt.Sprintf("all %d created in %.1fs", n, createWall.Seconds())})
	memRow := Row{Measurement: Density, Name: "density: host memory per idle sandbox (MemAvailable Δ / N)", Unit: "MiB",
		Berth: harness.Aggregate(harness.MiB(float64(m1-m2))/float64(n), n), Peer: peerName,
		Note: "MemAvailable is host-wide: anything else running on the host adds noise, most for the small peer"}
	pm := harness.Aggregate(harness.MiB(float64(m0-m1))/float64(k), k)
	memRow.PeerStat = &pm
	b.Add(memRow)
	pc := harness.Summarize(pcg)
	b.Add(Row{Measurement: Density, Name: "density: cgroup memory per idle sandbox", Unit: "MiB",
		Berth: harness.Summarize(bcg), Peer: peerName, PeerStat: &pc, Note: "memory.usage_in_bytes, page cache included"})
	pr := harness.Summarize(prss)
	b.Add(Row{Measurement: Density, Name: "density: RSS of processes per idle sandbox", Unit: "MiB",
		Berth: harness.Summarize(brss), Peer: peerName, PeerStat: &pr, Note: "VmRSS summed over the cgroup; shared pages counted in each"})
	b.Add(Row{Measurement: Density, Name: fmt.Sprintf("density: daemon RSS with %d idle", n), Unit: "MiB",
		Berth: harness.Aggregate(harness.MiB(float64(drss)), 1)})
	pe := harness.Summarize(pex.V)
	b.Add(Row{Measurement: Density, Name: fmt.Sprintf("density: exec round trip with %d idle", n), Unit: "ms",
		Berth: harness.Summarize(bex.V), Peer: fmt.Sprintf("runc exec true (%d idle)", k), PeerStat: &pe})
	pd := harness.Summarize(pdel)
	b.Add(Row{Measurement: Density, Name: fmt.Sprintf("density: delete %d (%d concurrent), per delete", n, workers), Unit: "ms",
		Berth: harness.Summarize(delLat), Peer: fmt.Sprintf("runc delete --force (%d, %d concurrent)", k, workers), PeerStat: &pd})
	b.Add(Row{Measurement: Density, Name: fmt.Sprintf("density: delete all %d (%d concurrent), wall time", n, workers), Unit: "s",
		Berth: harness.Aggregate(delWall.Seconds(), n), Note: fmt.Sprintf("%.1f deletes/s", float64(n)/delWall.Seconds())})
	return nil
}

// sysctl reads /proc/sys/<name>, or "?".
func sysctl(name string) string {
	b, err := os.ReadFile(filepath.Join("/proc/sys", name))
	if err != nil {
		return "?"
	}
	return strings.TrimSpace(string(b))
}
