package bench

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/internal/bench/harness"
)

// Runsc is the gVisor measurement: create → first exec on runsc beside
// runc in the same run, and hibernate / wake of a runsc sandbox holding
// 100 MiB and 1 GiB of memory.
const Runsc = "runsc"

// (l) runsc: create → first exec vs the same on runc, interleaved; then
// hibernate and wake (until the agent answers) of a runsc sandbox whose
// process holds each of Options.HibernateSizes in memory.
func (b *bench) measureRunsc(ctx context.Context) error {
	c := b.d.C
	rep, err := c.Doctor(ctx, false)
	if err != nil {
		return err
	}
	if !strings.Contains(rep.Runtime, "runsc") {
		b.Add(Row{Measurement: Runsc, Name: "runsc measurements", Unit: "ms",
			Note: "skipped: the daemon offers no runsc class (scripts/install-runsc.sh; see the daemon log)"})
		return nil
	}
	tti := func(rt string) (time.Duration, error) {
		t0 := time.Now()
		sb, err := c.CreateSandbox(ctx, api.CreateSandboxRequest{Runtime: rt})
		if err != nil {
			return 0, fmt.Errorf("create %s: %w", rt, err)
		}
		defer c.DeleteSandbox(context.WithoutCancel(ctx), sb.ID, true)
		if _, err := harness.ExecTrue(ctx, c, sb.ID); err != nil {
			return 0, err
		}
		return time.Since(t0), nil
	}
	for _, rt := range []string{"runsc", "runc"} { // warm-up
		if _, err := tti(rt); err != nil {
			return err
		}
	}
	n := min(b.opts.Iterations, 20)
	var rs, rc harness.Samples
	for i := range n {
		d, err := tti("runsc")
		if err != nil {
			return err
		}
		rs.Add(d)
		if d, err = tti("runc"); err != nil {
			return err
		}
		rc.Add(d)
		b.Every(i, n, "runsc create → first exec")
	}
	rcs := harness.Summarize(rc.V)
	b.Add(Row{Measurement: Runsc, Name: "create → first exec, runsc (gVisor)", Unit: "ms",
		Berth: harness.Summarize(rs.V), Peer: "the same on runc (berth)", PeerStat: &rcs,
		Note: "SDK CreateSandbox until an exec of true returns; runsc and runc alternate"})

	for _, size := range b.opts.HibernateSizes {
		if err := b.measureHibernate(ctx, size); err != nil {
			return err
		}
	}
	return nil
}

// measureHibernate times hibernate and wake of a runsc sandbox whose
// process holds size bytes of non-zero memory.
func (b *bench) measureHibernate(ctx context.Context, size int64) error {
	c := b.d.C
	sb, err := c.CreateSandbox(ctx, api.CreateSandboxRequest{Runtime: "runsc", Persistent: true,
		Resources: api.Resources{MemoryBytes: size + 512<<20}})
	if err != nil {
		return fmt.Errorf("create: %w", err)
	}
	defer c.DeleteSandbox(context.WithoutCancel(ctx), sb.ID, true)
	mib := size >> 20
	hold := fmt.Sprintf(`nohup python3 -c '
import os, time
b = bytearray(os.urandom(1 << 20)) * %d
open("/tmp/held", "w").write(str(len(b)))
time.sleep(1e9)' >/dev/null 2>&1 &
for i in $(seq 600); do test -s /tmp/held && exit 0; sleep 0.1; done; exit 1`, mib)
	var out strings.Builder
	exit, err := c.Exec(ctx, sb.ID, api.ExecRequest{Cmd: []string{"sh", "-c", hold}}, &out, &out)
	if err != nil || exit.Code != 0 {
		return fmt.Errorf("filling %d MiB of memory: %v %+v %s", mib, err, exit, out.String())
	}
	n := min(b.opts.ForkIterations, 5)
	if size >= 1<<30 {
		n = min(n, 3)
	}
	var hs, ws harness.Samples
	for i := range n {
		t0 := time.Now()
		h, err := c.Hibernate(ctx, sb.ID)
		if err != nil {
			return fmt.Errorf("hibernate: %w", err)
		}
		dh := time.Since(t0)
		if h.State != "stopped" {
			return fmt.Errorf("hibernate: state %s", h.State)
		}
		t1 := time.Now()
		if _, err := c.Wake(ctx, sb.ID); err != nil {
			return fmt.Errorf("wake: %w", err)
		}
		dw := time.Since(t1)
		// Untimed: the process and its memory are back.
		var o strings.Builder
		if exit, err := c.Exec(ctx, sb.ID, api.ExecRequest{Cmd: []string{"sh", "-c", "pgrep -f os.urandom >/dev/null && cat /tmp/held"}}, &o, io.Discard); err != nil || exit.Code != 0 {
			return fmt.Errorf("after wake: %v %+v %q", err, exit, o.String())
		}
		hs.Add(dh)
		ws.Add(dw)
		b.Every(i, n, fmt.Sprintf("hibernate/wake %d MiB", mib))
	}
	note := "runsc checkpoint to the storage pool; the sandbox's cgroup is empty afterwards"
	b.Add(Row{Measurement: Runsc, Name: fmt.Sprintf("hibernate of a runsc sandbox holding %d MiB", mib), Unit: "ms",
		Berth: harness.Summarize(hs.V), Note: note})
	b.Add(Row{Measurement: Runsc, Name: fmt.Sprintf("wake of a runsc sandbox holding %d MiB", mib), Unit: "ms",
		Berth: harness.Summarize(ws.V), Note: "runsc restore until the agent answers a ping"})
	return nil
}
