package e2e

import (
	"context"
	"testing"

	"github.com/berth-sh/berth/api"
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
	simulateReboot(t, d, keep.ID, gone.ID)
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
