package e2e

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/client"
	"github.com/berth-sh/berth/internal/overlay"
)

// fillScript writes into / and then /tmp until the filesystem refuses,
// and prints dd's error and the bytes each file got (nothing is written
// to a file meanwhile: the disk is full).
const fillScript = `
dd if=/dev/zero of=/fill bs=1M count=400 2>&1 | grep -o -m1 'No space left on device'
dd if=/dev/zero of=/tmp/fill bs=64k count=6400 2>&1 | grep -o -m1 'No space left on device'
sync
stat -c %s /fill /tmp/fill
`

// fill runs fillScript in sandbox id and returns the bytes written in all.
func fill(t *testing.T, d *daemon, id string) int64 {
	t.Helper()
	out := sh(t, d, id, fillScript)
	lines := strings.Split(out, "\n")
	if len(lines) != 4 || lines[0] != "No space left on device" || lines[1] != "No space left on device" {
		t.Fatalf("filling / and /tmp: want ENOSPC twice, got %q", out)
	}
	var total int64
	for _, l := range lines[2:] {
		n, err := strconv.ParseInt(l, 10, 64)
		if err != nil {
			t.Fatalf("bad size %q in %q", l, out)
		}
		total += n
	}
	return total
}

// poolUsed is how many bytes the storage pool's filesystem holds.
func poolUsed(t *testing.T, d *daemon) int64 {
	t.Helper()
	var st unix.Statfs_t
	if err := unix.Statfs(filepath.Join(d.dataDir, "pool"), &st); err != nil {
		t.Fatal(err)
	}
	return int64(st.Blocks-st.Bfree) * st.Bsize
}

// TestDiskCap: the writable root layer and /tmp share one cap, enforced
// by the filesystem: writes past it fail with ENOSPC inside the sandbox,
// the pool (the host's disk) grows by no more than the cap, files past
// the inode cap are refused, forks and sandboxes made from snapshots are
// capped too, the server default applies when no cap is asked for, and
// bad sizes are a 400 naming the bound.
func TestDiskCap(t *testing.T) {
	parallel(t)
	d := startDaemonWith(t, "--disk-default", "48m")
	ctx := context.Background()
	const mib = 1 << 20

	before := poolUsed(t, d)
	out, errOut, code := d.cli("create", "--disk", "64m")
	if code != 0 {
		t.Fatalf("berth create --disk 64m: exit %d: %s", code, errOut)
	}
	id := strings.TrimSpace(out)
	sb, err := d.c.GetSandbox(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if sb.Resources.DiskBytes != 64*mib || sb.Disk == nil || !sb.Disk.Enforced || sb.Disk.CapInodes != 4096 {
		t.Fatalf("inspect: resources %+v disk %+v; want a 64 MiB, 4096-inode cap in force", sb.Resources, sb.Disk)
	}
	written := fill(t, d, id)
	after := poolUsed(t, d)
	t.Logf("cap 64 MiB: wrote %d bytes (%.1f MiB) into / and /tmp; pool used %d -> %d (+%.1f MiB)",
		written, float64(written)/mib, before, after, float64(after-before)/mib)
	if written > 64*mib || written < 40*mib {
		t.Fatalf("wrote %d bytes under a 64 MiB cap", written)
	}
	if grew := after - before; grew > 64*mib+mib {
		t.Fatalf("the pool grew by %d bytes under a 64 MiB cap", grew)
	}
	// The sandbox's own df shows its cap, not the host's disk.
	if df := sh(t, d, id, "df -k / | tail -1"); !strings.Contains(df, "100%") {
		t.Errorf("df / inside a full sandbox: %q", df)
	}
	if got, _ := d.c.GetSandbox(ctx, id); got.Disk == nil || got.Disk.UsedBytes < written {
		t.Errorf("inspect after the fill: %+v, want %d+ bytes used", got.Disk, written)
	}

	// A fork's child has its own cap, with the parent's data in it.
	sh(t, d, id, "rm /fill /tmp/fill; dd if=/dev/zero of=/keep bs=1M count=8 2>/dev/null; sync")
	fr, err := d.c.Fork(ctx, id, api.ForkRequest{})
	if err != nil {
		t.Fatal(err)
	}
	kid := fr.Children[0].ID
	if sz := sh(t, d, kid, "stat -c %s /keep"); sz != strconv.Itoa(8*mib) {
		t.Fatalf("child's /keep is %s bytes", sz)
	}
	kidWrote := fill(t, d, kid)
	t.Logf("forked child, cap 64 MiB with 8 MiB inherited: wrote %d bytes (%.1f MiB)", kidWrote, float64(kidWrote)/mib)
	if kidWrote+8*mib > 64*mib || kidWrote < 24*mib {
		t.Fatalf("child wrote %d bytes beside 8 MiB under a 64 MiB cap", kidWrote)
	}
	// The child's full disk is not the parent's.
	sh(t, d, id, "dd if=/dev/zero of=/more bs=1M count=8 2>/dev/null")

	// A sandbox made from a snapshot likewise.
	sn, err := d.c.CreateSnapshot(ctx, id, api.CreateSnapshotRequest{})
	if err != nil {
		t.Fatal(err)
	}
	fromSnap, err := d.c.CreateSandbox(ctx, api.CreateSandboxRequest{Snapshot: sn.ID})
	if err != nil {
		t.Fatal(err)
	}
	snapWrote := fill(t, d, fromSnap.ID)
	t.Logf("from snapshot, cap 64 MiB with 16 MiB inherited: wrote %d bytes", snapWrote)
	if snapWrote+16*mib > 64*mib {
		t.Fatalf("sandbox from a snapshot wrote %d bytes beside 16 MiB under a 64 MiB cap", snapWrote)
	}

	// The inode cap: 16 MiB gives 1024 inodes.
	small, err := d.c.CreateSandbox(ctx, api.CreateSandboxRequest{Resources: api.Resources{DiskBytes: 16 * mib}})
	if err != nil {
		t.Fatal(err)
	}
	res := sh(t, d, small.ID, `mkdir /tmp/many; i=0; while true 2>/dev/null >/tmp/many/f$i; do i=$((i+1)); done; echo $i; touch /tmp/one-more 2>&1 | grep -o 'No space left on device'`)
	parts := strings.Fields(res)
	if len(parts) < 2 || parts[len(parts)-1] != "device" {
		t.Fatalf("creating files until refused: %q", res)
	}
	files, _ := strconv.Atoi(parts[0])
	t.Logf("inode cap 1024: created %d files, then ENOSPC", files)
	if files > 1024 || files < 900 {
		t.Fatalf("created %d files under a 1024-inode cap", files)
	}

	// The server default (--disk-default 48m) applies when none is asked.
	def, err := d.c.CreateSandbox(ctx, api.CreateSandboxRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if def.Resources.DiskBytes != 48*mib {
		t.Fatalf("default cap: %+v, want 48 MiB", def.Resources)
	}
	defWrote := fill(t, d, def.ID)
	t.Logf("default cap 48 MiB: wrote %d bytes", defWrote)
	if defWrote > 48*mib || defWrote < 24*mib {
		t.Fatalf("wrote %d bytes under the 48 MiB default", defWrote)
	}

	// Bad sizes: 400 invalid_argument naming the bound.
	for _, c := range []struct {
		bytes int64
		want  string
	}{{1000, "16 MiB"}, {15 * mib, "16 MiB"}, {1 << 50, "the storage pool's size"}} {
		_, err := d.c.CreateSandbox(ctx, api.CreateSandboxRequest{Resources: api.Resources{DiskBytes: c.bytes}})
		var ce *client.Error
		if !errors.As(err, &ce) || ce.Status != 400 || ce.Code != "invalid_argument" || !strings.Contains(ce.Message, c.want) {
			t.Errorf("disk_bytes %d: %v, want a 400 invalid_argument naming %q", c.bytes, err, c.want)
		}
	}
	if _, errOut, code := d.cli("run", "--disk", "1m", "--", "true"); code == 0 || !strings.Contains(errOut, "disk must be") {
		t.Errorf("berth run --disk 1m: exit %d, %q", code, errOut)
	}

	// Delete releases every writable-layer filesystem.
	for _, s := range []string{id, kid, fromSnap.ID, small.ID, def.ID} {
		if _, err := d.c.DeleteSandbox(ctx, s, true); err != nil {
			t.Fatal(err)
		}
	}
	if ents, _ := os.ReadDir(filepath.Join(d.dataDir, "pool", "scratch")); len(ents) > 0 {
		t.Errorf("scratch dirs left after delete: %d", len(ents))
	}
	assertDoctorClean(t, d)
}

// TestDiskCapStopStart: a persistent sandbox's writable layer (not on its
// volume) is discarded at stop and made again, capped, at start; a
// snapshot restored in place is capped too.
func TestDiskCapStopStart(t *testing.T) {
	parallel(t)
	d := startDaemon(t)
	ctx := context.Background()
	sb, err := d.c.CreateSandbox(ctx, api.CreateSandboxRequest{Persistent: true, Resources: api.Resources{DiskBytes: 32 << 20}})
	if err != nil {
		t.Fatal(err)
	}
	sh(t, d, sb.ID, "echo x > /root-file; echo y > /workspace/kept")
	if _, err := d.c.Stop(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	if ms, _ := overlay.MountsUnder(filepath.Join(d.dataDir, "pool", "scratch")); len(ms) > 0 {
		t.Errorf("a stopped sandbox's writable layer is still mounted: %v", ms)
	}
	if _, err := d.c.Start(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	if out := sh(t, d, sb.ID, "cat /workspace/kept; test -e /root-file && echo kept || echo gone"); out != "y\ngone" {
		t.Fatalf("after stop/start: %q", out)
	}
	if w := fill(t, d, sb.ID); w > 32<<20 {
		t.Fatalf("wrote %d bytes under a 32 MiB cap after a restart", w)
	}
	// A snapshot restored in place brings back the layer as it was, capped.
	sh(t, d, sb.ID, "rm /fill /tmp/fill; echo before > /state")
	sn, err := d.c.CreateSnapshot(ctx, sb.ID, api.CreateSnapshotRequest{})
	if err != nil {
		t.Fatal(err)
	}
	sh(t, d, sb.ID, "echo after > /state")
	if _, err := d.c.RestoreSnapshot(ctx, sn.ID); err != nil {
		t.Fatal(err)
	}
	if out := sh(t, d, sb.ID, "cat /state"); out != "before" {
		t.Fatalf("after restore: %q", out)
	}
	if w := fill(t, d, sb.ID); w > 32<<20 {
		t.Fatalf("wrote %d bytes under a 32 MiB cap after a restore", w)
	}
}

// TestDiskCapPersistRoot: with persist_root the root layer, /tmp included,
// is on the workspace volume, whose size caps it.
func TestDiskCapPersistRoot(t *testing.T) {
	parallel(t)
	d := startDaemon(t)
	ctx := context.Background()
	sb, err := d.c.CreateSandbox(ctx, api.CreateSandboxRequest{Persistent: true, PersistRoot: true, VolumeSizeBytes: 32 << 20})
	if err != nil {
		t.Fatal(err)
	}
	if sb.Resources.DiskBytes != 0 || sb.Disk != nil || sb.Storage == nil {
		t.Errorf("persist_root: resources %+v, disk %+v, storage %+v; want the volume as the only cap", sb.Resources, sb.Disk, sb.Storage)
	}
	w := fill(t, d, sb.ID)
	t.Logf("persist_root on a 32 MiB volume: wrote %d bytes into / and /tmp", w)
	if w > 32<<20 {
		t.Fatalf("wrote %d bytes into a 32 MiB volume", w)
	}
	_, err = d.c.CreateSandbox(ctx, api.CreateSandboxRequest{Persistent: true, PersistRoot: true, Resources: api.Resources{DiskBytes: 64 << 20}})
	if !client.IsInvalid(err) || !strings.Contains(err.Error(), "volume_size_bytes") {
		t.Errorf("disk with persist_root: %v, want a 400 pointing at volume_size_bytes", err)
	}
}

// TestDiskCapRunsc: gVisor writes through its gofer into berth's overlay
// upper dir on the host (--overlay2 none), so the cap holds there too.
func TestDiskCapRunsc(t *testing.T) {
	parallel(t)
	d := startRunscDaemon(t)
	ctx := context.Background()
	sb, err := d.c.CreateSandbox(ctx, api.CreateSandboxRequest{Runtime: "runsc", Resources: api.Resources{DiskBytes: 32 << 20}})
	if err != nil {
		t.Fatal(err)
	}
	before := poolUsed(t, d)
	w := fill(t, d, sb.ID)
	after := poolUsed(t, d)
	t.Logf("runsc, cap 32 MiB: wrote %d bytes; pool +%d bytes", w, after-before)
	if w > 32<<20 || w < 16<<20 {
		t.Fatalf("wrote %d bytes under a 32 MiB cap", w)
	}
	if after-before > 33<<20 {
		t.Fatalf("the pool grew by %d bytes under a 32 MiB cap", after-before)
	}
	if _, err := d.c.DeleteSandbox(ctx, sb.ID, true); err != nil {
		t.Fatal(err)
	}
	assertNoLeaks(t, d)
}
