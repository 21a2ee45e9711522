package bench

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/client"
	"github.com/berth-sh/berth/internal/bench/harness"
)

// The lifecycle measurements of persistent sandboxes (issue 3): pause and
// resume, stop → start → first exec, and the lag of policy expiry.

// persistentReq is the request of the persistent sandboxes measured by
// pause and restart: the default template with its workspace volume and
// its writable root layer kept (the default volume size).
var persistentReq = api.CreateSandboxRequest{Persistent: true, PersistRoot: true}

// (f) pause and resume of a running persistent sandbox, vs runc
// pause/resume of a running `sleep`.
func (b *bench) measurePause(ctx context.Context) error {
	c := b.d.C
	sb, err := c.CreateSandbox(ctx, persistentReq)
	if err != nil {
		return fmt.Errorf("create: %w", err)
	}
	defer c.DeleteSandbox(context.WithoutCancel(ctx), sb.ID, true)
	pid, _, err := b.peer.StartSleep(ctx)
	if err != nil {
		return err
	}
	defer b.peer.Remove(context.WithoutCancel(ctx), pid)

	pause := func() (time.Duration, time.Duration, error) {
		t0 := time.Now()
		p, err := c.Pause(ctx, sb.ID)
		dp := time.Since(t0)
		if err != nil {
			return 0, 0, fmt.Errorf("pause %s: %w", sb.ID, err)
		}
		if p.State != "paused" {
			return 0, 0, fmt.Errorf("pause %s: state %s after pause", sb.ID, p.State)
		}
		t1 := time.Now()
		r, err := c.Resume(ctx, sb.ID)
		dr := time.Since(t1)
		if err != nil {
			return 0, 0, fmt.Errorf("resume %s: %w", sb.ID, err)
		}
		if r.State != "running" {
			return 0, 0, fmt.Errorf("resume %s: state %s after resume", sb.ID, r.State)
		}
		// Untimed: the thawed sandbox answers.
		if _, err := harness.ExecTrue(ctx, c, sb.ID); err != nil {
			return 0, 0, fmt.Errorf("after resume: %w", err)
		}
		return dp, dr, nil
	}
	peerCycle := func() (time.Duration, time.Duration, error) {
		dp, err := b.peer.Cmd(ctx, "pause", pid)
		if err != nil {
			return 0, 0, err
		}
		dr, err := b.peer.Cmd(ctx, "resume", pid)
		if err != nil {
			return 0, 0, err
		}
		return dp, dr, nil
	}
	for range 2 {
		if _, _, err := pause(); err != nil {
			return err
		}
		if _, _, err := peerCycle(); err != nil {
			return err
		}
	}
	n := b.opts.Iterations
	var bp, br, pp, pr harness.Samples
	for i := range n {
		dp, dr, err := pause()
		if err != nil {
			return err
		}
		bp.Add(dp)
		br.Add(dr)
		if dp, dr, err = peerCycle(); err != nil {
			return err
		}
		pp.Add(dp)
		pr.Add(dr)
		b.Every(i, n, "pause/resume")
	}
	pps, prs := harness.Summarize(pp.V), harness.Summarize(pr.V)
	row := Row{Measurement: Pause, Name: "pause of a running persistent sandbox (SDK)", Unit: "ms",
		Berth: harness.Summarize(bp.V), Peer: "runc pause (running sleep)", PeerStat: &pps, Target: "p50 ≤ 10 ms"}
	row.Pass = harness.Pass(row.Berth.P50 <= 10)
	b.Add(row)
	row = Row{Measurement: Pause, Name: "resume of a paused persistent sandbox (SDK)", Unit: "ms",
		Berth: harness.Summarize(br.V), Peer: "runc resume (paused sleep)", PeerStat: &prs, Target: "p50 ≤ 10 ms",
		Note: "each resume is followed by an untimed exec of true to check the sandbox answers"}
	row.Pass = harness.Pass(row.Berth.P50 <= 10)
	b.Add(row)
	return nil
}

// workspaceFill is what measureRestart writes before stopping: a few MiB
// in the workspace volume and one in the persisted root layer.
const (
	workspaceFile = "/workspace/bench.dat"
	rootFile      = "/var/tmp/bench.dat"
	workspaceMiB  = 4
)

// (g) stop → start → first exec of a persistent sandbox with a filled
// workspace, vs a fresh create → first exec of the same request (same
// template, persistent, persist_root, volume size), each iteration
// interleaved; an ephemeral create of the same template is shown too.
func (b *bench) measureRestart(ctx context.Context) error {
	c := b.d.C
	sb, err := c.CreateSandbox(ctx, persistentReq)
	if err != nil {
		return fmt.Errorf("create: %w", err)
	}
	defer c.DeleteSandbox(context.WithoutCancel(ctx), sb.ID, true)
	fill := api.ExecRequest{Cmd: []string{"sh", "-c", fmt.Sprintf(
		"dd if=/dev/urandom of=%s bs=1M count=%d 2>/dev/null && dd if=/dev/urandom of=%s bs=1M count=1 2>/dev/null && sync",
		workspaceFile, workspaceMiB, rootFile)}}
	var out strings.Builder
	exit, err := c.Exec(ctx, sb.ID, fill, &out, &out)
	if err != nil {
		return fmt.Errorf("filling the workspace: %w", err)
	}
	if exit.Code != 0 {
		return fmt.Errorf("filling the workspace: exit %d: %s", exit.Code, strings.TrimSpace(out.String()))
	}

	restart := func() (stop, start time.Duration, err error) {
		t0 := time.Now()
		st, err := c.Stop(ctx, sb.ID)
		stop = time.Since(t0)
		if err != nil {
			return 0, 0, fmt.Errorf("stop %s: %w", sb.ID, err)
		}
		if st.State != "stopped" {
			return 0, 0, fmt.Errorf("stop %s: state %s after stop", sb.ID, st.State)
		}
		t1 := time.Now()
		if _, err := c.Start(ctx, sb.ID); err != nil {
			return 0, 0, fmt.Errorf("start %s: %w", sb.ID, err)
		}
		if _, err := harness.ExecTrue(ctx, c, sb.ID); err != nil {
			return 0, 0, err
		}
		return stop, time.Since(t1), nil
	}
	fresh := func(req api.CreateSandboxRequest) (time.Duration, error) {
		t0 := time.Now()
		s, err := c.CreateSandbox(ctx, req)
		if err != nil {
			return 0, fmt.Errorf("create: %w", err)
		}
		_, err = harness.ExecTrue(ctx, c, s.ID)
		d := time.Since(t0)
		if _, derr := c.DeleteSandbox(context.WithoutCancel(ctx), s.ID, true); err == nil && derr != nil {
			err = fmt.Errorf("delete %s: %w", s.ID, derr)
		}
		return d, err
	}
	// Warm-up, untimed: the first stop/start and persistent create.
	if _, _, err := restart(); err != nil {
		return err
	}
	if _, err := fresh(persistentReq); err != nil {
		return err
	}
	n := b.opts.Iterations
	var stops, starts, freshP, freshE harness.Samples
	for i := range n {
		ds, dst, err := restart()
		if err != nil {
			return err
		}
		stops.Add(ds)
		starts.Add(dst)
		d, err := fresh(persistentReq)
		if err != nil {
			return err
		}
		freshP.Add(d)
		if d, err = fresh(coldReq); err != nil {
			return err
		}
		freshE.Add(d)
		b.Every(i, n, "stop/start")
	}
	// The files survived every cycle.
	for path, size := range map[string]int64{workspaceFile: workspaceMiB << 20, rootFile: 1 << 20} {
		fi, err := c.Stat(ctx, sb.ID, path)
		if err != nil {
			return fmt.Errorf("after %d stop/start cycles: %w", n+1, err)
		}
		if fi.Size != size {
			return fmt.Errorf("after %d stop/start cycles: %s has %d bytes, want %d", n+1, path, fi.Size, size)
		}
	}
	fp, fe := harness.Summarize(freshP.V), harness.Summarize(freshE.V)
	note := fmt.Sprintf("persistent, persist_root, default volume size; %d MiB in %s and 1 MiB in %s written before; "+
		"fresh creates interleaved with the cycles and deleted after their exec (untimed)", workspaceMiB, workspaceFile, rootFile)
	row := Row{Measurement: Restart, Name: "start → first exec of a stopped persistent sandbox", Unit: "ms",
		Berth: harness.Summarize(starts.V), Peer: "fresh create + first exec, same request", PeerStat: &fp,
		Target: "≤ 1.2× fresh create", Note: note}
	b.Add(row)
	r := &b.rep.Rows[len(b.rep.Rows)-1]
	r.Pass = harness.Pass(r.Ratio > 0 && r.Ratio <= 1.2)
	b.Add(Row{Measurement: Restart, Name: "  same, beside an ephemeral create", Unit: "ms",
		Berth: harness.Summarize(starts.V), Peer: "fresh create + first exec, ephemeral", PeerStat: &fe,
		Note: "informational: the same template without a volume (no mkfs, no loop device)"})
	b.Add(Row{Measurement: Restart, Name: "  stop call (before each start)", Unit: "ms", Berth: harness.Summarize(stops.V)})
	return nil
}

// Expiry design. Every sandbox is created with the same idle timeout T
// and on_idle=pause (or stop); once all are created they are touched, all
// within a short window, and left alone, so that their idle deadlines
// (LastActivityAt + T, both read back from the API) fall together about T
// after the touches. T is chosen longer than the creates can take (from
// a probe create), so that none expires before it is touched. Idle
// deadlines are the policy the target is about, and touching
// re-anchors them without knowing in advance how long the creates take,
// which a max age (counted from each CreatedAt) could not. CPU use counts
// as activity with the default threshold, as in production: an activity
// the daemon notices moves the deadline, and the API's LastActivityAt
// includes it. Lag = PausedAt (StoppedAt) − deadline, after the fact.

// expiryPoll is how often the bench looks whether the sandboxes expired,
// once their deadlines have passed.
const expiryPoll = 250 * time.Millisecond

// (h) expiry lag with many sandboxes expiring together.
func (b *bench) measureExpiry(ctx context.Context) error {
	if err := b.waitNoSandboxes(ctx); err != nil {
		return err
	}
	if err := b.expiry(ctx, "pause", b.opts.Expiry, true); err != nil {
		return err
	}
	if b.opts.ExpiryStop > 0 {
		if err := b.waitNoSandboxes(ctx); err != nil {
			return err
		}
		return b.expiry(ctx, "stop", b.opts.ExpiryStop, false)
	}
	return nil
}

func (b *bench) expiry(ctx context.Context, action string, n int, target bool) error {
	c := b.d.C
	workers := b.opts.Concurrency
	// Probe the create time to choose T.
	t0 := time.Now()
	probe, err := c.CreateSandbox(ctx, coldReq)
	if err != nil {
		return fmt.Errorf("probe create: %w", err)
	}
	one := time.Since(t0)
	if _, err := c.DeleteSandbox(ctx, probe.ID, true); err != nil {
		return fmt.Errorf("delete probe %s: %w", probe.ID, err)
	}
	// Creates serial at worst, plus the touches, with a margin.
	T := (3*time.Second + time.Duration(n)*one*3/2).Round(time.Second)
	req := coldReq
	req.Policy = api.Policy{IdleTimeoutSeconds: T.Seconds(), OnIdle: action}

	ids := make([]string, n)
	b.Logf("expiry (%s): creating %d sandboxes (%d concurrent), idle timeout %s", action, n, workers, T)
	_, createWall, err := parallel(ctx, n, workers, func(done int) { b.Every(done-1, n, "expiry: created") },
		func(ctx context.Context, i int) error {
			sb, err := c.CreateSandbox(ctx, req)
			if err != nil {
				return fmt.Errorf("create %d of %d: %w", i+1, n, err)
			}
			ids[i] = sb.ID
			return nil
		})
	defer func() {
		left := slices.DeleteFunc(slices.Clone(ids), func(id string) bool { return id == "" })
		b.Logf("expiry (%s): deleting %d sandboxes", action, len(left))
		parallel(context.WithoutCancel(ctx), len(left), workers, nil, func(ctx context.Context, i int) error {
			_, err := c.DeleteSandbox(ctx, left[i], true)
			if client.IsNotFound(err) {
				err = nil
			}
			return err
		})
	}()
	createErr := err
	if createErr != nil {
		b.Logf("expiry (%s): create failed: %v", action, createErr)
		if ctx.Err() != nil {
			return createErr
		}
	}
	live := slices.DeleteFunc(slices.Clone(ids), func(id string) bool { return id == "" })
	if len(live) == 0 {
		return createErr
	}

	// Touch them all, as fast as the clients go.
	touched := make([]time.Time, len(live))
	tStart := time.Now()
	_, touchWall, err := parallel(ctx, len(live), workers, nil, func(ctx context.Context, i int) error {
		sb, err := c.Touch(ctx, live[i])
		if err != nil {
			return fmt.Errorf("touch %s: %w", live[i], err)
		}
		if sb.State != "running" {
			return fmt.Errorf("sandbox %s was %s before it was touched: the creates (%.1fs) took longer than the idle timeout %s allows",
				live[i], sb.State, createWall.Seconds(), T)
		}
		if sb.LastActivityAt != nil {
			touched[i] = *sb.LastActivityAt
		}
		return nil
	})
	if err != nil {
		return err
	}
	b.Logf("expiry (%s): %d created in %.1fs, touched in %.2fs; deadlines in %s", action, len(live),
		createWall.Seconds(), touchWall.Seconds(), time.Until(tStart.Add(T)).Round(time.Millisecond))

	// Wait, without any call to the daemon, until just after the last
	// deadline; then poll until every sandbox has acted.
	want := "paused"
	if action == "stop" {
		want = "stopped"
	}
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(time.Until(tStart.Add(T + touchWall + time.Second))):
	}
	giveUp := time.Now().Add(60 * time.Second)
	var final map[string]api.Sandbox
	for {
		sbs, err := c.ListSandboxes(ctx, false)
		if err != nil {
			return err
		}
		final = map[string]api.Sandbox{}
		done := 0
		for _, sb := range sbs {
			if slices.Contains(live, sb.ID) {
				final[sb.ID] = sb
				if sb.State == want {
					done++
				}
			}
		}
		if done == len(live) {
			break
		}
		if time.Now().After(giveUp) {
			return fmt.Errorf("%d of %d sandboxes not %s 60s after their idle deadline", len(live)-done, len(live), want)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(expiryPoll):
		}
	}

	var lags []float64
	var first, last time.Time
	moved := 0
	var maxMove time.Duration
	for i, id := range live {
		sb := final[id]
		if sb.LastActivityAt == nil {
			return fmt.Errorf("sandbox %s has no last_activity_at", id)
		}
		// Stored timestamps may be rounded; a move is more than that.
		if d := sb.LastActivityAt.Sub(touched[i]); d > time.Millisecond || d < -time.Millisecond {
			moved++
			maxMove = max(maxMove, d.Abs())
		}
		deadline := sb.LastActivityAt.Add(T)
		at := sb.PausedAt
		if action == "stop" {
			at = sb.StoppedAt
		}
		if at == nil {
			return fmt.Errorf("sandbox %s is %s without a time", id, sb.State)
		}
		if at.Before(deadline) && !touched[i].IsZero() {
			// Activity recorded as the sandbox was being paused or
			// stopped (its last CPU use, flushed by the action) moved
			// the deadline past the action: the action was taken on the
			// deadline of the touch.
			deadline = touched[i].Add(T)
		}
		lags = append(lags, harness.MS(at.Sub(deadline)))
		if first.IsZero() || deadline.Before(first) {
			first = deadline
		}
		if deadline.After(last) {
			last = deadline
		}
	}
	st := harness.Summarize(lags)
	verb := map[string]string{"pause": "paused", "stop": "stopped"}[action]
	note := fmt.Sprintf("p99 %s, max %s, min %s; idle timeout %s, on_idle %s, deadlines spread over %s (touch window); "+
		"%d created in %.1fs", value(st.P99, "ms"), value(st.Max, "ms"), value(st.Min, "ms"), T, action,
		last.Sub(first).Round(time.Millisecond), len(live), createWall.Seconds())
	if moved > 0 {
		note += fmt.Sprintf("; %d deadlines moved (by up to %s) by activity the daemon saw after the touch", moved, maxMove.Round(time.Millisecond))
	}
	row := Row{Measurement: Expiry, Name: fmt.Sprintf("expiry lag, idle deadline → %s (%d together)", verb, len(live)),
		Unit: "ms", Berth: st, Note: note}
	if target {
		row.Target = "p99 ≤ 1000 ms"
		row.Pass = harness.Pass(st.P99 <= 1000)
	}
	b.Add(row)
	if createErr != nil {
		b.Add(Row{Measurement: Expiry, Name: fmt.Sprintf("expiry (%s): sandboxes created", action), Unit: "",
			Berth: harness.Aggregate(float64(len(live)), len(live)), Target: fmt.Sprintf("= %d", n), Pass: harness.Pass(false),
			Note: fmt.Sprintf("creates stopped after %d sandboxes: %v", len(live), createErr)})
	}
	return nil
}
