package agentd

import (
	"archive/tar"
	"bytes"
	"errors"
	"io"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/berth-sh/berth/internal/agent"
	"github.com/berth-sh/berth/internal/agent/wire"

	"golang.org/x/sys/unix"

	"github.com/berth-sh/berth/internal/errdefs"
)

func writeFile(t testing.TB, root, rel, content string) {
	t.Helper()
	p := filepath.Join(root, rel)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func symlink(t testing.TB, target, link string) {
	t.Helper()
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
}

// sentinel creates a file outside the agent's root and returns a check
// that it is unchanged and that nothing new appeared beside it.
func sentinel(t *testing.T) (dir string, check func()) {
	t.Helper()
	dir = t.TempDir()
	writeFile(t, dir, "sentinel", "precious")
	return dir, func() {
		t.Helper()
		entries, err := os.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		if len(entries) != 1 || entries[0].Name() != "sentinel" {
			var names []string
			for _, e := range entries {
				names = append(names, e.Name())
			}
			t.Fatalf("outside directory now holds %v", names)
		}
		b, err := os.ReadFile(filepath.Join(dir, "sentinel"))
		if err != nil || string(b) != "precious" {
			t.Fatalf("sentinel = %q, %v", b, err)
		}
	}
}

func TestFilesRoundTrip(t *testing.T) {
	a := startAgent(t)
	c, ctx := a.client, testCtx(t)

	if err := c.Mkdir(ctx, "/a/b/c", 0o750, true); err != nil {
		t.Fatal(err)
	}
	if err := c.Mkdir(ctx, "/a/b/c", 0o750, true); err != nil {
		t.Fatalf("mkdir -p of an existing dir: %v", err)
	}
	wantCategory(t, c.Mkdir(ctx, "/a/b/c", 0, false), errdefs.ErrConflict)
	wantCategory(t, c.Mkdir(ctx, "/x/y", 0, false), errdefs.ErrNotFound)

	data := bytes.Repeat([]byte("0123456789"), 10_000)
	fi, err := c.WriteFile(ctx, "/a/b/c/f.txt", 0o640, bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	if fi.Size != int64(len(data)) || fs.FileMode(fi.Mode).Perm() != 0o640 || fi.Path != "/a/b/c/f.txt" || fi.Name != "f.txt" {
		t.Fatalf("write info %+v", fi)
	}
	var buf bytes.Buffer
	fi, err = c.ReadFile(ctx, "/a/b/c/f.txt", &buf)
	if err != nil || !bytes.Equal(buf.Bytes(), data) || fi.Size != int64(len(data)) {
		t.Fatalf("read back: %v, %d bytes", err, buf.Len())
	}
	// Overwrite keeps the mode when none is given.
	if _, err := c.WriteFile(ctx, "/a/b/c/f.txt", 0, strings.NewReader("new")); err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(filepath.Join(a.root, "a/b/c/f.txt"))
	if err != nil || st.Mode().Perm() != 0o640 || st.Size() != 3 {
		t.Fatalf("after overwrite: %v %v", st.Mode(), err)
	}
	// Empty file.
	if _, err := c.WriteFile(ctx, "/empty", 0, strings.NewReader("")); err != nil {
		t.Fatal(err)
	}

	symlink(t, "c/f.txt", filepath.Join(a.root, "a/b/lnk"))
	fi, err = c.Stat(ctx, "/a/b/lnk")
	if err != nil || fi.Link != "c/f.txt" || fs.FileMode(fi.Mode)&fs.ModeSymlink == 0 {
		t.Fatalf("stat symlink: %+v %v", fi, err)
	}
	fi, err = c.Stat(ctx, "/a/b/c")
	if err != nil || !fi.IsDir || fs.FileMode(fi.Mode).Perm() != 0o750 {
		t.Fatalf("stat dir: %+v %v", fi, err)
	}
	if fi, err := c.Stat(ctx, "/"); err != nil || !fi.IsDir {
		t.Fatalf("stat /: %+v %v", fi, err)
	}
	_, err = c.Stat(ctx, "/nope")
	wantCategory(t, err, errdefs.ErrNotFound)

	list, err := c.List(ctx, "/a/b")
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 2 || list[0].Name != "c" || !list[0].IsDir || list[1].Name != "lnk" || list[1].Link != "c/f.txt" || list[1].Path != "/a/b/lnk" {
		t.Fatalf("list = %+v", list)
	}
	_, err = c.List(ctx, "/a/b/c/f.txt")
	wantCategory(t, err, errdefs.ErrNotFound) // ENOTDIR

	_, err = c.ReadFile(ctx, "/a/b", io.Discard)
	wantCategory(t, err, errdefs.ErrInvalid)
	if err := unix.Mkfifo(filepath.Join(a.root, "fifo"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = c.ReadFile(ctx, "/fifo", io.Discard)
	wantCategory(t, err, errdefs.ErrInvalid)

	wantCategory(t, c.Remove(ctx, "/a", false), errdefs.ErrConflict)
	wantCategory(t, c.Remove(ctx, "/", true), errdefs.ErrInvalid)
	wantCategory(t, c.Remove(ctx, "/nope", true), errdefs.ErrNotFound)
	if err := c.Remove(ctx, "/empty", false); err != nil {
		t.Fatal(err)
	}
	if err := c.Remove(ctx, "/a", true); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(filepath.Join(a.root, "a")); !os.IsNotExist(err) {
		t.Fatalf("/a still there: %v", err)
	}
}

func TestFilesBadPaths(t *testing.T) {
	a := startAgent(t)
	c, ctx := a.client, testCtx(t)
	for _, p := range []string{"", "relative", "../../etc/passwd", "/a\x00b", "/" + strings.Repeat("a", 5000)} {
		_, err := c.Stat(ctx, p)
		wantCategory(t, err, errdefs.ErrInvalid)
		_, err = c.WriteFile(ctx, p, 0, strings.NewReader("x"))
		wantCategory(t, err, errdefs.ErrInvalid)
	}
}

func TestFilesPathEscapes(t *testing.T) {
	a := startAgent(t)
	c, ctx := a.client, testCtx(t)
	out, check := sentinel(t)
	defer check()
	writeFile(t, a.root, "etc/hostname", "inside\n")
	symlink(t, "/", filepath.Join(a.root, "link"))                 // absolute, to the root
	symlink(t, "../../../../../..", filepath.Join(a.root, "up"))   // relative, climbing
	symlink(t, "/etc", filepath.Join(a.root, "etclink"))           // absolute, a directory
	symlink(t, out, filepath.Join(a.root, "outlink"))              // the host path of outside
	symlink(t, out+"/sentinel", filepath.Join(a.root, "sentlink")) // the host path of the sentinel
	symlink(t, "/proc/self/root", filepath.Join(a.root, "magic"))  // resolves inside root: no proc there
	for _, p := range []string{"/../../etc/hostname", "/link/etc/hostname", "/up/etc/hostname", "/etclink/hostname", "/link/link/up/etc/hostname"} {
		var buf bytes.Buffer
		if _, err := c.ReadFile(ctx, p, &buf); err != nil || buf.String() != "inside\n" {
			t.Errorf("read %s = %q, %v; want the file inside the root", p, buf.String(), err)
		}
	}
	for _, p := range []string{"/outlink/sentinel", "/sentlink", "/magic/etc/hostname"} {
		_, err := c.ReadFile(ctx, p, io.Discard)
		wantCategory(t, err, errdefs.ErrNotFound)
	}
	// Writes through symlinked parents land inside; a symlink in the last
	// component is replaced, never written through.
	if _, err := c.WriteFile(ctx, "/link/etc/written", 0, strings.NewReader("w")); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(a.root, "etc/written")); string(b) != "w" {
		t.Fatal("write through /link did not land in the root")
	}
	if _, err := c.WriteFile(ctx, "/sentlink", 0, strings.NewReader("overwritten")); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Lstat(filepath.Join(a.root, "sentlink")); err != nil || !fi.Mode().IsRegular() {
		t.Fatalf("sentlink not replaced by a file: %v", err)
	}
	_, err := c.WriteFile(ctx, "/outlink/new", 0, strings.NewReader("x"))
	wantCategory(t, err, errdefs.ErrNotFound)
	// mkdir -p through a symlink to a host path: it dangles inside the
	// root, so this fails as mkdir -p would, and creates nothing outside.
	wantCategory(t, c.Mkdir(ctx, "/outlink/sub/dir", 0, true), errdefs.ErrNotFound)
	if err := c.Mkdir(ctx, "/link/made/here", 0, true); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(a.root, "made/here")); err != nil {
		t.Fatalf("mkdir -p through /link: %v", err)
	}
	// Removing through and of symlinks never touches their targets.
	symlink(t, out, filepath.Join(a.root, "a-dir-link"))
	if err := os.MkdirAll(filepath.Join(a.root, "tree"), 0o755); err != nil {
		t.Fatal(err)
	}
	symlink(t, out, filepath.Join(a.root, "tree/out"))
	if err := c.Remove(ctx, "/tree", true); err != nil {
		t.Fatal(err)
	}
	if err := c.Remove(ctx, "/a-dir-link", true); err != nil {
		t.Fatal(err)
	}
	if err := c.Remove(ctx, "/link", true); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(a.root, "etc/hostname")); err != nil {
		t.Fatalf("removing /link removed its target: %v", err)
	}
}

func TestFilesMagicLinks(t *testing.T) {
	a := startAgent(t)
	c, ctx := a.client, testCtx(t)
	procDir := filepath.Join(a.root, "proc")
	if err := os.Mkdir(procDir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("proc", procDir, "proc", 0, ""); err != nil {
		t.Skipf("cannot mount proc: %v", err)
	}
	defer unix.Unmount(procDir, unix.MNT_DETACH)
	for _, p := range []string{"/proc/self/root/etc/hostname", "/proc/self/cwd/etc/hostname", "/proc/thread-self/root/etc/passwd"} {
		_, err := c.ReadFile(ctx, p, io.Discard)
		wantCategory(t, err, errdefs.ErrInvalid)
	}
	_, err := c.List(ctx, "/proc/self/root")
	wantCategory(t, err, errdefs.ErrInvalid)
	_, err = c.WriteFile(ctx, "/proc/self/root/tmp/x", 0, strings.NewReader("x"))
	wantCategory(t, err, errdefs.ErrInvalid)
}

func TestWriteFileTooLarge(t *testing.T) {
	a := startAgent(t, func(c *Config) { c.MaxFileBytes = 1 << 20 })
	c, ctx := a.client, testCtx(t)
	if _, err := c.WriteFile(ctx, "/f", 0, strings.NewReader("old")); err != nil {
		t.Fatal(err)
	}
	if _, err := c.WriteFile(ctx, "/exact", 0, bytes.NewReader(make([]byte, 1<<20))); err != nil {
		t.Fatalf("file of exactly the cap: %v", err)
	}
	_, err := c.WriteFile(ctx, "/f", 0, bytes.NewReader(make([]byte, 5<<20)))
	wantCategory(t, err, errdefs.ErrTooLarge)
	if b, _ := os.ReadFile(filepath.Join(a.root, "f")); string(b) != "old" {
		t.Fatalf("old content lost: %q", b)
	}
	// A client that gives up mid-upload changes nothing either.
	_, err = c.WriteFile(ctx, "/f", 0, io.MultiReader(strings.NewReader("partial"), errReader{}))
	if err == nil {
		t.Fatal("upload with a failing reader succeeded")
	}
	waitFor(t, func() bool {
		entries, _ := os.ReadDir(a.root)
		return len(entries) == 2 // f, exact: no temporary files left
	})
	if b, _ := os.ReadFile(filepath.Join(a.root, "f")); string(b) != "old" {
		t.Fatalf("old content lost: %q", b)
	}
}

type errReader struct{}

func (errReader) Read([]byte) (int, error) { return 0, io.ErrClosedPipe }

func TestListCap(t *testing.T) {
	if testing.Short() {
		t.Skip("100k files")
	}
	a := startAgent(t)
	dir := filepath.Join(a.root, "many")
	os.Mkdir(dir, 0o755)
	for i := range wire.MaxListEntries + 1 {
		f, err := os.Create(filepath.Join(dir, "f"+strconv.Itoa(i)))
		if err != nil {
			t.Fatal(err)
		}
		f.Close()
	}
	_, err := a.client.List(testCtx(t), "/many")
	wantCategory(t, err, errdefs.ErrTooLarge)
}

// tarOf builds a tar archive from headers; regular files get body as data.
func tarOf(t testing.TB, entries ...tarEnt) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		h := e.h
		if h.Typeflag == tar.TypeReg {
			h.Size = int64(len(e.body))
		}
		if h.Mode == 0 {
			h.Mode = 0o644
		}
		if err := tw.WriteHeader(&h); err != nil {
			t.Fatal(err)
		}
		if h.Typeflag == tar.TypeReg {
			tw.Write([]byte(e.body))
		}
	}
	tw.Close()
	return buf.Bytes()
}

type tarEnt struct {
	h    tar.Header
	body string
}

func reg(name, body string) tarEnt {
	return tarEnt{h: tar.Header{Typeflag: tar.TypeReg, Name: name}, body: body}
}
func dirEnt(name string) tarEnt {
	return tarEnt{h: tar.Header{Typeflag: tar.TypeDir, Name: name, Mode: 0o755}}
}
func symEnt(name, target string) tarEnt {
	return tarEnt{h: tar.Header{Typeflag: tar.TypeSymlink, Name: name, Linkname: target}}
}
func linkEnt(name, target string) tarEnt {
	return tarEnt{h: tar.Header{Typeflag: tar.TypeLink, Name: name, Linkname: target}}
}

func TestTarRoundTrip(t *testing.T) {
	a := startAgent(t)
	c, ctx := a.client, testCtx(t)
	if err := c.Mkdir(ctx, "/dest", 0, false); err != nil {
		t.Fatal(err)
	}
	archive := tarOf(t,
		dirEnt("./"),
		dirEnt("proj/"),
		reg("proj/main.go", "package main\n"),
		reg("proj/deep/er/file", "implicit parents"),
		symEnt("proj/abs", "/etc/passwd"),
		symEnt("proj/rel", "main.go"),
		linkEnt("proj/hard", "proj/main.go"),
		tarEnt{h: tar.Header{Typeflag: tar.TypeReg, Name: "proj/exec.sh", Mode: 0o755}, body: "#!/bin/sh\n"},
	)
	if err := c.WriteTar(ctx, "/dest", bytes.NewReader(archive)); err != nil {
		t.Fatal(err)
	}
	d := filepath.Join(a.root, "dest")
	if b, _ := os.ReadFile(filepath.Join(d, "proj/deep/er/file")); string(b) != "implicit parents" {
		t.Fatalf("deep file = %q", b)
	}
	if l, _ := os.Readlink(filepath.Join(d, "proj/abs")); l != "/etc/passwd" {
		t.Fatalf("symlink = %q", l)
	}
	var s1, s2 unix.Stat_t
	unix.Stat(filepath.Join(d, "proj/main.go"), &s1)
	unix.Stat(filepath.Join(d, "proj/hard"), &s2)
	if s1.Ino != s2.Ino || s1.Nlink != 2 {
		t.Fatal("hardlink not linked")
	}
	if st, _ := os.Stat(filepath.Join(d, "proj/exec.sh")); st.Mode().Perm() != 0o755 {
		t.Fatalf("mode %v", st.Mode())
	}

	// Read it back: symlinks stay symlinks.
	var out bytes.Buffer
	if err := c.ReadTar(ctx, "/dest/proj", &out); err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	tr := tar.NewReader(&out)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		v := string(h.Typeflag)
		if h.Typeflag == tar.TypeSymlink {
			v += "->" + h.Linkname
		}
		if h.Typeflag == tar.TypeReg {
			b, _ := io.ReadAll(tr)
			v += ":" + string(b)
		}
		got[h.Name] = v
	}
	want := map[string]string{
		"proj/":             "5",
		"proj/main.go":      "0:package main\n",
		"proj/hard":         "0:package main\n",
		"proj/exec.sh":      "0:#!/bin/sh\n",
		"proj/abs":          "2->/etc/passwd",
		"proj/rel":          "2->main.go",
		"proj/deep/":        "5",
		"proj/deep/er/":     "5",
		"proj/deep/er/file": "0:implicit parents",
	}
	if len(got) != len(want) {
		t.Fatalf("tar entries %v", keys(got))
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %q, want %q", k, got[k], v)
		}
	}
	// A single file, and a symlink as the requested path itself.
	out.Reset()
	if err := c.ReadTar(ctx, "/dest/proj/abs", &out); err != nil {
		t.Fatal(err)
	}
	h, err := tar.NewReader(&out).Next()
	if err != nil || h.Name != "abs" || h.Typeflag != tar.TypeSymlink {
		t.Fatalf("tar of a symlink: %+v %v", h, err)
	}
	// The whole root.
	out.Reset()
	if err := c.ReadTar(ctx, "/", &out); err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(out.Bytes(), []byte("implicit parents")) {
		t.Fatal("tar of / misses content")
	}
	err = c.ReadTar(ctx, "/nope", io.Discard)
	wantCategory(t, err, errdefs.ErrNotFound)
}

func keys(m map[string]string) []string {
	var k []string
	for s := range m {
		k = append(k, s)
	}
	sort.Strings(k)
	return k
}

func TestWriteTarOwner(t *testing.T) {
	a := startAgent(t)
	uid, gid := 1234, 5678
	os.Mkdir(filepath.Join(a.root, "d"), 0o755)
	archive := tarOf(t, reg("sub/f", "x"), symEnt("l", "f"), dirEnt("dd/"))
	err := rawOp(t, a.socket, wire.Request{Op: wire.OpWriteTar, Path: "/d", UID: &uid, GID: &gid}, archive)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"sub", "sub/f", "l", "dd"} {
		var st unix.Stat_t
		if err := unix.Lstat(filepath.Join(a.root, "d", p), &st); err != nil {
			t.Fatal(err)
		}
		if int(st.Uid) != uid || int(st.Gid) != gid {
			t.Errorf("%s owned by %d:%d", p, st.Uid, st.Gid)
		}
	}
	// Default: the agent's own user, whatever the archive says.
	os.Mkdir(filepath.Join(a.root, "e"), 0o755)
	archive = tarOf(t, tarEnt{h: tar.Header{Typeflag: tar.TypeReg, Name: "f", Uid: 999, Gid: 999}, body: "y"})
	if err := a.client.WriteTar(testCtx(t), "/e", bytes.NewReader(archive)); err != nil {
		t.Fatal(err)
	}
	var st unix.Stat_t
	unix.Lstat(filepath.Join(a.root, "e/f"), &st)
	if int(st.Uid) != os.Getuid() {
		t.Errorf("owned by %d", st.Uid)
	}
}

func TestWriteTarSlip(t *testing.T) {
	a := startAgent(t)
	c := a.client
	out, check := sentinel(t)
	defer check()
	tests := []struct {
		name    string
		entries []tarEnt
	}{
		{"dotdot", []tarEnt{reg("../evil", "x")}},
		{"dotdot inside", []tarEnt{reg("a/../../evil", "x")}},
		{"dotdot harmless-looking", []tarEnt{reg("a/../b", "x")}},
		{"absolute", []tarEnt{reg("/evil", "x")}},
		{"absolute outside", []tarEnt{reg(out+"/evil", "x")}},
		{"symlink then write through", []tarEnt{symEnt("lnk", out), reg("lnk/evil", "x")}},
		{"relative symlink up then write", []tarEnt{symEnt("up", ".."), reg("up/evil", "x")}},
		{"symlink chain", []tarEnt{symEnt("a", "b"), symEnt("b", "../.."), reg("a/evil", "x")}},
		{"symlink to sentinel, then a file over", []tarEnt{symEnt("s", out+"/sentinel"), reg("s/x", "x")}},
		{"symlink dir then mkdir through", []tarEnt{symEnt("d", out), dirEnt("d/sub/")}},
		{"hardlink outside", []tarEnt{linkEnt("hl", "../sentinel")}},
		{"hardlink absolute", []tarEnt{linkEnt("hl", out+"/sentinel")}},
		{"hardlink through symlink", []tarEnt{symEnt("o", out), linkEnt("hl", "o/sentinel")}},
		{"char device", []tarEnt{{h: tar.Header{Typeflag: tar.TypeChar, Name: "null", Devmajor: 1, Devminor: 3}}}},
		{"block device", []tarEnt{{h: tar.Header{Typeflag: tar.TypeBlock, Name: "sda", Devmajor: 8}}}},
		{"fifo", []tarEnt{{h: tar.Header{Typeflag: tar.TypeFifo, Name: "fifo"}}}},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dest := "/d" + strconv.Itoa(i)
			if err := c.Mkdir(testCtx(t), dest, 0, false); err != nil {
				t.Fatal(err)
			}
			var archive []byte
			func() {
				defer func() { recover() }() // tar.Writer refuses some names itself
				archive = tarOf(t, tt.entries...)
			}()
			if archive == nil {
				t.Skip("archive/tar cannot even write it")
			}
			err := c.WriteTar(testCtx(t), dest, bytes.NewReader(archive))
			wantCategory(t, err, errdefs.ErrInvalid)
			check()
			if _, err := os.Lstat(filepath.Join(a.root, "evil")); err == nil {
				t.Fatal("evil created beside dest")
			}
		})
	}
	check()
}

func TestWriteTarCaps(t *testing.T) {
	a := startAgent(t, func(c *Config) { c.MaxFileBytes = 1000 })
	os.Mkdir(filepath.Join(a.root, "d"), 0o755)
	err := a.client.WriteTar(testCtx(t), "/d", bytes.NewReader(tarOf(t, reg("a", strings.Repeat("x", 600)), reg("b", strings.Repeat("x", 600)))))
	wantCategory(t, err, errdefs.ErrTooLarge)
	err = a.client.WriteTar(testCtx(t), "/d", strings.NewReader("this is not a tar archive, not at all, no"+strings.Repeat(" ", 600)))
	wantCategory(t, err, errdefs.ErrInvalid)
	err = a.client.WriteTar(testCtx(t), "/nope", bytes.NewReader(tarOf(t, reg("a", "x"))))
	wantCategory(t, err, errdefs.ErrNotFound)
}

// TestWriteFileXattrs: a write sets the user xattrs it names on the new
// file; stat and list report a regular file's and a directory's user
// xattrs, however they were set, and no others; an overwrite without
// xattrs leaves none (the file is replaced), a move keeps them; a name
// outside the user namespace, or xattrs past the bounds, are refused and
// nothing is written.
func TestWriteFileXattrs(t *testing.T) {
	a := startAgent(t)
	c, ctx := a.client, testCtx(t)
	x := map[string]string{"user.e2b.author": "mish", "user.e2b.purpose": "upload"}
	fi, err := c.WriteFileAs(ctx, "/m.txt", 0, strings.NewReader("m"), agent.Ownership{Xattrs: x})
	if err != nil {
		if errors.Is(err, unix.ENOTSUP) || strings.Contains(err.Error(), "not supported") {
			t.Fatalf("the test's file system has no user xattrs: %v", err)
		}
		t.Fatal(err)
	}
	if !maps.Equal(fi.Xattrs, x) {
		t.Fatalf("the write's answer: %v, want %v", fi.Xattrs, x)
	}
	if fi, err = c.Stat(ctx, "/m.txt"); err != nil || !maps.Equal(fi.Xattrs, x) {
		t.Fatalf("stat: %v %v", fi.Xattrs, err)
	}
	// Set from inside (as a sandbox process would), on a directory too;
	// a trusted.* name is not reported.
	if err := os.Mkdir(filepath.Join(a.root, "d"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Setxattr(filepath.Join(a.root, "d"), "user.e2b.tag", []byte("dir"), 0); err != nil {
		t.Fatal(err)
	}
	if err := unix.Setxattr(filepath.Join(a.root, "m.txt"), "trusted.hidden", []byte("x"), 0); err != nil {
		t.Fatal(err)
	}
	ents, err := c.List(ctx, "/")
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]map[string]string{}
	for _, e := range ents {
		got[e.Name] = e.Xattrs
	}
	if !maps.Equal(got["m.txt"], x) || !maps.Equal(got["d"], map[string]string{"user.e2b.tag": "dir"}) {
		t.Fatalf("list: %v", got)
	}
	if err := c.Move(ctx, "/m.txt", "/n.txt", false); err != nil {
		t.Fatal(err)
	}
	if fi, err = c.Stat(ctx, "/n.txt"); err != nil || !maps.Equal(fi.Xattrs, x) {
		t.Fatalf("after a move: %v %v", fi.Xattrs, err)
	}
	if fi, err = c.WriteFile(ctx, "/n.txt", 0, strings.NewReader("again")); err != nil || fi.Xattrs != nil {
		t.Fatalf("an overwrite without xattrs: %v %v", fi.Xattrs, err)
	}
	if fi, err = c.Stat(ctx, "/n.txt"); err != nil || fi.Xattrs != nil {
		t.Fatalf("stat after the overwrite: %v %v", fi.Xattrs, err)
	}
	big := map[string]string{}
	for i := range wire.MaxXattrs + 1 {
		big["user.k"+strconv.Itoa(i)] = "v"
	}
	for _, bad := range []map[string]string{
		{"trusted.x": "v"}, {"security.capability": "v"}, {"user.": "v"}, big,
		{"user.big": strings.Repeat("v", wire.MaxXattrBytes)},
	} {
		_, err := c.WriteFileAs(ctx, "/bad.txt", 0, strings.NewReader("x"), agent.Ownership{Xattrs: bad})
		wantCategory(t, err, errdefs.ErrInvalid)
		if _, err := os.Lstat(filepath.Join(a.root, "bad.txt")); !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("a refused write left a file: %v", err)
		}
	}
}
