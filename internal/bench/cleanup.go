package bench

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"time"

	"github.com/berth-sh/berth/internal/audit"
	"github.com/berth-sh/berth/internal/bench/netbench"
	"github.com/berth-sh/berth/internal/bench/peer"
	"github.com/berth-sh/berth/internal/node/local"
	"github.com/berth-sh/berth/internal/overlay"
	"github.com/berth-sh/berth/internal/testenv"
)

// cleanup deletes every sandbox, checks doctor, stops the daemon, removes
// the peer's containers and mount, then has testenv check and remove what
// is left (mounts, loop devices, cgroups of both parents, processes,
// files) and removes the temp dir.
func (b *bench) cleanup(ctx context.Context) {
	cl := &b.rep.Cleanup
	fail := func(format string, args ...any) { cl.Errors = append(cl.Errors, fmt.Sprintf(format, args...)) }
	if b.tmp == "" {
		return
	}
	b.Logf("cleaning up")
	// The network daemon first: its sandboxes' mounts are under b.tmp.
	if b.net != nil {
		b.net.Cleanup(ctx, cl)
	}
	if b.d != nil {
		c := b.d.C
		// Warm pools (the automatic one of the default template among
		// them) hold sandboxes no list shows: sized to none first.
		if err := testenv.DrainPools(ctx, c, 2*time.Minute); err != nil {
			fail("%v", err)
		}
		if sbs, err := c.ListSandboxes(ctx, false); err != nil {
			fail("listing sandboxes: %v", err)
		} else {
			_, _, err := parallel(ctx, len(sbs), b.opts.Concurrency, nil, func(ctx context.Context, i int) error {
				_, err := c.DeleteSandbox(ctx, sbs[i].ID, true)
				return err
			})
			if err != nil {
				fail("deleting sandboxes: %v", err)
			}
			if err := b.waitNoSandboxes(ctx); err != nil {
				fail("%v", err)
			}
		}
		if rep, err := c.Doctor(ctx, false); err != nil {
			fail("doctor: %v", err)
		} else {
			cl.DoctorHealthy = rep.Healthy
			for _, f := range rep.Findings {
				cl.DoctorFindings = append(cl.DoctorFindings, fmt.Sprintf("%s %s: %s", f.Kind, f.ID, f.Detail))
			}
		}
		if err := b.d.Stop(); err != nil {
			fail("stopping the daemon: %v", err)
		}
	}
	cl.Leftover = append(cl.Leftover, b.stopRegistry()...)
	if b.peer != nil {
		ids, err := b.peer.List(ctx)
		if err != nil {
			fail("runc list (peer): %v", err)
		}
		for _, id := range ids {
			cl.Leftover = append(cl.Leftover, "peer container "+id)
			if _, err := b.peer.Remove(ctx, id); err != nil {
				fail("%v", err)
			}
		}
		if err := overlay.Unmount(b.peer.Rootfs()); err != nil {
			fail("%v", err)
		}
	}
	// Then the host, read directly (testenv's one definition of a leak):
	// what of the daemon and the peer is left is recorded and removed.
	instance := local.InstanceName(b.tmp)
	scope := testenv.Scope{DataDir: b.tmp, Cgroups: []string{"/" + peer.Parent(instance)}}
	if b.d != nil {
		scope.PGID = b.d.PID()
	}
	leaks, err := testenv.Clean(scope)
	for _, l := range leaks {
		cl.Leftover = append(cl.Leftover, l.String())
	}
	if err != nil {
		fail("%v", err)
	}
	if err := testenv.RemoveDir(b.tmp); err != nil {
		fail("%v", err)
	}
	// The daemon's audit anchor lies beside its data dir (b.tmp itself),
	// outside the dir just removed.
	if err := os.Remove(audit.DefaultAnchorPath(b.tmp)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		fail("%v", err)
	}
}

// LeakScopes are the parts of the host a bench working in workDir
// (Report.WorkDir) uses: its daemon with the raw runc peer's cgroup
// parent, and the network daemon with its namespaces. After a run,
// testenv.Check of each must find nothing.
func LeakScopes(workDir string) []testenv.Scope {
	return []testenv.Scope{
		{DataDir: workDir, Cgroups: []string{"/" + peer.Parent(local.InstanceName(workDir))}},
		{DataDir: netbench.DataDir(workDir), Namespaces: NetNamespaces(workDir)},
	}
}
