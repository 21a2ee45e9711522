package server

import (
	"bytes"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// maxPackageLines bounds the non-test Go of each package of the API
// (internal/server and the packages under it): past it, a resource wants
// a package of its own (issue #31).
const maxPackageLines = 2500

// TestPackageLayout: every package under internal/server stays within
// maxPackageLines of non-test Go and says what it is in a package doc
// comment.
func TestPackageLayout(t *testing.T) {
	lines := map[string]int{}
	docs := map[string]bool{}
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		dir := filepath.Dir(path)
		lines[dir] += bytes.Count(b, []byte("\n"))
		if bytes.HasPrefix(b, []byte("// Package ")) || bytes.Contains(b, []byte("\n// Package ")) {
			docs[dir] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(lines) < 2 {
		t.Fatalf("found the packages %v: the walk did not see the tree", lines)
	}
	for dir, n := range lines {
		pkg := filepath.Join("internal/server", dir)
		if n > maxPackageLines {
			t.Errorf("%s holds %d lines of non-test Go (at most %d): split it by resource", pkg, n, maxPackageLines)
		}
		if !docs[dir] {
			t.Errorf("%s has no package doc comment", pkg)
		}
	}
}
