package bench

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/internal/bench/harness"
)

// The compute measurement is the figure the field now races on (ComputeSDK's
// runs): the time from asking for a sandbox to the first command's result,
// under three arrival patterns: one after another, staggered 200 ms apart,
// and a burst of many at once. Each sample is create + first exec of the
// command, the client's wall time; a failed create or exec counts as a
// failure, not a sample, and the run goes on so the success count is
// reported. The peer is raw `runc run true` of the bench's bundle under the
// same arrivals in the same run.

// DefaultBurst is the size of the compute measurement's burst.
const DefaultBurst = 100

// computeStagger is the gap between starts in the staggered pattern.
const computeStagger = 200 * time.Millisecond

// publishedBurst is the fixed reference beside the burst rows: ComputeSDK's
// October 2026 run, 100 creates at once, time to the first successful
// `node -v`, p50/p95 in ms, as published (not measured here).
const publishedBurst = "published (ComputeSDK, Oct 2026, 100 at once, first `node -v`, p50/p95 ms): " +
	"miosa 118/131, isorun 138/149, createos 160/175, archil 190/390, Cloudflare 635/731, " +
	"Daytona 646/848, Vercel 666/823, Modal 1046/1260, E2B 1333/1602"

// arrival is one pattern: n starts, gap apart (gap < 0: each after the
// previous one ended).
type arrival struct {
	name string
	n    int
	gap  time.Duration
	// warm: wait first until the daemon's automatic warm pool holds as
	// many ready members as it wants (its size after the earlier
	// pattern's burst), as a service does between bursts.
	warm bool
}

// arrived is what one pattern measured.
type arrived struct {
	lat      []float64 // ms, successes only
	failures int
	firstErr error
	wall     time.Duration
}

// arrive runs fn n times in the pattern a and collects the latencies.
func arrive(ctx context.Context, a arrival, fn func(ctx context.Context) (time.Duration, error)) arrived {
	var (
		mu  sync.Mutex
		out arrived
		wg  sync.WaitGroup
	)
	one := func() {
		d, err := fn(ctx)
		mu.Lock()
		defer mu.Unlock()
		if err != nil {
			out.failures++
			if out.firstErr == nil {
				out.firstErr = err
			}
			return
		}
		out.lat = append(out.lat, harness.MS(d))
	}
	start := time.Now()
	for i := range a.n {
		if ctx.Err() != nil {
			break
		}
		if a.gap < 0 {
			one()
			continue
		}
		if i > 0 && a.gap > 0 {
			select {
			case <-ctx.Done():
			case <-time.After(a.gap):
			}
		}
		wg.Add(1)
		go func() { defer wg.Done(); one() }()
	}
	wg.Wait()
	out.wall = time.Since(start)
	return out
}

func (b *bench) measureCompute(ctx context.Context) error {
	burst := b.opts.Burst
	patterns := []arrival{
		{"sequential", b.opts.Iterations, -1, false},
		{fmt.Sprintf("staggered %d ms apart", computeStagger.Milliseconds()), b.opts.Iterations, computeStagger, false},
		{fmt.Sprintf("burst of %d at once", burst), burst, 0, false},
		{fmt.Sprintf("burst of %d at once, after a warm-up burst", burst), burst, 0, true},
	}
	type command struct {
		label string
		argv  []string
	}
	cmds := []command{{"`true`", []string{"true"}}}
	// The default template runs over the host's /usr: node is there when
	// the host has it, as ComputeSDK's figure asks.
	if _, err := os.Stat("/usr/bin/node"); err == nil {
		cmds = append(cmds, command{"`node -v`", []string{"node", "-v"}})
	}
	for _, p := range patterns {
		for _, cmd := range cmds {
			if cmd.argv[0] != "true" && p.gap != 0 {
				continue // node -v in the burst only, as published
			}
			if err := b.computeRows(ctx, p, cmd.label, cmd.argv); err != nil {
				return err
			}
		}
	}
	return nil
}

// computeRows measures one pattern and command on berth and the peer and
// adds their row.
func (b *bench) computeRows(ctx context.Context, p arrival, label string, argv []string) error {
	c := b.d.C
	var (
		mu  sync.Mutex
		ids []string
	)
	b.Logf("compute: %s, first %s", p.name, label)
	var pool string
	if p.warm {
		var err error
		if pool, err = b.waitWarm(ctx); err != nil {
			return err
		}
	}
	got := arrive(ctx, p, func(ctx context.Context) (time.Duration, error) {
		t0 := time.Now()
		sb, err := c.CreateSandbox(ctx, api.CreateSandboxRequest{})
		if err != nil {
			return 0, fmt.Errorf("create: %w", err)
		}
		mu.Lock()
		ids = append(ids, sb.ID)
		mu.Unlock()
		exit, err := c.Exec(ctx, sb.ID, api.ExecRequest{Cmd: argv}, nil, nil)
		if err != nil {
			return 0, fmt.Errorf("exec in %s: %w", sb.ID, err)
		}
		if exit.Code != 0 {
			return 0, fmt.Errorf("%s in %s exited %d", strings.Join(argv, " "), sb.ID, exit.Code)
		}
		return time.Since(t0), nil
	})
	// Untimed: the pattern's sandboxes go before the peer runs.
	if _, _, err := parallel(context.WithoutCancel(ctx), len(ids), max(b.opts.Concurrency, 8), nil, func(ctx context.Context, i int) error {
		_, err := c.DeleteSandbox(ctx, ids[i], true)
		return err
	}); err != nil {
		return fmt.Errorf("compute: deleting: %w", err)
	}
	if err := b.waitGone(ctx, ids); err != nil {
		return err
	}
	peer := arrive(ctx, p, b.peer.RunTrue)
	if peer.firstErr != nil {
		return fmt.Errorf("compute peer (%s): %w", p.name, peer.firstErr)
	}
	ps := harness.Summarize(peer.lat)
	bs := harness.Summarize(got.lat)
	note := fmt.Sprintf("%d/%d succeeded, p99 %.0f ms, wall %.2f s (peer p99 %.0f ms, wall %.2f s)",
		len(got.lat), p.n, bs.P99, got.wall.Seconds(), ps.P99, peer.wall.Seconds())
	if got.firstErr != nil {
		note += "; first failure: " + got.firstErr.Error()
	}
	if pool != "" {
		note += "; " + pool
	}
	row := Row{Measurement: Compute, Name: fmt.Sprintf("compute: %s, create → first %s", p.name, label), Unit: "ms",
		Berth: bs, Peer: "runc run true, same arrivals", PeerStat: &ps, Note: note}
	switch {
	case p.gap == 0:
		row.Target = "100% ok, p50 ≤ 100 ms, p95 ≤ 130 ms"
		row.Pass = harness.Pass(got.failures == 0 && bs.P50 <= 100 && bs.P95 <= 130)
		if label != "`true`" {
			row.Note += "; " + publishedBurst
		}
	case p.gap > 0:
		row.Target = "p50 ≤ 10 ms"
		row.Pass = harness.Pass(got.failures == 0 && bs.P50 <= 10)
	default:
		row.Target = "p50 ≤ 10 ms, p95 ≤ 25 ms"
		row.Pass = harness.Pass(got.failures == 0 && bs.P50 <= 10 && bs.P95 <= 25)
	}
	b.Add(row)
	return nil
}

// waitWarm waits until the default template's warm pool holds as many
// ready members as its size (at most 5 minutes) and says what it held.
// With the daemon's defaults that is the automatic pool, sized by the
// bursts before.
func (b *bench) waitWarm(ctx context.Context) (string, error) {
	t0 := time.Now()
	for {
		p, err := b.d.C.GetPool(ctx, "base")
		if err != nil {
			return "", err
		}
		if p.Min == 0 && !p.Auto {
			return "no warm pool (--warm-pool off)", nil
		}
		if p.Min > 0 && p.Ready >= p.Min || time.Since(t0) > 5*time.Minute {
			kind := "set"
			if p.Auto {
				kind = "automatic"
			}
			b.Logf("compute: warm pool %d/%d ready after %s", p.Ready, p.Min, time.Since(t0).Round(time.Second))
			return fmt.Sprintf("%s warm pool: %d of %d members ready at the start (filled in %.0f s)",
				kind, p.Ready, p.Min, time.Since(t0).Seconds()), nil
		}
		select {
		case <-ctx.Done():
			return "", ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// waitGone waits until none of ids is a live sandbox: the pattern's own,
// not whatever an earlier measurement's pool still retires.
func (b *bench) waitGone(ctx context.Context, ids []string) error {
	mine := map[string]bool{}
	for _, id := range ids {
		mine[id] = true
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		sbs, err := b.d.C.ListSandboxes(ctx, false)
		if err != nil {
			return err
		}
		left := 0
		for _, sb := range sbs {
			if mine[sb.ID] {
				left++
			}
		}
		if left == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("compute: %d of its sandboxes still live 60s after their delete", left)
		}
		time.Sleep(2 * time.Millisecond)
	}
}
