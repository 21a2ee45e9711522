package hostids

import (
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/berth-sh/berth/internal/runtime"
)

// TestProbeRetriedAfterFullDisk: a probe on a full filesystem (ENOSPC)
// leaves the shared mode on but is not final; once there is room, a retry
// turns per-sandbox ranges on. A probe that fails for good is not retried.
func TestProbeRetriedAfterFullDisk(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("the host id probe (idmapped mounts) needs root")
	}
	dir := t.TempDir()
	if err := unix.Mount("hostids-test", dir, "tmpfs", 0, "size=1m,nr_inodes=64"); err != nil {
		t.Fatal(err)
	}
	defer unix.Unmount(dir, unix.MNT_DETACH)
	// Fill every inode: the probe's MkdirTemp then fails with ENOSPC.
	var fill []string
	for i := 0; ; i++ {
		p := filepath.Join(dir, "f"+string(rune('a'+i%26))+string(rune('a'+i/26)))
		if err := os.WriteFile(p, nil, 0o600); err != nil {
			break
		}
		fill = append(fill, p)
	}
	stored := runtime.IDMap{HostUID: 100000000, HostGID: 100000000, Size: SlotSize}
	log := slog.New(slog.DiscardHandler)
	m := Probe(stored, []string{dir}, log)
	if m.perSandbox.Load() {
		t.Fatal("the probe succeeded on a full filesystem: the test proves nothing")
	}
	if !m.transient {
		t.Fatal("a probe that failed on a full disk is not marked to be tried again")
	}
	if m.Retry() {
		t.Fatal("retry succeeded while the disk is still full")
	}
	for _, p := range fill {
		os.Remove(p)
	}
	if !m.Retry() {
		t.Fatal("retry after the disk has room again did not turn per-sandbox ranges on")
	}
	if ids, ok := m.Range(3); !ok || ids.Slot != 3 {
		t.Fatalf("range after the retry: %+v %v", ids, ok)
	}
	// A host that lacks the feature is not retried.
	bad := runtime.IDMap{HostUID: 100000000, HostGID: 100000001, Size: SlotSize}
	if m2 := Probe(bad, []string{dir}, log); m2.transient {
		t.Fatal("a permanent failure was marked to be retried")
	}
}
