package image

import (
	"archive/tar"
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// testMap uses distinct uid and gid bases so a mix-up shows.
var testMap = IDMap{HostUID: 100000, HostGID: 200000, Size: 65536}

var testTime = time.Date(2024, 5, 6, 7, 8, 9, 0, time.UTC)

// te is one tar member for mkTar.
type te struct {
	name     string
	typ      byte
	mode     int64
	uid, gid int
	link     string
	data     string
	xattrs   map[string]string
	major    int64
	minor    int64
	mtime    time.Time
}

func reg(name, data string) te   { return te{name: name, typ: tar.TypeReg, data: data} }
func dir(name string) te         { return te{name: name, typ: tar.TypeDir} }
func sym(name, target string) te { return te{name: name, typ: tar.TypeSymlink, link: target} }
func hard(name, target string) te {
	return te{name: name, typ: tar.TypeLink, link: target}
}

// mkTar serialises members in order, with default modes and mtimes.
func mkTar(tb testing.TB, ents ...te) []byte {
	tb.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range ents {
		mode := e.mode
		if mode == 0 {
			switch e.typ {
			case tar.TypeDir:
				mode = 0o755
			case tar.TypeSymlink:
				mode = 0o777
			default:
				mode = 0o644
			}
		}
		mt := e.mtime
		if mt.IsZero() {
			mt = testTime
		}
		hdr := &tar.Header{Name: e.name, Typeflag: e.typ, Mode: mode, Uid: e.uid, Gid: e.gid,
			Linkname: e.link, ModTime: mt, Devmajor: e.major, Devminor: e.minor, Format: tar.FormatPAX}
		if e.typ == tar.TypeReg {
			hdr.Size = int64(len(e.data))
		}
		for k, v := range e.xattrs {
			if hdr.PAXRecords == nil {
				hdr.PAXRecords = map[string]string{}
			}
			hdr.PAXRecords[paxXattr+k] = v
		}
		if err := tw.WriteHeader(hdr); err != nil {
			tb.Fatalf("tar header %q: %v", e.name, err)
		}
		if e.typ == tar.TypeReg {
			if _, err := tw.Write([]byte(e.data)); err != nil {
				tb.Fatal(err)
			}
		}
	}
	if err := tw.Close(); err != nil {
		tb.Fatal(err)
	}
	return buf.Bytes()
}

func requireRoot(tb testing.TB) {
	tb.Helper()
	if os.Geteuid() != 0 {
		tb.Skip("needs root: creates whiteouts, chowns and mounts overlays")
	}
}

func lstat(tb testing.TB, p string) *unix.Stat_t {
	tb.Helper()
	var st unix.Stat_t
	if err := unix.Lstat(p, &st); err != nil {
		tb.Fatalf("lstat %s: %v", p, err)
	}
	return &st
}

func readFile(tb testing.TB, p string) string {
	tb.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		tb.Fatal(err)
	}
	return string(b)
}

func assertOwner(tb testing.TB, p string, uid, gid uint32) {
	tb.Helper()
	st := lstat(tb, p)
	if st.Uid != uid || st.Gid != gid {
		tb.Errorf("%s owned by %d:%d, want %d:%d", p, st.Uid, st.Gid, uid, gid)
	}
}

func assertMode(tb testing.TB, p string, want uint32) {
	tb.Helper()
	if got := lstat(tb, p).Mode & 0o7777; got != want {
		tb.Errorf("%s mode %#o, want %#o", p, got, want)
	}
}

func isWhiteout(tb testing.TB, p string) bool {
	tb.Helper()
	var st unix.Stat_t
	if err := unix.Lstat(p, &st); err != nil {
		return false
	}
	return st.Mode&unix.S_IFMT == unix.S_IFCHR && st.Rdev == 0
}

func xattr(p, k string) string {
	buf := make([]byte, 256)
	n, err := unix.Lgetxattr(p, k, buf)
	if err != nil {
		return ""
	}
	return string(buf[:n])
}

func exists(p string) bool {
	_, err := os.Lstat(p)
	return !errors.Is(err, os.ErrNotExist)
}

// mountOverlay mounts lower (top first) read-only-below a fresh upper and
// returns the merged dir; it is unmounted when the test ends.
func mountOverlay(tb testing.TB, lower ...string) string {
	tb.Helper()
	base := tb.TempDir()
	upper, work, merged := filepath.Join(base, "upper"), filepath.Join(base, "work"), filepath.Join(base, "merged")
	for _, d := range []string{upper, work, merged} {
		if err := os.Mkdir(d, 0o755); err != nil {
			tb.Fatal(err)
		}
	}
	lowers := ""
	for i, l := range lower {
		if i > 0 {
			lowers += ":"
		}
		lowers += l
	}
	opts := "lowerdir=" + lowers + ",upperdir=" + upper + ",workdir=" + work
	if err := unix.Mount("overlay", merged, "overlay", 0, opts); err != nil {
		tb.Fatalf("mount overlay %s: %v", opts, err)
	}
	tb.Cleanup(func() {
		if err := unix.Unmount(merged, unix.MNT_DETACH); err != nil {
			tb.Errorf("unmount %s: %v", merged, err)
		}
	})
	return merged
}
