package bench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"golang.org/x/sys/unix"

	"github.com/berth-sh/berth/internal/cgroups"
	"github.com/berth-sh/berth/internal/node/local"
	"github.com/berth-sh/berth/internal/overlay"
)

// cleanup deletes every sandbox, checks doctor, stops the daemon, removes
// the peer's containers and mount, then verifies and removes what is left:
// mounts under the temp dir, the two cgroup parents, the temp dir.
func (b *bench) cleanup(ctx context.Context) {
	cl := &b.rep.Cleanup
	fail := func(format string, args ...any) { cl.Errors = append(cl.Errors, fmt.Sprintf(format, args...)) }
	if b.tmp == "" {
		return
	}
	b.logf("cleaning up")
	// The network daemon first: its sandboxes' mounts are under b.tmp.
	b.cleanupNet(ctx)
	if b.d != nil {
		c := b.d.c
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
		if err := b.d.stop(); err != nil {
			fail("stopping the daemon: %v", err)
		}
	}
	if b.peer != nil {
		ids, err := b.peer.list(ctx)
		if err != nil {
			fail("runc list (peer): %v", err)
		}
		for _, id := range ids {
			cl.Leftover = append(cl.Leftover, "peer container "+id)
			if _, err := b.peer.remove(ctx, id); err != nil {
				fail("%v", err)
			}
		}
		if err := overlay.Unmount(b.peer.rootfs); err != nil {
			fail("%v", err)
		}
	}
	// Nothing may be mounted under the temp dir any more.
	mounts, err := overlay.MountsUnder(b.tmp)
	if err != nil {
		fail("reading mounts: %v", err)
	}
	slices.Reverse(mounts)
	for _, mp := range mounts {
		cl.Leftover = append(cl.Leftover, "mount "+mp)
		if err := overlay.Unmount(mp); err != nil {
			fail("%v", err)
		}
	}
	// The cgroup parents: the daemon's and the peer's. Their children
	// should be gone; the parents themselves are removed here.
	instance := local.InstanceName(b.tmp)
	parents := []string{"/" + instance, "/" + peerParent(instance)}
	if nd := netDataDir(b.tmp); exists(nd) {
		parents = append(parents, "/"+local.InstanceName(nd))
	}
	for _, parent := range parents {
		for _, child := range cgroups.Children(parent) {
			cl.Leftover = append(cl.Leftover, "cgroup "+parent+"/"+child)
			if err := cgroups.Destroy(parent + "/" + child); err != nil {
				fail("%v", err)
			}
		}
		if err := cgroups.Destroy(parent); err != nil {
			fail("%v", err)
		}
		// cgroups covers the v1 controllers (or the v2 root); runc also
		// makes the parent in a hybrid host's unified hierarchy.
		for _, dir := range CgroupDirs(parent) {
			ents, _ := os.ReadDir(dir)
			for _, e := range ents {
				if e.IsDir() {
					cl.Leftover = append(cl.Leftover, "cgroup "+filepath.Join(dir, e.Name()))
				}
			}
			if err := removeCgroupTree(dir); err != nil {
				fail("%v", err)
			}
		}
		if left := CgroupDirs(parent); len(left) > 0 {
			fail("cgroups could not be removed: %v", left)
		}
	}
	if left, _ := overlay.MountsUnder(b.tmp); len(left) > 0 {
		fail("not removing %s: mounts remain: %v", b.tmp, left)
		return
	}
	if err := os.RemoveAll(b.tmp); err != nil {
		fail("removing %s: %v", b.tmp, err)
	}
}

// CgroupDirs returns the directories of cgroup parent (e.g. "/berth-1a2b")
// in every mounted hierarchy, v1 controllers and unified alike.
func CgroupDirs(parent string) []string {
	var out []string
	for _, base := range []string{cgroups.Root, cgroups.Root + "/*"} {
		ms, _ := filepath.Glob(filepath.Join(base, parent))
		for _, m := range ms {
			if st, err := os.Lstat(m); err == nil && st.IsDir() {
				out = append(out, m)
			}
		}
	}
	return out
}

// removeCgroupTree removes an empty cgroup directory tree, deepest first.
func removeCgroupTree(dir string) error {
	ents, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	} else if err != nil {
		return err
	}
	for _, e := range ents {
		if e.IsDir() {
			if err := removeCgroupTree(filepath.Join(dir, e.Name())); err != nil {
				return err
			}
		}
	}
	if err := unix.Rmdir(dir); err != nil && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("rmdir %s: %w", dir, err)
	}
	return nil
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}
