package agentd

import (
	"bytes"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// TestExtractTarOwners: an extraction gives what it creates to its
// owner; with preserve each entry keeps its header's owner, and the
// directories made on the way (no entry of their own) go to the owner.
func TestExtractTarOwners(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("TestExtractTarOwners needs root (it chowns): run it as root")
	}
	owned := func(name string, uid, gid int) tarEnt {
		e := reg(name, "x")
		e.h.Uid, e.h.Gid, e.h.Mode = uid, gid, 0o644
		return e
	}
	dir := dirEnt("d/")
	dir.h.Uid, dir.h.Gid = 4321, 4322
	data := tarOf(t, dir, owned("d/f", 4321, 4322), owned("p/q/g", 7, 8))
	for _, tc := range []struct {
		name     string
		preserve bool
		want     map[string][2]uint32
	}{
		{"owner", false, map[string][2]uint32{"d": {1000, 1001}, "d/f": {1000, 1001}, "p": {1000, 1001}, "p/q/g": {1000, 1001}}},
		{"preserve", true, map[string][2]uint32{"d": {4321, 4322}, "d/f": {4321, 4322}, "p": {1000, 1001}, "p/q": {1000, 1001}, "p/q/g": {7, 8}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dest := t.TempDir()
			dfd, err := unix.Open(dest, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer unix.Close(dfd)
			uid, gid := 1000, 1001
			if err := extractTar(dfd, bytes.NewReader(data), extractOpts{uid: &uid, gid: &gid, preserve: tc.preserve,
				maxBytes: 1 << 20, maxEntries: 16}); err != nil {
				t.Fatal(err)
			}
			for p, want := range tc.want {
				fi, err := os.Lstat(filepath.Join(dest, p))
				if err != nil {
					t.Fatal(err)
				}
				st := fi.Sys().(*syscall.Stat_t)
				if st.Uid != want[0] || st.Gid != want[1] {
					t.Errorf("%s owned by %d:%d, want %d:%d", p, st.Uid, st.Gid, want[0], want[1])
				}
			}
		})
	}
}
