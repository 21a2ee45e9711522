package keyfile

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// secretVolume lays out dir as the kubelet lays out a Secret volume under
// an fsGroup: the files in a hidden ..data directory, group-readable
// (0440), and a symlink per key at the top.
func secretVolume(t *testing.T, keys map[string][]byte) string {
	t.Helper()
	dir := t.TempDir()
	data := filepath.Join(dir, "..2026_12_03_16_00_00.000")
	if err := os.Mkdir(data, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, v := range keys {
		if err := os.WriteFile(filepath.Join(data, name), v, 0o440); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(filepath.Join(data, name), 0o440); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(filepath.Base(data), filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
	for name := range keys {
		if err := os.Symlink(filepath.Join("..data", name), filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// TestInstallFromSecretVolume: the group-readable key Read refuses where
// the kubelet put it is accepted once installed 0600; the volume's
// hidden entries are not copied; a second install (a restarted pod)
// replaces the copies.
func TestInstallFromSecretVolume(t *testing.T) {
	token := bytes.Repeat([]byte("t"), 32)
	vol := secretVolume(t, map[string][]byte{"token.key": token, "audit.key": bytes.Repeat([]byte("a"), 40)})
	if _, err := Read(filepath.Join(vol, "token.key"), "token key"); err == nil || !strings.Contains(err.Error(), "readable by others") {
		t.Fatalf("Read of the volume's 0440 file: %v, want refused", err)
	}
	to := filepath.Join(t.TempDir(), "keys")
	names, err := Install(vol, to)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(names, ",") != "audit.key,token.key" {
		t.Fatalf("installed %v, want audit.key and token.key only", names)
	}
	if fi, err := os.Stat(to); err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("dir: %v %v, want 0700", fi.Mode(), err)
	}
	got, err := Read(filepath.Join(to, "token.key"), "token key")
	if err != nil || !bytes.Equal(got, token) {
		t.Fatalf("Read of the copy: %q %v", got, err)
	}
	if fi, _ := os.Stat(filepath.Join(to, "token.key")); fi.Mode().Perm() != 0o600 {
		t.Errorf("copy mode %v, want 0600", fi.Mode().Perm())
	}
	ents, _ := os.ReadDir(to)
	if len(ents) != 2 {
		t.Errorf("dir holds %d entries, want the two keys", len(ents))
	}
	if _, err := Install(vol, to); err != nil {
		t.Fatalf("second install: %v", err)
	}
}

// TestInstallRefuses: a directory or an oversized file in the volume is
// an error, not silently skipped or truncated.
func TestInstallRefuses(t *testing.T) {
	vol := secretVolume(t, map[string][]byte{"big.key": bytes.Repeat([]byte("x"), MaxInstallBytes+1)})
	if _, err := Install(vol, t.TempDir()); err == nil || !strings.Contains(err.Error(), "at most") {
		t.Errorf("oversized: %v, want refused", err)
	}
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, "sub"), 0o700); err != nil {
		t.Fatal(err)
	}
	if _, err := Install(dir, t.TempDir()); err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Errorf("directory: %v, want refused", err)
	}
	if _, err := Install(filepath.Join(dir, "missing"), t.TempDir()); err == nil {
		t.Error("missing source: want an error")
	}
}
