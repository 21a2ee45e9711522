package e2e

import (
	"context"
	"io"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/berth-sh/berth/api"
)

// TestSoak runs a mixed workload for a long time (make soak; default 10
// minutes, BERTH_SOAK_DURATION to change) and then proves nothing leaked:
// ephemeral churn, persistent sandboxes paused, stopped, started and
// forked, and a daemon restart halfway.
func TestSoak(t *testing.T) {
	if os.Getenv("BERTH_SOAK") == "" {
		t.Skip("opt-in, not part of make test or make e2e: the long soak (10 minutes by default) runs with make soak (BERTH_SOAK=1)")
	}
	dur := 10 * time.Minute
	if d, err := time.ParseDuration(os.Getenv("BERTH_SOAK_DURATION")); err == nil {
		dur = d
	}
	d := startDaemon(t)
	ctx := context.Background()
	var cycles, failures atomic.Int64
	deadline := time.Now().Add(dur)
	restartAt := time.Now().Add(dur / 2)
	var restarting sync.RWMutex
	var wg sync.WaitGroup
	worker := func(persistent bool) {
		defer wg.Done()
		for time.Now().Before(deadline) && failures.Load() < 10 {
			restarting.RLock()
			err := func() error {
				sb, err := d.c.CreateSandbox(ctx, api.CreateSandboxRequest{Persistent: persistent})
				if err != nil {
					return err
				}
				defer d.c.DeleteSandbox(ctx, sb.ID, true)
				if _, err := d.c.Exec(ctx, sb.ID, api.ExecRequest{Cmd: []string{"sh", "-c", "echo x > /workspace/f 2>/dev/null || echo x > /tmp/f"}}, io.Discard, io.Discard); err != nil {
					return err
				}
				if persistent {
					if _, err := d.c.Pause(ctx, sb.ID); err != nil {
						return err
					}
					if _, err := d.c.Resume(ctx, sb.ID); err != nil {
						return err
					}
					if _, err := d.c.Stop(ctx, sb.ID); err != nil {
						return err
					}
					if _, err := d.c.Start(ctx, sb.ID); err != nil {
						return err
					}
					kids, err := d.c.Fork(ctx, sb.ID, api.ForkRequest{Count: 2})
					if err != nil {
						return err
					}
					for _, k := range kids.Children {
						d.c.DeleteSandbox(ctx, k.ID, true)
					}
				}
				return nil
			}()
			restarting.RUnlock()
			if err != nil {
				failures.Add(1)
				t.Errorf("soak cycle: %v", err)
			}
			cycles.Add(1)
		}
	}
	for i := 0; i < 3; i++ {
		wg.Add(1)
		go worker(i == 0)
	}
	for time.Now().Before(restartAt) {
		time.Sleep(time.Second)
	}
	restarting.Lock()
	d.stop()
	d.startWithEnv()
	restarting.Unlock()
	wg.Wait()
	t.Logf("%d cycles in %s, %d failures", cycles.Load(), dur, failures.Load())
	assertDoctorClean(t, d)
	assertNoLeaks(t, d)
}
