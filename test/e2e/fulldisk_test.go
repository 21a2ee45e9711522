package e2e

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/client"
)

// TestFullDisk runs a daemon whose data dir is a small filesystem of its
// own (1.5 GiB, with a 4 GiB sparse pool image on it: the pool can outgrow
// what holds it), fills that filesystem to the brim from the host, and
// checks that creates, forks, snapshots and volumes are refused with 507
// naming the limit, that delete still works (space can be freed through
// berth), and that creates work again once there is room.
func TestFullDisk(t *testing.T) {
	parallel(t)
	base, err := os.MkdirTemp("", "berth-e2e-")
	if err != nil {
		t.Fatal(err)
	}
	os.Chmod(base, 0o711)
	img, data := filepath.Join(base, "disk.img"), filepath.Join(base, "data")
	if err := os.Mkdir(data, 0o711); err != nil {
		t.Fatal(err)
	}
	run := func(name string, args ...string) {
		t.Helper()
		if out, err := exec.Command(name, args...).CombinedOutput(); err != nil {
			t.Fatalf("%s %v: %v: %s", name, args, err, out)
		}
	}
	run("truncate", "-s", "1536M", img)
	run("mkfs.ext4", "-q", "-F", img)
	run("mount", "-o", "loop", img, data)
	t.Cleanup(func() {
		// The daemon's own loop devices on files in data are released by
		// the kernel after their unmount returns: give them a moment.
		var err error
		for i := 0; i < 50; i++ {
			if err = syscall.Unmount(data, 0); err != syscall.EBUSY {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		if err != nil {
			t.Errorf("unmounting the test's data dir: %v", err)
			return // never remove through a mount
		}
		os.RemoveAll(base)
	})
	d := &daemon{t: t, dataDir: data, socket: filepath.Join(base, "berth.sock"),
		extra: []string{"--pool-size", "4g", "--disk-default", "64m", "--disk-low-water", "64m"}}
	d.start()
	t.Cleanup(d.cleanup)
	ctx := context.Background()

	p, err := d.c.CreateSandbox(ctx, api.CreateSandboxRequest{Persistent: true, VolumeSizeBytes: 128 << 20})
	if err != nil {
		t.Fatal(err)
	}
	// q writes into its volume while the disk is full.
	q, err := d.c.CreateSandbox(ctx, api.CreateSandboxRequest{Persistent: true, VolumeSizeBytes: 128 << 20})
	if err != nil {
		t.Fatal(err)
	}
	// A volume larger than the pool is refused outright.
	if _, err := d.c.CreateSandbox(ctx, api.CreateSandboxRequest{Persistent: true, VolumeSizeBytes: 16 << 40}); !isCode(err, 400, "") {
		t.Errorf("16 TiB volume on a 4 GiB pool: %v, want 400", err)
	}

	// Fill the filesystem under the data dir to the brim.
	filler := filepath.Join(data, "filler")
	f, err := os.Create(filler)
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 1<<20)
	for {
		if _, err := f.Write(buf); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatalf("filling: %v", err)
			}
			break
		}
	}
	f.Close()

	for what, call := range map[string]func() error{
		"create": func() error { _, err := d.c.CreateSandbox(ctx, api.CreateSandboxRequest{}); return err },
		"fork":   func() error { _, err := d.c.Fork(ctx, p.ID, api.ForkRequest{Count: 1}); return err },
		"snapshot": func() error {
			_, err := d.c.CreateSnapshot(ctx, p.ID, api.CreateSnapshotRequest{})
			return err
		},
		"volume": func() error {
			_, err := d.c.CreateVolume(ctx, api.CreateVolumeRequest{Name: "v1", SizeBytes: 64 << 20})
			return err
		},
	} {
		err := call()
		if !isCode(err, 507, "insufficient_storage") {
			t.Errorf("%s on a full disk: %v, want 507 insufficient_storage", what, err)
			continue
		}
		if !strings.Contains(err.Error(), "free") || !strings.Contains(err.Error(), data) {
			t.Errorf("%s: the 507 does not name the limit: %q", what, err.Error())
		}
	}
	// Delete works with the disk full.
	if _, err := d.c.DeleteSandbox(ctx, p.ID, true); err != nil {
		t.Fatalf("delete on a full disk: %v", err)
	}
	if got, err := d.c.GetSandbox(ctx, p.ID); err != nil || got.State != "deleted" {
		t.Fatalf("after delete: %+v %v", got, err)
	}
	// A volume written while the host disk is full: ext4 stops taking
	// writes (its journal aborts); the writer goes on trying.
	var out strings.Builder
	if _, err := d.c.Exec(ctx, q.ID, api.ExecRequest{Cmd: []string{"sh", "-c",
		"dd if=/dev/zero of=/workspace/big bs=1M count=100 conv=fsync 2>/dev/null; " +
			"for i in 1 2 3 4 5; do touch /workspace/t$i 2>/dev/null && echo wrote; sleep 0.2; done; echo tried"}}, &out, &out); err != nil {
		t.Fatal(err)
	}
	if out.String() != "tried\n" {
		t.Fatalf("the volume took writes on a full host disk: %q", out.String())
	}
	os.Remove(filler)
	// Room again, but the volume stays read-only until it is mounted anew
	// (no remount lifts ext4's emergency read-only state): inspect, the
	// events and doctor say so (on kernels 6.x statfs does not, and it
	// went read-only silently), and a stop/start mounts it read-write.
	waitFor(t, "the read-only volume in inspect and the events", func() bool {
		got, err := d.c.GetSandbox(ctx, q.ID)
		if err != nil || got.Storage == nil || !got.Storage.ReadOnly {
			return false
		}
		evs, _ := d.c.Events(ctx, q.ID)
		for _, ev := range evs {
			if ev.Type == "storage" && ev.Outcome == "read_only" && strings.Contains(ev.Message, "stop and start") {
				return true
			}
		}
		return false
	})
	rep, err := d.c.Doctor(ctx, false)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, f := range rep.Findings {
		found = found || (f.Kind == "readonly" && f.ID == q.ID)
	}
	if !found {
		t.Errorf("doctor does not report the read-only volume: %+v", rep.Findings)
	}
	if _, err := d.c.Stop(ctx, q.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := d.c.Start(ctx, q.ID); err != nil {
		t.Fatal(err)
	}
	if got := execOut(t, d, q.ID, "sh", "-c", "touch /workspace/again && echo ok"); got != "ok\n" {
		t.Fatalf("the volume after stop/start: %q", got)
	}
	if got, err := d.c.GetSandbox(ctx, q.ID); err != nil || got.Storage == nil || got.Storage.ReadOnly {
		t.Fatalf("read-only after stop/start: %+v %v", got, err)
	}
	if _, err := d.c.DeleteSandbox(ctx, q.ID, true); err != nil {
		t.Fatal(err)
	}
	sb, err := d.c.CreateSandbox(ctx, api.CreateSandboxRequest{})
	if err != nil {
		t.Fatalf("create once there is room again: %v", err)
	}
	if _, err := d.c.DeleteSandbox(ctx, sb.ID, true); err != nil {
		t.Fatal(err)
	}
}

// isCode reports whether err is an API error with status (and code, unless
// empty).
func isCode(err error, status int, code string) bool {
	var ce *client.Error
	if !errors.As(err, &ce) {
		return false
	}
	return ce.Status == status && (code == "" || ce.Code == code)
}
