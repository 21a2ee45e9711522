package e2e

import (
	"context"
	"io"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/berth-sh/berth/api"
)

// TestChurnLeavesNothing: 300 create/exec/delete cycles from 4 concurrent
// clients leave zero mounts, cgroups, runtime containers, dirs or
// processes behind.
func TestChurnLeavesNothing(t *testing.T) {
	parallel(t)
	cycles := 300
	if n, err := strconv.Atoi(os.Getenv("BERTH_CHURN_CYCLES")); err == nil {
		cycles = n
	}
	d := startDaemon(t)
	ctx := context.Background()
	var next, failed atomic.Int64
	var wg sync.WaitGroup
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for next.Add(1) <= int64(cycles) {
				sb, err := d.c.CreateSandbox(ctx, api.CreateSandboxRequest{})
				if err != nil {
					t.Errorf("create: %v", err)
					failed.Add(1)
					continue
				}
				exit, err := d.c.Exec(ctx, sb.ID, api.ExecRequest{Cmd: []string{"sh", "-c", "echo x > /tmp/f && cat /tmp/f"}}, io.Discard, io.Discard)
				if err != nil || exit.Code != 0 {
					t.Errorf("exec: %+v %v", exit, err)
					failed.Add(1)
				}
				if _, err := d.c.DeleteSandbox(ctx, sb.ID, true); err != nil {
					t.Errorf("delete: %v", err)
					failed.Add(1)
				}
				if failed.Load() > 5 {
					return
				}
			}
		}()
	}
	wg.Wait()
	if failed.Load() > 0 {
		t.Fatalf("%d cycles failed", failed.Load())
	}
	assertDoctorClean(t, d)
	assertNoLeaks(t, d)
	sbs, _ := d.c.ListSandboxes(ctx, true)
	if len(sbs) != cycles {
		t.Fatalf("want %d tombstones, got %d", cycles, len(sbs))
	}
}
