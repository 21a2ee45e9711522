package daemon

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/berth-sh/berth/internal/failpoint"
	"github.com/berth-sh/berth/internal/node/local"
	"github.com/berth-sh/berth/internal/runtime"
)

// runscDisabled as --runsc turns the gVisor class off.
const runscDisabled = "none"

// probeBusybox is the static program the runsc probe runs (busybox-static).
const probeBusybox = "/bin/busybox"

// openRunsc returns the gVisor runtime class if runsc is installed, is a
// static build and can start a sandbox on this host; otherwise nil and
// the reason, which the caller logs: the daemon then runs without it and
// a create asking for runsc is refused with the classes available. retry
// says the binary is there and its probe failed: a cause that may pass
// (the data dir full for a moment, memory short, a host too busy for the
// probe's deadline), so the daemon tries again (retryRunsc).
func openRunsc(ctx context.Context, cfg *Config, log *slog.Logger) (rs *runtime.Runsc, why string, retry bool) {
	if cfg.RunscPath == runscDisabled {
		return nil, "disabled (--runsc none)", false
	}
	r, err := runtime.NewRunsc(cfg.RunscPath, filepath.Join(cfg.DataDir, "runsc"))
	if err != nil {
		return nil, err.Error(), false
	}
	if err := failpoint.Inject("runsc.probe"); err != nil {
		_ = r.Close()
		return nil, err.Error(), true
	}
	scratch, err := os.MkdirTemp(cfg.DataDir, "runsc-probe-")
	if err != nil {
		_ = r.Close()
		return nil, err.Error(), true
	}
	defer os.RemoveAll(scratch)
	pctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	start := time.Now()
	// busybox-static when present; otherwise berth itself (the agent
	// binary is static: it runs inside every sandbox).
	if _, serr := os.Stat(probeBusybox); serr == nil {
		err = r.Probe(pctx, probeBusybox, scratch)
	} else {
		err = r.ProbeWith(pctx, cfg.AgentPath, []string{"--version"}, "berth", scratch)
	}
	// The probe's sandbox leaves runsc's null-netns mount; a daemon that
	// then runs without the class must not leave it behind.
	if err != nil {
		_ = r.Close()
		return nil, fmt.Sprintf("runsc %s cannot start a sandbox here: %v", r.Binary(), err), true
	}
	log.Info("runtime class runsc available", "binary", r.Binary(), "platform", r.Platform(),
		"probe", time.Since(start).Round(time.Millisecond))
	return r, "", false
}

// runscRetryFirst and runscRetryMax bound the waits between probes of a
// runsc that failed its probe at start: doubling from the first, so a
// host that lacks what gVisor needs pays one probe per 10 minutes.
const (
	runscRetryFirst = 15 * time.Second
	runscRetryMax   = 10 * time.Minute
)

// retryRunsc probes runsc again until it works or ctx ends, then adds
// its class to backend lb. Without it, a daemon started while the data
// dir was full for a moment ran its whole life without gVisor, and its
// gVisor sandboxes waited (reconcile: classAbsent) until a restart.
func (d *Daemon) retryRunsc(ctx context.Context, cfg *Config, lb *local.Backend) {
	log := cfg.Logger
	wait := runscRetryFirst
	for {
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		rs, why, again := openRunsc(ctx, cfg, log)
		if rs != nil && ctx.Err() != nil {
			_ = rs.Close() // the daemon is closing
			return
		}
		if rs != nil {
			d.runscMu.Lock()
			d.runsc = rs
			d.runscMu.Unlock()
			lb.AddRuntime(rs)
			log.Info("runtime class runsc available after a failed probe at start")
			return
		}
		if !again || ctx.Err() != nil {
			log.Info("runtime class runsc unavailable; no more tries", "reason", why)
			return
		}
		log.Debug("runtime class runsc still unavailable", "reason", why, "next_try", wait)
		wait = min(2*wait, runscRetryMax)
	}
}
