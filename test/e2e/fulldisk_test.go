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
	os.Remove(filler)
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
