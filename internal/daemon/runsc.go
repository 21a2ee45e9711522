package daemon

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/berth-sh/berth/internal/runtime"
)

// runscDisabled as --runsc turns the gVisor class off.
const runscDisabled = "none"

// probeBusybox is the static program the runsc probe runs (busybox-static).
const probeBusybox = "/bin/busybox"

// openRunsc returns the gVisor runtime class if runsc is installed, is a
// static build and can start a sandbox on this host; otherwise nil and
// the reason, which the caller logs: the daemon then runs without it and
// a create asking for runsc is refused with the classes available.
func openRunsc(ctx context.Context, cfg *Config, log *slog.Logger) (*runtime.Runsc, string) {
	if cfg.RunscPath == runscDisabled {
		return nil, "disabled (--runsc none)"
	}
	r, err := runtime.NewRunsc(cfg.RunscPath, filepath.Join(cfg.DataDir, "runsc"))
	if err != nil {
		return nil, err.Error()
	}
	scratch, err := os.MkdirTemp(cfg.DataDir, "runsc-probe-")
	if err != nil {
		return nil, err.Error()
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
		return nil, fmt.Sprintf("runsc %s cannot start a sandbox here: %v", r.Binary(), err)
	}
	log.Info("runtime class runsc available", "binary", r.Binary(), "platform", r.Platform(),
		"probe", time.Since(start).Round(time.Millisecond))
	return r, ""
}
