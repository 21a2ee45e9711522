package agentd

import (
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// TestInstallSeccompRefusesBadPrograms: a descriptor that is not open, an
// empty or oversized file and bytes that are not a program are errors
// (the agent then exits instead of serving unfiltered).
func TestInstallSeccompRefusesBadPrograms(t *testing.T) {
	if err := installSeccomp(987); err == nil {
		t.Error("closed descriptor accepted")
	}
	for name, content := range map[string][]byte{
		"empty":     nil,
		"torn":      make([]byte, 12),
		"not bpf":   {0xff, 0xff, 0, 0, 0, 0, 0, 0},
		"too large": make([]byte, 8*4096+8),
	} {
		p := filepath.Join(t.TempDir(), "prog")
		if err := os.WriteFile(p, content, 0o600); err != nil {
			t.Fatal(err)
		}
		f, err := os.Open(p)
		if err != nil {
			t.Fatal(err)
		}
		// installSeccomp closes what it is given: hand it a duplicate.
		fd, err := unix.Dup(int(f.Fd()))
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		if err := installSeccomp(fd); err == nil {
			t.Errorf("%s: installed", name)
		}
	}
}
