package e2e

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/internal/overlay"
)

// TestDoctorFindsFrozenReadonlyAndClones plants what interrupted
// operations and a failing disk leave — unfinished and unrecorded clones in
// the pool, a volume frozen with no operation in flight, a volume the
// kernel made read-only, a cgroup frozen under a running record — and
// checks that doctor reports each and --fix repairs it.
func TestDoctorFindsFrozenReadonlyAndClones(t *testing.T) {
	parallel(t)
	d := startDaemon(t)
	ctx := context.Background()
	sb, err := d.c.CreateSandbox(ctx, api.CreateSandboxRequest{Persistent: true})
	if err != nil {
		t.Fatal(err)
	}
	snaps := filepath.Join(d.dataDir, "pool", "snapshots")
	if err := os.MkdirAll(snaps, 0o711); err != nil {
		t.Fatal(err)
	}
	planted := []string{"snapabc.tmp", "fork-" + sb.ID + "-xyz", "unrecordedsnap1"}
	for _, n := range planted {
		if err := os.MkdirAll(filepath.Join(snaps, n), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	// The sandbox's workspace volume, as the host sees it.
	vols, _ := overlay.MountsUnder(filepath.Join(d.dataDir, "pool", "volumes"))
	if len(vols) != 1 {
		t.Fatalf("want one volume mount, got %v", vols)
	}
	vol := vols[0]
	ioctl := func(req uint) {
		t.Helper()
		fd, err := unix.Open(vol, unix.O_RDONLY|unix.O_DIRECTORY, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer unix.Close(fd)
		if _, err := unix.IoctlRetInt(fd, req); err != nil {
			t.Fatalf("ioctl %x: %v", req, err)
		}
	}
	ioctl(0xc0045877) // FIFREEZE
	kinds := func(fix bool) map[string]api.DoctorFinding {
		t.Helper()
		rep, err := d.c.Doctor(ctx, fix)
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]api.DoctorFinding{}
		for _, f := range rep.Findings {
			out[f.Kind+":"+f.ID] = f
		}
		return out
	}
	got := kinds(false)
	for _, n := range planted {
		if _, ok := got["clone:"+n]; !ok {
			t.Errorf("doctor missed planted clone %s: %+v", n, got)
		}
	}
	if _, ok := got["frozen:"+sb.ID]; !ok {
		t.Errorf("doctor missed the frozen volume: %+v", got)
	}
	fixed := kinds(true)
	for k, f := range fixed {
		if !f.Fixed {
			t.Errorf("doctor --fix left %s: %+v", k, f)
		}
	}
	for _, n := range planted {
		if _, err := os.Stat(filepath.Join(snaps, n)); err == nil {
			t.Errorf("planted clone %s still there after --fix", n)
		}
	}
	if out, code, err := runIn(d, sb.ID, "touch /workspace/thawed && echo ok", nil); err != nil || code != 0 || !strings.Contains(out, "ok") {
		t.Fatalf("volume after the fix: %d %v %q", code, err, out)
	}

	// Read-only, as ext4 remounts itself after an I/O error.
	if err := unix.Mount("", vol, "", unix.MS_REMOUNT|unix.MS_RDONLY, ""); err != nil {
		t.Fatal(err)
	}
	if _, ok := kinds(false)["readonly:"+sb.ID]; !ok {
		t.Errorf("doctor missed the read-only volume")
	}
	if f := kinds(true)["readonly:"+sb.ID]; !f.Fixed {
		t.Errorf("doctor --fix did not repair the read-only volume: %+v", f)
	}
	if out, code, err := runIn(d, sb.ID, "touch /workspace/rw-again && echo ok", nil); err != nil || code != 0 || !strings.Contains(out, "ok") {
		t.Fatalf("volume after the read-only fix: %d %v %q", code, err, out)
	}
	if rep, err := d.c.Doctor(ctx, false); err != nil || !rep.Healthy {
		t.Fatalf("doctor after the fixes: %+v %v", rep, err)
	}

	// Read-only again: inspect and the events say so, and a stop/start
	// (a fresh mount) repairs it.
	if err := unix.Mount("", vol, "", unix.MS_REMOUNT|unix.MS_RDONLY, ""); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		got, err := d.c.GetSandbox(ctx, sb.ID)
		if err != nil {
			t.Fatal(err)
		}
		evs, _ := d.c.Events(ctx, sb.ID)
		evSeen := false
		for _, ev := range evs {
			evSeen = evSeen || (ev.Type == "storage" && ev.Outcome == "read_only")
		}
		if got.Storage != nil && got.Storage.ReadOnly && evSeen {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("read-only volume not in inspect (%+v) or events (%+v)", got.Storage, evs)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if _, err := d.c.Stop(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := d.c.Start(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	if out, code, err := runIn(d, sb.ID, "touch /workspace/after-restart && ls /workspace/thawed && echo ok", nil); err != nil || code != 0 || !strings.Contains(out, "ok") {
		t.Fatalf("volume after stop/start: %d %v %q", code, err, out)
	}
	if got, _ := d.c.GetSandbox(ctx, sb.ID); got == nil || got.Storage == nil || got.Storage.ReadOnly {
		t.Fatalf("still read-only after stop/start: %+v", got)
	}
}
