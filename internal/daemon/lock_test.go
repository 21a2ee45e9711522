package daemon

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

func TestParseLocks(t *testing.T) {
	text := "1: POSIX  ADVISORY  WRITE 99 08:01:77 0 EOF\n" +
		"2: FLOCK  ADVISORY  WRITE 1234 00:2a:77 0 EOF\n" +
		"2: -> FLOCK  ADVISORY  WRITE 4321 00:2a:77 0 EOF\n" +
		"3: FLOCK  ADVISORY  WRITE 55 00:2a:78 0 EOF\n"
	if got := parseLocks(text, 0, 0x2a, 77); got != 1234 {
		t.Errorf("holder of 00:2a:77 = %d, want 1234", got)
	}
	if got := parseLocks(text, 8, 1, 77); got != 0 {
		t.Errorf("a POSIX lock taken for a flock: %d", got)
	}
	if got := parseLocks("garbage\n: FLOCK\n", 0, 0, 0); got != 0 {
		t.Errorf("garbage parsed as %d", got)
	}
}

// TestLockDataDir: the lock is exclusive between open file descriptions
// (as between two daemons), the refusal names this process's pid, and
// closing the holder frees it.
func TestLockDataDir(t *testing.T) {
	dir := t.TempDir()
	f, err := lockDataDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	_, err = lockDataDir(dir)
	if !errors.Is(err, ErrDataDirInUse) || !strings.Contains(err.Error(), "pid "+strconv.Itoa(os.Getpid())) {
		t.Fatalf("second lock: %v, want ErrDataDirInUse naming pid %d", err, os.Getpid())
	}
	b, _ := os.ReadFile(filepath.Join(dir, lockName))
	if strings.TrimSpace(string(b)) != strconv.Itoa(os.Getpid()) {
		t.Errorf("lock file holds %q", b)
	}
	f.Close()
	g, err := lockDataDir(dir)
	if err != nil {
		t.Fatalf("lock after the holder closed: %v", err)
	}
	g.Close()
}
