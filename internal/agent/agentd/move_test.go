package agentd

import (
	"archive/tar"
	"bytes"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/berth-sh/berth/internal/errdefs"
)

func readRoot(t *testing.T, root, rel string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, rel))
	if err != nil {
		t.Fatalf("read %s: %v", rel, err)
	}
	return string(b)
}

func gone(t *testing.T, root, rel string) {
	t.Helper()
	if _, err := os.Lstat(filepath.Join(root, rel)); !os.IsNotExist(err) {
		t.Fatalf("%s still exists (%v)", rel, err)
	}
}

// TestMove pins the rename(2) rules of move: within and across
// directories, onto existing files and directories, with and without
// no_replace, and the refusals.
func TestMove(t *testing.T) {
	a := startAgent(t)
	c, ctx := a.client, testCtx(t)
	writeFile(t, a.root, "d1/f", "one")
	writeFile(t, a.root, "d1/g", "gee")
	writeFile(t, a.root, "d2/x", "ex")
	writeFile(t, a.root, "full/inner", "in")
	if err := os.Mkdir(filepath.Join(a.root, "empty"), 0o755); err != nil {
		t.Fatal(err)
	}

	// Rename within a directory.
	if err := c.Move(ctx, "/d1/f", "/d1/f2", false); err != nil {
		t.Fatal(err)
	}
	gone(t, a.root, "d1/f")
	if got := readRoot(t, a.root, "d1/f2"); got != "one" {
		t.Fatalf("d1/f2 = %q", got)
	}
	// Across directories.
	if err := c.Move(ctx, "/d1/f2", "/d2/f", false); err != nil {
		t.Fatal(err)
	}
	if got := readRoot(t, a.root, "d2/f"); got != "one" {
		t.Fatalf("d2/f = %q", got)
	}
	// A file onto an existing file replaces it; with no_replace it is a
	// conflict and both stay.
	wantCategory(t, c.Move(ctx, "/d1/g", "/d2/x", true), errdefs.ErrConflict)
	if readRoot(t, a.root, "d1/g") != "gee" || readRoot(t, a.root, "d2/x") != "ex" {
		t.Fatal("a refused move changed a file")
	}
	if err := c.Move(ctx, "/d1/g", "/d2/x", false); err != nil {
		t.Fatal(err)
	}
	if got := readRoot(t, a.root, "d2/x"); got != "gee" {
		t.Fatalf("d2/x = %q after replacing", got)
	}
	// A file onto a directory, a directory onto a file, a directory onto
	// a non-empty one: conflicts.
	wantCategory(t, c.Move(ctx, "/d2/x", "/empty", false), errdefs.ErrConflict)
	wantCategory(t, c.Move(ctx, "/full", "/d2/x", false), errdefs.ErrConflict)
	wantCategory(t, c.Move(ctx, "/d1", "/full", false), errdefs.ErrConflict)
	// A directory onto an empty directory replaces it.
	if err := c.Move(ctx, "/full", "/empty", false); err != nil {
		t.Fatal(err)
	}
	if got := readRoot(t, a.root, "empty/inner"); got != "in" {
		t.Fatalf("empty/inner = %q", got)
	}
	gone(t, a.root, "full")
	// Under itself, /, missing source, missing destination parent.
	wantCategory(t, c.Move(ctx, "/empty", "/empty/sub", false), errdefs.ErrInvalid)
	wantCategory(t, c.Move(ctx, "/", "/x", false), errdefs.ErrInvalid)
	wantCategory(t, c.Move(ctx, "/d2", "/", false), errdefs.ErrInvalid)
	wantCategory(t, c.Move(ctx, "/nope", "/x", false), errdefs.ErrNotFound)
	wantCategory(t, c.Move(ctx, "/d2/x", "/no/such/dir", false), errdefs.ErrNotFound)
	wantCategory(t, c.Move(ctx, "relative", "/x", false), errdefs.ErrInvalid)
	wantCategory(t, c.Move(ctx, "/d2/x", "", false), errdefs.ErrInvalid)
}

// TestMoveSymlinks: a symlink is moved or replaced, never followed in the
// last component, and the paths resolve inside the root however they
// climb.
func TestMoveSymlinks(t *testing.T) {
	a := startAgent(t)
	c, ctx := a.client, testCtx(t)
	out, check := sentinel(t)
	defer check()
	writeFile(t, a.root, "target", "t")
	writeFile(t, a.root, "f", "f")
	symlink(t, "/target", filepath.Join(a.root, "ln"))
	symlink(t, out+"/sentinel", filepath.Join(a.root, "outln"))
	symlink(t, out, filepath.Join(a.root, "outdir"))
	symlink(t, "../../../..", filepath.Join(a.root, "up"))

	// Moving a symlink moves the link.
	if err := c.Move(ctx, "/ln", "/ln2", false); err != nil {
		t.Fatal(err)
	}
	if tgt, err := os.Readlink(filepath.Join(a.root, "ln2")); err != nil || tgt != "/target" {
		t.Fatalf("ln2 -> %q, %v", tgt, err)
	}
	if readRoot(t, a.root, "target") != "t" {
		t.Fatal("the link's target changed")
	}
	// Moving onto a symlink that points outside replaces the link; the
	// host file it named is untouched (check).
	if err := c.Move(ctx, "/f", "/outln", false); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Lstat(filepath.Join(a.root, "outln")); err != nil || !fi.Mode().IsRegular() {
		t.Fatalf("outln not replaced by the file: %v", err)
	}
	// Through a symlinked parent pointing at a host dir: it resolves
	// inside the root, where it dangles.
	wantCategory(t, c.Move(ctx, "/target", "/outdir/stolen", false), errdefs.ErrNotFound)
	wantCategory(t, c.Move(ctx, "/outdir/sentinel", "/mine", false), errdefs.ErrNotFound)
	// Climbing links and .. stay in the root.
	if err := c.Move(ctx, "/up/../../target", "/up/up/moved", false); err != nil {
		t.Fatal(err)
	}
	if readRoot(t, a.root, "moved") != "t" {
		t.Fatal("move through climbing links did not land in the root")
	}
}

// TestStatOwner: stat and list report the owner as the agent sees it.
func TestStatOwner(t *testing.T) {
	a := startAgent(t)
	c, ctx := a.client, testCtx(t)
	writeFile(t, a.root, "d/f", "x")
	fi, err := c.Stat(ctx, "/d/f")
	if err != nil {
		t.Fatal(err)
	}
	if fi.UID == nil || fi.GID == nil || *fi.UID != uint32(os.Getuid()) || *fi.GID != uint32(os.Getgid()) {
		t.Fatalf("stat owner = %v:%v, want %d:%d", fi.UID, fi.GID, os.Getuid(), os.Getgid())
	}
	fis, err := c.List(ctx, "/d")
	if err != nil {
		t.Fatal(err)
	}
	if len(fis) != 1 || fis[0].UID == nil || *fis[0].UID != uint32(os.Getuid()) {
		t.Fatalf("list = %+v", fis)
	}
}

// TestIDShift: an agent configured with a host id range (the daemon's
// quarantine reader) reports owners as the sandbox sees them, in stat,
// list, read_file and read_tar; ids outside the range as the overflow id.
func TestIDShift(t *testing.T) {
	uid, gid := uint32(os.Getuid()), uint32(os.Getgid())
	for _, tc := range []struct {
		name             string
		shift            IDShift
		wantUID, wantGID uint32
	}{
		{"in range", IDShift{Base: min(uid, gid), Size: 65536}, uid - min(uid, gid), gid - min(uid, gid)},
		{"out of range", IDShift{Base: max(uid, gid) + 1, Size: 65536}, overflowID, overflowID},
	} {
		t.Run(tc.name, func(t *testing.T) {
			shift := tc.shift
			a := startAgent(t, func(c *Config) { c.IDs = &shift })
			c, ctx := a.client, testCtx(t)
			writeFile(t, a.root, "d/f", "x")
			check := func(what string, u, g *uint32) {
				t.Helper()
				if u == nil || g == nil || *u != tc.wantUID || *g != tc.wantGID {
					t.Errorf("%s owner = %v:%v, want %d:%d", what, u, g, tc.wantUID, tc.wantGID)
				}
			}
			fi, err := c.Stat(ctx, "/d/f")
			if err != nil {
				t.Fatal(err)
			}
			check("stat", fi.UID, fi.GID)
			fis, err := c.List(ctx, "/d")
			if err != nil || len(fis) != 1 {
				t.Fatalf("list = %v, %v", fis, err)
			}
			check("list", fis[0].UID, fis[0].GID)
			fi, err = c.ReadFile(ctx, "/d/f", io.Discard)
			if err != nil {
				t.Fatal(err)
			}
			check("read_file", fi.UID, fi.GID)
			var buf bytes.Buffer
			if err := c.ReadTar(ctx, "/d", &buf); err != nil {
				t.Fatal(err)
			}
			tr := tar.NewReader(&buf)
			n := 0
			for {
				h, err := tr.Next()
				if err == io.EOF {
					break
				}
				if err != nil {
					t.Fatal(err)
				}
				n++
				u, g := uint32(h.Uid), uint32(h.Gid)
				check("tar "+h.Name, &u, &g)
				if h.Name == "d/f" {
					if b, _ := io.ReadAll(tr); string(b) != "x" {
						t.Errorf("tar d/f = %q", b)
					}
				}
			}
			if n != 2 {
				t.Errorf("tar has %d entries, want 2", n)
			}
		})
	}
}
