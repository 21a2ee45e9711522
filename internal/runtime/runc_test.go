package runtime

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/berth-sh/berth/internal/sandbox"
	"github.com/berth-sh/berth/internal/seccomp"
)

func startSpec(t *testing.T) *Spec {
	dir := t.TempDir()
	return &Spec{
		ID: "seccomp-test", Bundle: filepath.Join(dir, "bundle"), Rootfs: filepath.Join(dir, "rootfs"),
		Args: []string{"/bin/true"}, Resources: sandbox.DefaultResources,
		IDMap: IDMap{HostUID: 100000000, HostGID: 100000000, Size: 65536},
	}
}

// TestInitSeccompProgram: the program handed to init is the spec's
// profile compiled, sealed against change and shared by every start.
func TestInitSeccompProgram(t *testing.T) {
	rc := &Runc{}
	sp, err := BuildSpec(startSpec(t))
	if err != nil {
		t.Fatal(err)
	}
	f, err := rc.initSeccomp(sp.Linux.Seccomp)
	if err != nil {
		t.Fatal(err)
	}
	got, err := seccomp.ReadFile(f)
	if err != nil {
		t.Fatal(err)
	}
	want, _ := seccomp.Compile(sp.Linux.Seccomp)
	if got.Len() != want.Len() {
		t.Fatalf("program of %d instructions, want %d", got.Len(), want.Len())
	}
	if _, err := f.WriteAt([]byte{0}, 0); err == nil {
		t.Fatal("the program's memfd accepted a write")
	}
	// Reopening it writable through /proc must fail too (F_SEAL_WRITE).
	if w, err := os.OpenFile("/proc/self/fd/"+itoa(int(f.Fd())), os.O_WRONLY, 0); err == nil {
		_, werr := w.Write([]byte{0})
		w.Close()
		if werr == nil {
			t.Fatal("the program's memfd was writable through /proc")
		}
	}
	sp2, _ := BuildSpec(startSpec(t))
	if g, _ := rc.initSeccomp(sp2.Linux.Seccomp); g != f {
		t.Fatal("the same profile was compiled twice")
	}
}

// TestInitSeccompRefusals: a descriptor number that does not follow the
// extra files, and runtimes whose init cannot take a descriptor, fail
// before anything starts.
func TestInitSeccompRefusals(t *testing.T) {
	rc, err := NewRunc("runc", t.TempDir())
	if err != nil {
		t.Fatalf("runc: %v (scripts/install-deps.sh installs it)", err)
	}
	s := startSpec(t)
	s.InitSeccompFD = 5
	if _, err := rc.Start(context.Background(), s); err == nil || !strings.Contains(err.Error(), "does not follow") {
		t.Fatalf("fd 5 with no extra files: %v", err)
	}
	vm := MicroVM{&Runc{name: "kata", iso: &Isolation{Runtime: "kata"}}}
	s.InitSeccompFD = 3
	if _, err := vm.Start(context.Background(), s); err == nil || !strings.Contains(err.Error(), "cannot be handed") {
		t.Fatalf("microVM: %v", err)
	}
	if _, err := (&Runsc{}).Start(context.Background(), s); err == nil || !strings.Contains(err.Error(), "cannot be handed") {
		t.Fatalf("runsc: %v", err)
	}
}

func itoa(i int) string { return strconv.Itoa(i) }
