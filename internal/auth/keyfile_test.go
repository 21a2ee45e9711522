package auth_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/berth-sh/berth/internal/auth"
)

// TestOpenLeasesFile: replicas given one token key accept each other's
// lease tokens, and a daemon with its own key refuses them; the shared
// file is never made and must be its owner's alone.
func TestOpenLeasesFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "token.key")
	if _, err := auth.OpenLeasesFile(path); err == nil {
		t.Fatal("OpenLeasesFile accepted a missing file")
	}
	if _, err := os.Stat(path); err == nil {
		t.Fatal("OpenLeasesFile made the key file")
	}
	if err := os.WriteFile(path, []byte(strings.Repeat("k", 32)), 0o640); err != nil {
		t.Fatal(err)
	}
	if _, err := auth.OpenLeasesFile(path); err == nil || !strings.Contains(err.Error(), "readable by others") {
		t.Fatalf("group-readable key: err = %v", err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		t.Fatal(err)
	}
	a, err := auth.OpenLeasesFile(path)
	if err != nil {
		t.Fatal(err)
	}
	b, err := auth.OpenLeasesFile(path)
	if err != nil {
		t.Fatal(err)
	}
	tok := a.Token("sbx1")
	if sb, _, ok := b.Check(tok); !ok || sb != "sbx1" {
		t.Fatalf("replica b refused replica a's token: %q %v", sb, ok)
	}
	own, err := auth.OpenLeases(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if _, _, ok := own.Check(tok); ok {
		t.Fatal("a daemon with its own key accepted another key's token")
	}
}
