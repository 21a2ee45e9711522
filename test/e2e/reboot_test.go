package e2e

import (
	"context"
	"slices"
	"testing"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/internal/cgroups"
	"github.com/berth-sh/berth/internal/node/local"
	"github.com/berth-sh/berth/internal/overlay"
)

// TestPersistentSurvivesHostReboot simulates a reboot while the daemon is
// down: every process of the sandbox killed, every mount (root, volume,
// storage pool) gone, cgroups gone, runc's state left stale. On start the
// daemon brings the persistent sandbox back with its files, and removes
// the ephemeral one.
func TestPersistentSurvivesHostReboot(t *testing.T) {
	parallel(t)
	d := startDaemon(t)
	ctx := context.Background()
	keep, err := d.c.CreateSandbox(ctx, api.CreateSandboxRequest{Name: "survivor", Persistent: true, PersistRoot: true})
	if err != nil {
		t.Fatal(err)
	}
	gone, err := d.c.CreateSandbox(ctx, api.CreateSandboxRequest{})
	if err != nil {
		t.Fatal(err)
	}
	execOut(t, d, keep.ID, "sh", "-c", "head -c 1000000 /dev/urandom > /workspace/w; mkdir -p /opt && head -c 1000 /dev/urandom > /opt/r; sha256sum /workspace/w /opt/r > /root/sums; sync")
	d.stop()
	// The "reboot".
	parent := "/" + local.InstanceName(d.dataDir)
	for _, id := range []string{keep.ID, gone.ID} {
		if err := cgroups.Destroy(parent + "/" + id); err != nil {
			t.Fatal(err)
		}
	}
	ms, _ := overlay.MountsUnder(d.dataDir)
	slices.Reverse(ms)
	for _, m := range ms {
		if err := overlay.Unmount(m); err != nil {
			t.Fatal(err)
		}
	}
	if left, _ := overlay.MountsUnder(d.dataDir); len(left) > 0 {
		t.Fatalf("mounts left after the simulated reboot: %v", left)
	}
	d.startWithEnv()
	got, err := d.c.GetSandbox(ctx, keep.ID)
	if err != nil || got.State != "running" {
		t.Fatalf("persistent sandbox after reboot: %+v %v", got, err)
	}
	if out := execOut(t, d, keep.ID, "sha256sum", "-c", "--quiet", "/root/sums"); out != "" {
		t.Fatalf("files changed across the reboot: %q", out)
	}
	if eph, _ := d.c.GetSandbox(ctx, gone.ID); eph.State != "deleted" {
		t.Fatalf("ephemeral sandbox after reboot: %s", eph.State)
	}
	assertDoctorClean(t, d)
}
