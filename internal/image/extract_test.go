package image

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/berth-sh/berth/internal/errdefs"
)

// hostCanary is the host path the "symlink to /" attacks aim at. It is a
// file nobody has rather than /etc/passwd, so that a regression in the
// extractor shows up as a failing test, not as a broken machine (tests run
// as root).
const hostCanary = "/tmp/berth-image-escape-canary/passwd"

var testLimits = extractLimits{maxBytes: 1 << 20, maxEntries: 1000}

// sandboxDirs makes base/root (empty, the extraction target) and
// base/sentinel (holding one file), the sibling an escape would hit.
func sandboxDirs(tb testing.TB) (base, root string) {
	tb.Helper()
	base = tb.TempDir()
	root = filepath.Join(base, "root")
	if err := os.Mkdir(root, 0o755); err != nil {
		tb.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(base, "sentinel", "etc"), 0o755); err != nil {
		tb.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(base, "sentinel", "etc", "passwd"), []byte("sentinel\n"), 0o644); err != nil {
		tb.Fatal(err)
	}
	return base, root
}

// outsideState fingerprints everything under base except root, plus the
// host files an escape through "/" would reach.
func outsideState(tb testing.TB, base string) string {
	tb.Helper()
	var b strings.Builder
	err := filepath.WalkDir(base, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p == filepath.Join(base, "root") {
			return fs.SkipDir
		}
		st := lstat(tb, p)
		fmt.Fprintf(&b, "%s %o %d:%d ", p, st.Mode, st.Uid, st.Gid)
		if d.Type().IsRegular() {
			sum := sha256.Sum256([]byte(readFile(tb, p)))
			b.Write(sum[:])
		}
		b.WriteString("\n")
		return nil
	})
	if err != nil {
		tb.Fatal(err)
	}
	for _, p := range []string{"/etc/passwd", "/x", "/abs", "/pwn", hostCanary} {
		if c, err := os.ReadFile(p); err == nil {
			sum := sha256.Sum256(c)
			b.WriteString(p)
			b.Write(sum[:])
		}
	}
	return b.String()
}

func extractBytes(tb testing.TB, root string, data []byte) (extractStats, error) {
	tb.Helper()
	return extractTar(context.Background(), bytes.NewReader(data), root, testMap, testLimits, nil)
}

func TestExtractRejectsEscapes(t *testing.T) {
	requireRoot(t)
	for _, tc := range escapeCases(t) {
		t.Run(tc.name, func(t *testing.T) {
			base, root := sandboxDirs(t)
			before := outsideState(t, base)
			_, err := extractBytes(t, root, tc.tar)
			t.Logf("err: %v", err)
			if !errors.Is(err, errdefs.ErrInvalid) {
				t.Errorf("err = %v, want ErrInvalid", err)
			}
			if after := outsideState(t, base); after != before {
				t.Errorf("extraction changed files outside the root:\nbefore %q\nafter  %q", before, after)
			}
		})
	}
}

type escapeCase struct {
	name string
	tar  []byte
}

func escapeCases(tb testing.TB) []escapeCase {
	return []escapeCase{
		{"dotdot", mkTar(tb, reg("../x", "pwn"))},
		{"dotdot-sentinel", mkTar(tb, reg("../sentinel/etc/passwd", "pwn"))},
		{"absolute", mkTar(tb, reg("/abs", "pwn"))},
		{"inner-dotdot", mkTar(tb, dir("a/"), reg("a/../../x", "pwn"))},
		{"symlink-root-then-write", mkTar(tb, sym("l", "/"), reg("l"+hostCanary, "pwn"))},
		{"symlink-dotdot-then-write", mkTar(tb, sym("l", ".."), reg("l/sentinel/etc/passwd", "pwn"))},
		{"symlink-sentinel-then-write", mkTar(tb, sym("l", "../sentinel"), reg("l/pwn", "pwn"))},
		{"symlink-dir-then-mkdir", mkTar(tb, sym("l", "../sentinel"), dir("l/sub/"))},
		{"hardlink-escape", mkTar(tb, hard("h", "../../etc/passwd"))},
		{"hardlink-through-symlink", mkTar(tb, sym("l", "../sentinel/etc"), hard("h", "l/passwd"))},
		{"hardlink-missing", mkTar(tb, hard("h", "nothing"))},
		{"whiteout-escape", mkTar(tb, reg("../.wh.sentinel", ""))},
		{"whiteout-dotdot", mkTar(tb, reg("a/.wh...", ""))},
		{"opaque-escape", mkTar(tb, reg("../sentinel/.wh..wh..opq", ""))},
		{"whiteout-through-symlink", mkTar(tb, sym("l", "../sentinel/etc"), reg("l/.wh.passwd", ""))},
		{"root-not-dir", mkTar(tb, reg(".", "x"))},
		{"garbage", []byte("this is not a tar stream, not at all, but it is long enough to be read as a header block by the tar reader so that it fails on its checksum rather than on EOF.................................................................................................................................................................................................................................................................................................................................................................")},
	}
}

func TestExtractLimits(t *testing.T) {
	requireRoot(t)
	_, root := sandboxDirs(t)
	_, err := extractTar(context.Background(), bytes.NewReader(mkTar(t, reg("a", "12345"), reg("b", "67890"))),
		root, testMap, extractLimits{maxBytes: 8, maxEntries: 10}, nil)
	if !errors.Is(err, errdefs.ErrTooLarge) {
		t.Errorf("byte cap: err = %v, want ErrTooLarge", err)
	}
	_, root = sandboxDirs(t)
	_, err = extractTar(context.Background(), bytes.NewReader(mkTar(t, dir("a/"), dir("b/"), dir("c/"))),
		root, testMap, extractLimits{maxBytes: 8, maxEntries: 2}, nil)
	if !errors.Is(err, errdefs.ErrTooLarge) {
		t.Errorf("entry cap: err = %v, want ErrTooLarge", err)
	}
}

func TestExtractContent(t *testing.T) {
	requireRoot(t)
	_, root := sandboxDirs(t)
	setuid := reg("bin/tool", "#!/bin/sh\n")
	setuid.mode, setuid.uid, setuid.gid = 0o4755, 1000, 1001
	big := reg("home/far", "x")
	big.uid, big.gid = 70000, 70000 // beyond the map: nobody
	xa := reg("xa", "x")
	xa.xattrs = map[string]string{"user.keep": "1", "trusted.evil": "1", "security.capability": "x", "user.overlay.opaque": "y"}
	tmp := dir("tmp/")
	tmp.mode = 0o1777
	dev := te{name: "dev/sda", typ: tar.TypeBlock, major: 8}
	fifo := te{name: "fifo", typ: tar.TypeFifo}
	wh0 := te{name: "oldwh", typ: tar.TypeChar} // already in overlay form
	stats, err := extractBytes(t, root, mkTar(t,
		dir("bin/"), setuid, big, xa, tmp, dev, fifo, wh0,
		sym("abs", "/etc/passwd"), sym("rel", "../../../x"),
		reg("data", "hello"), hard("datalink", "data"),
		reg("gone/.wh.file", ""), reg("opq/.wh..wh..opq", ""), reg("opq/new", "n"),
		reg("replaced", "first"), reg("replaced", "second"),
		dir("d/"), reg("d/child", "c"),
	))
	if err != nil {
		t.Fatal(err)
	}
	if stats.Skipped != 2 {
		t.Errorf("skipped %d members, want 2 (block device, fifo)", stats.Skipped)
	}
	assertMode(t, filepath.Join(root, "bin/tool"), 0o4755)
	assertOwner(t, filepath.Join(root, "bin/tool"), 101000, 201001)
	assertOwner(t, filepath.Join(root, "home/far"), 100000+65534, 200000+65534)
	assertOwner(t, filepath.Join(root, "home"), 100000, 200000) // implicit parent
	assertOwner(t, filepath.Join(root, "abs"), 100000, 200000)
	assertMode(t, filepath.Join(root, "tmp"), 0o1777)
	if xattr(filepath.Join(root, "xa"), "user.keep") != "1" {
		t.Error("user.keep xattr lost")
	}
	for _, k := range []string{"trusted.evil", "security.capability", "user.overlay.opaque"} {
		if xattr(filepath.Join(root, "xa"), k) != "" {
			t.Errorf("xattr %s was applied", k)
		}
	}
	if exists(filepath.Join(root, "dev/sda")) || exists(filepath.Join(root, "fifo")) {
		t.Error("device node or fifo created")
	}
	if !isWhiteout(t, filepath.Join(root, "oldwh")) || !isWhiteout(t, filepath.Join(root, "gone/file")) {
		t.Error("whiteouts missing")
	}
	if exists(filepath.Join(root, "gone/.wh.file")) {
		t.Error("whiteout marker file left as-is")
	}
	if xattr(filepath.Join(root, "opq"), opaqueXattr) != "y" {
		t.Error("opaque dir not marked")
	}
	if exists(filepath.Join(root, "opq/.wh..wh..opq")) {
		t.Error("opaque marker file left as-is")
	}
	if l, _ := os.Readlink(filepath.Join(root, "abs")); l != "/etc/passwd" {
		t.Errorf("symlink target %q, want verbatim /etc/passwd", l)
	}
	if l, _ := os.Readlink(filepath.Join(root, "rel")); l != "../../../x" {
		t.Errorf("symlink target %q, want verbatim", l)
	}
	if a, b := lstat(t, filepath.Join(root, "data")), lstat(t, filepath.Join(root, "datalink")); a.Ino != b.Ino {
		t.Error("hardlink is not the same inode")
	}
	if got := readFile(t, filepath.Join(root, "replaced")); got != "second" {
		t.Errorf("replaced = %q, want the later member", got)
	}
	for _, p := range []string{"d", "data", "bin/tool"} {
		if st := lstat(t, filepath.Join(root, p)); st.Mtim.Sec != testTime.Unix() {
			t.Errorf("%s mtime %d, want %d", p, st.Mtim.Sec, testTime.Unix())
		}
	}
}

func TestExtractReplacesSymlinkWithDir(t *testing.T) {
	requireRoot(t)
	base, root := sandboxDirs(t)
	before := outsideState(t, base)
	// A later dir member replaces the symlink rather than following it.
	if _, err := extractBytes(t, root, mkTar(t, sym("l", "../sentinel"), dir("l/"), reg("l/f", "x"))); err != nil {
		t.Fatal(err)
	}
	if st := lstat(t, filepath.Join(root, "l")); st.Mode&unix.S_IFMT != unix.S_IFDIR {
		t.Error("l is not a directory")
	}
	if outsideState(t, base) != before {
		t.Error("write went through the replaced symlink")
	}
}

func FuzzExtract(f *testing.F) {
	for _, tc := range escapeCases(f) {
		f.Add(tc.tar)
	}
	f.Add(mkTar(f, dir("a/"), reg("a/b", "x"), sym("a/c", "b"), hard("a/d", "a/b"), reg("a/.wh.e", ""), reg("a/.wh..wh..opq", "")))
	f.Add(mkTar(f, sym("l", "/"), sym("l2", "l"), reg("l2"+hostCanary, "x")))
	f.Add(mkTar(f, reg("a", "x"), dir("a/"), sym("a", "."), hard("b", "a")))
	f.Add([]byte{})
	requireRoot(f)
	// One sentinel per fuzzing process, a fresh root per input: making the
	// whole sandbox anew each time would be most of the cost of an input.
	base, root0 := sandboxDirs(f)
	if err := os.Remove(root0); err != nil {
		f.Fatal(err)
	}
	before := outsideState(f, base)
	f.Fuzz(func(t *testing.T, data []byte) {
		root := filepath.Join(base, "root")
		if err := os.Mkdir(root, 0o755); err != nil {
			t.Fatal(err)
		}
		defer os.RemoveAll(root)
		_, _ = extractTar(context.Background(), bytes.NewReader(data), root, testMap, extractLimits{maxBytes: 1 << 20, maxEntries: 256}, nil)
		if after := outsideState(t, base); after != before {
			t.Fatalf("extraction changed files outside the root:\nbefore %q\nafter  %q", before, after)
		}
		// Inside, only what a layer may hold: no devices but whiteouts, no fifos.
		err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			st := lstat(t, p)
			switch st.Mode & unix.S_IFMT {
			case unix.S_IFCHR:
				if st.Rdev != 0 {
					t.Errorf("device node %s", p)
				}
			case unix.S_IFBLK, unix.S_IFIFO, unix.S_IFSOCK:
				t.Errorf("special file %s", p)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	})
}
