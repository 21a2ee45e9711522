package main

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// TestCPUProfileFile: the daemon's profile goes to the file named, and to
// FILE.<pid> when that exists (a second daemon of one bench), never over it.
func TestCPUProfileFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "cpu.prof")
	end, err := startCPUProfile(path)
	if err != nil {
		t.Fatal(err)
	}
	end()
	first, err := os.Stat(path)
	if err != nil || first.Size() == 0 {
		t.Fatalf("no profile written: %v", err)
	}
	end, err = startCPUProfile(path)
	if err != nil {
		t.Fatal(err)
	}
	end()
	if st, err := os.Stat(fmt.Sprintf("%s.%d", path, os.Getpid())); err != nil || st.Size() == 0 {
		t.Fatalf("the second profile is not beside the first: %v", err)
	}
	if again, _ := os.Stat(path); again.ModTime() != first.ModTime() || again.Size() != first.Size() {
		t.Fatal("the first profile was written over")
	}
}
