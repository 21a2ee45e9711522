package image

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-containerregistry/pkg/compression"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"golang.org/x/sys/unix"

	"github.com/berth-sh/berth/internal/errdefs"
)

func newStore(tb testing.TB, opts ...Option) *Store {
	tb.Helper()
	requireRoot(tb)
	s, err := Open(filepath.Join(tb.TempDir(), "images"), testMap, opts...)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		if err := s.Close(); err != nil {
			tb.Errorf("close store: %v", err)
		}
	})
	return s
}

func layerFromTar(tb testing.TB, b []byte, opts ...tarball.LayerOption) v1.Layer {
	tb.Helper()
	l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil }, opts...)
	if err != nil {
		tb.Fatal(err)
	}
	return l
}

// testImage is two layers exercising every member kind: the bottom one
// (gzip) has files, dirs, a setuid binary, symlinks and a hardlink; the top
// one (zstd) deletes a file and a directory's content by whiteout and
// replaces a directory by an opaque one.
func testImage(tb testing.TB) v1.Image {
	tb.Helper()
	tool := reg("bin/tool", "#!/bin/sh\necho tool\n")
	tool.mode, tool.uid, tool.gid = 0o4755, 1000, 1000
	bottom := mkTar(tb,
		dir("bin/"), tool, dir("etc/"), reg("etc/hostname", "box\n"), hard("etc/hostlink", "etc/hostname"),
		sym("link", "etc/hostname"), dir("usr/share/doc/"), reg("usr/share/doc/a", "a"), reg("usr/share/doc/b", "b"),
		dir("opq/"), reg("opq/old1", "1"), reg("opq/old2", "2"), reg("gone", "bye"))
	top := mkTar(tb,
		reg(".wh.gone", ""), reg("usr/share/doc/.wh.a", ""),
		dir("opq/"), reg("opq/.wh..wh..opq", ""), reg("opq/new", "new"),
		reg("etc/motd", "hi\n"))
	img, err := mutate.AppendLayers(empty.Image,
		layerFromTar(tb, bottom),
		layerFromTar(tb, top, tarball.WithCompression(compression.ZStd), tarball.WithMediaType(types.OCILayerZStd)))
	if err != nil {
		tb.Fatal(err)
	}
	img, err = mutate.Config(img, v1.Config{
		Env: []string{"PATH=/usr/bin", "A=b"}, WorkingDir: "/srv", User: "1000:1000",
		Entrypoint: []string{"/bin/tool"}, Cmd: []string{"--flag"},
		ExposedPorts: map[string]struct{}{"8080/tcp": {}, "53/udp": {}}, StopSignal: "SIGINT",
	})
	if err != nil {
		tb.Fatal(err)
	}
	return img
}

func diffIDs(tb testing.TB, img v1.Image) []string {
	tb.Helper()
	cfg, err := img.ConfigFile()
	if err != nil {
		tb.Fatal(err)
	}
	var out []string
	for _, d := range cfg.RootFS.DiffIDs {
		out = append(out, d.String())
	}
	return out
}

func writeLayout(tb testing.TB, img v1.Image, ref string) string {
	tb.Helper()
	dir := filepath.Join(tb.TempDir(), "layout")
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		tb.Fatal(err)
	}
	if err := p.AppendImage(img, layout.WithAnnotations(map[string]string{annotationRefName: ref})); err != nil {
		tb.Fatal(err)
	}
	return dir
}

// checkTestImage asserts the unpacked layers of testImage and the merged
// view an overlay of them gives.
func checkTestImage(t *testing.T, s *Store, got *Image, img v1.Image) {
	t.Helper()
	want := diffIDs(t, img)
	if !slices.Equal(got.Layers, want) {
		t.Fatalf("layers = %v, want %v", got.Layers, want)
	}
	if !slices.Equal(got.Config.Entrypoint, []string{"/bin/tool"}) || !slices.Equal(got.Config.Cmd, []string{"--flag"}) ||
		!slices.Equal(got.Config.ExposedPorts, []string{"53/udp", "8080/tcp"}) || got.Config.StopSignal != "SIGINT" || got.Config.Workdir != "/srv" ||
		got.Config.User != "1000:1000" || !slices.Contains(got.Config.Env, "A=b") {
		t.Errorf("config = %+v", got.Config)
	}
	if got.Size <= 0 || got.Size != s.Size(want[0])+s.Size(want[1]) {
		t.Errorf("size = %d, layers %d + %d", got.Size, s.Size(want[0]), s.Size(want[1]))
	}
	bottom, top := s.LayerPath(want[0]), s.LayerPath(want[1])
	if readFile(t, filepath.Join(bottom, "etc/hostname")) != "box\n" {
		t.Error("bottom layer content wrong")
	}
	assertMode(t, filepath.Join(bottom, "bin/tool"), 0o4755)
	assertOwner(t, filepath.Join(bottom, "bin/tool"), 101000, 201000)
	assertOwner(t, filepath.Join(bottom, "etc/hostname"), 100000, 200000)
	assertOwner(t, bottom, 100000, 200000)
	if a, b := lstat(t, filepath.Join(bottom, "etc/hostname")), lstat(t, filepath.Join(bottom, "etc/hostlink")); a.Ino != b.Ino {
		t.Error("hardlink not preserved")
	}
	if l, _ := os.Readlink(filepath.Join(bottom, "link")); l != "etc/hostname" {
		t.Errorf("symlink -> %q", l)
	}
	if !isWhiteout(t, filepath.Join(top, "gone")) || !isWhiteout(t, filepath.Join(top, "usr/share/doc/a")) {
		t.Error("top layer lacks whiteout devices")
	}
	if xattr(filepath.Join(top, "opq"), opaqueXattr) != "y" {
		t.Error("top layer opq/ not opaque")
	}

	merged := mountOverlay(t, top, bottom)
	for _, p := range []string{"gone", "usr/share/doc/a", "opq/old1", "opq/old2"} {
		if exists(filepath.Join(merged, p)) {
			t.Errorf("merged view shows deleted %s", p)
		}
	}
	for p, c := range map[string]string{"usr/share/doc/b": "b", "opq/new": "new", "etc/motd": "hi\n", "etc/hostname": "box\n", "link": "box\n"} {
		if got := readFile(t, filepath.Join(merged, p)); got != c {
			t.Errorf("merged %s = %q, want %q", p, got, c)
		}
	}
}

func TestImportOCILayout(t *testing.T) {
	s := newStore(t)
	img := testImage(t)
	dir := writeLayout(t, img, "test:1")
	got, err := s.ImportOCILayout(context.Background(), dir, "test:1")
	if err != nil {
		t.Fatal(err)
	}
	checkTestImage(t, s, got, img)
	// Importing again reuses the layers.
	st := lstat(t, s.LayerPath(got.Layers[0]))
	again, err := s.ImportOCILayout(context.Background(), dir, "")
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(again.Layers, got.Layers) || lstat(t, s.LayerPath(got.Layers[0])).Ino != st.Ino {
		t.Error("second import did not reuse the layers")
	}
	assertNoScratch(t, s)
}

// assertNoScratch checks that nothing but the store's own empty scratch dir
// is left in tmp/.
func assertNoScratch(tb testing.TB, s *Store) {
	tb.Helper()
	ents, err := os.ReadDir(s.work)
	if err != nil {
		tb.Fatal(err)
	}
	if len(ents) != 0 {
		tb.Errorf("scratch dir not empty: %v", ents)
	}
}

func TestImportOCILayoutSelect(t *testing.T) {
	s := newStore(t)
	ctx := context.Background()
	a, err := random.Image(512, 1)
	if err != nil {
		t.Fatal(err)
	}
	b, err := random.Image(512, 2)
	if err != nil {
		t.Fatal(err)
	}
	dir := writeLayout(t, a, "a")
	p, err := layout.FromPath(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.AppendImage(b, layout.WithAnnotations(map[string]string{annotationRefName: "b"})); err != nil {
		t.Fatal(err)
	}
	if _, err := s.ImportOCILayout(ctx, dir, ""); !errors.Is(err, errdefs.ErrInvalid) {
		t.Errorf("ambiguous ref: err = %v, want ErrInvalid", err)
	}
	if _, err := s.ImportOCILayout(ctx, dir, "c"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("unknown ref: err = %v, want ErrNotFound", err)
	}
	got, err := s.ImportOCILayout(ctx, dir, "b")
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got.Layers, diffIDs(t, b)) {
		t.Error("ref b imported the wrong image")
	}
	da, _ := a.Digest()
	got, err = s.ImportOCILayout(ctx, dir, da.String())
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got.Layers, diffIDs(t, a)) {
		t.Error("ref by digest imported the wrong image")
	}

	// A multi-platform index: the host's platform is taken.
	other := "arm64"
	if runtime.GOARCH == "arm64" {
		other = "amd64"
	}
	idx := mutate.AppendManifests(empty.Index,
		mutate.IndexAddendum{Add: a, Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: other}}},
		mutate.IndexAddendum{Add: b, Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: runtime.GOARCH}}})
	mdir := filepath.Join(t.TempDir(), "multi")
	mp, err := layout.Write(mdir, empty.Index)
	if err != nil {
		t.Fatal(err)
	}
	if err := mp.AppendIndex(idx, layout.WithAnnotations(map[string]string{annotationRefName: "multi"})); err != nil {
		t.Fatal(err)
	}
	got, err = s.ImportOCILayout(ctx, mdir, "")
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got.Layers, diffIDs(t, b)) {
		t.Errorf("multi-platform index: imported %v, want the linux/%s image", got.Layers, runtime.GOARCH)
	}
}

func TestImportArchiveDocker(t *testing.T) {
	s := newStore(t)
	img := testImage(t)
	path := filepath.Join(t.TempDir(), "img.tar")
	tag, err := name.NewTag("example.com/test:1")
	if err != nil {
		t.Fatal(err)
	}
	if err := tarball.WriteToFile(path, tag, img); err != nil {
		t.Fatal(err)
	}
	got, err := s.ImportArchive(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	checkTestImage(t, s, got, img)
	assertNoScratch(t, s)

	// The same archive gzipped, into a fresh store.
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	if _, err := zw.Write(raw); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path+".gz", gz.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	s2 := newStore(t)
	got, err = s2.ImportArchive(context.Background(), path+".gz")
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got.Layers, diffIDs(t, img)) || !s2.HasLayer(got.Layers[1]) {
		t.Errorf("gzipped archive imported %v", got.Layers)
	}
}

// tarDir archives dir's regular files and dirs, as `tar -C dir -c .` would.
func tarDir(tb testing.TB, dir string) string {
	tb.Helper()
	out := filepath.Join(tb.TempDir(), "layout.tar")
	f, err := os.Create(out)
	if err != nil {
		tb.Fatal(err)
	}
	defer f.Close()
	tw := tar.NewWriter(f)
	err = filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		hdr, err := tar.FileInfoHeader(fi, "")
		if err != nil {
			return err
		}
		hdr.Name = filepath.ToSlash(rel)
		if fi.IsDir() {
			hdr.Name += "/"
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		if fi.Mode().IsRegular() {
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			_, err = tw.Write(b)
			return err
		}
		return nil
	})
	if err != nil {
		tb.Fatal(err)
	}
	if err := tw.Close(); err != nil {
		tb.Fatal(err)
	}
	return out
}

func TestImportArchiveOCILayout(t *testing.T) {
	s := newStore(t)
	img := testImage(t)
	got, err := s.ImportArchive(context.Background(), tarDir(t, writeLayout(t, img, "x")))
	if err != nil {
		t.Fatal(err)
	}
	checkTestImage(t, s, got, img)
	assertNoScratch(t, s)

	junk := filepath.Join(t.TempDir(), "junk.tar")
	if err := os.WriteFile(junk, mkTar(t, reg("hello", "x")), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := s.ImportArchive(context.Background(), junk); !errors.Is(err, errdefs.ErrInvalid) {
		t.Errorf("tar that is no image: err = %v, want ErrInvalid", err)
	}
}

func TestImportDigestMismatch(t *testing.T) {
	ctx := context.Background()
	t.Run("layer blob", func(t *testing.T) {
		s := newStore(t)
		img := testImage(t)
		dir := writeLayout(t, img, "x")
		layers, _ := img.Layers()
		d, _ := layers[0].Digest()
		// Valid gzip tar, wrong bytes for its name.
		other, _ := layerFromTar(t, mkTar(t, reg("evil", "x"))).Compressed()
		b, _ := io.ReadAll(other)
		if err := os.WriteFile(filepath.Join(dir, "blobs", "sha256", d.Hex), b, 0o644); err != nil {
			t.Fatal(err)
		}
		_, err := s.ImportOCILayout(ctx, dir, "")
		if !errors.Is(err, errdefs.ErrInvalid) || !strings.Contains(err.Error(), "digest mismatch") {
			t.Errorf("err = %v, want digest mismatch", err)
		}
		if s.HasLayer(diffIDs(t, img)[0]) {
			t.Error("corrupt layer was stored")
		}
		assertNoScratch(t, s)
	})
	wrongDiffID := func(t *testing.T) v1.Image {
		img := testImage(t)
		cfg, err := img.ConfigFile()
		if err != nil {
			t.Fatal(err)
		}
		cfg = cfg.DeepCopy()
		cfg.RootFS.DiffIDs[0] = v1.Hash{Algorithm: "sha256", Hex: strings.Repeat("ab", 32)}
		img, err = mutate.ConfigFile(img, cfg)
		if err != nil {
			t.Fatal(err)
		}
		return img
	}
	t.Run("diffID layout", func(t *testing.T) {
		s := newStore(t)
		_, err := s.ImportOCILayout(ctx, writeLayout(t, wrongDiffID(t), "x"), "")
		if !errors.Is(err, errdefs.ErrInvalid) || !strings.Contains(err.Error(), "diffID mismatch") {
			t.Errorf("err = %v, want diffID mismatch", err)
		}
		if s.HasLayer(strings.Repeat("ab", 32)) {
			t.Error("layer stored under the wrong id")
		}
	})
	t.Run("diffID docker archive", func(t *testing.T) {
		s := newStore(t)
		path := filepath.Join(t.TempDir(), "img.tar")
		if err := tarball.WriteToFile(path, name.MustParseReference("x:1").(name.Tag), wrongDiffID(t)); err != nil {
			t.Fatal(err)
		}
		_, err := s.ImportArchive(ctx, path)
		if !errors.Is(err, errdefs.ErrInvalid) || !strings.Contains(err.Error(), "diffID mismatch") {
			t.Errorf("err = %v, want ErrInvalid", err)
		}
		if s.HasLayer(strings.Repeat("ab", 32)) {
			t.Error("layer stored under the wrong id")
		}
	})
}

func TestPull(t *testing.T) {
	s := newStore(t)
	srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	t.Cleanup(srv.Close)
	host := strings.TrimPrefix(srv.URL, "http://")
	if !strings.HasPrefix(host, "127.0.0.1:") {
		t.Fatalf("registry not on loopback: %s", srv.URL)
	}
	img := testImage(t)
	ref := host + "/berth/test:1"
	r, err := name.ParseReference(ref, name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(r, img); err != nil {
		t.Fatal(err)
	}
	got, err := s.Pull(context.Background(), ref, true)
	if err != nil {
		t.Fatal(err)
	}
	checkTestImage(t, s, got, img)

	if _, err := s.Pull(context.Background(), host+"/berth/missing:1", true); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("missing image: err = %v, want ErrNotFound", err)
	}
	if _, err := s.Pull(context.Background(), "Not A Ref!", true); !errors.Is(err, errdefs.ErrInvalid) {
		t.Errorf("bad ref: err = %v, want ErrInvalid", err)
	}
}

func TestConcurrentImports(t *testing.T) {
	s := newStore(t)
	// A second Store on the same root stands in for a second process.
	s2, err := Open(s.root, testMap)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s2.Close() })
	base := layerFromTar(t, mkTar(t, dir("shared/"), reg("shared/f", strings.Repeat("x", 1<<16))))
	var dirs []string
	for i := range 6 {
		img, err := mutate.AppendLayers(empty.Image, base, layerFromTar(t, mkTar(t, reg(fmt.Sprintf("own%d", i), "y"))))
		if err != nil {
			t.Fatal(err)
		}
		dirs = append(dirs, writeLayout(t, img, "x"))
	}
	var wg sync.WaitGroup
	errs := make([]error, len(dirs))
	imgs := make([]*Image, len(dirs))
	for i, d := range dirs {
		wg.Go(func() {
			st := s
			if i%2 == 1 {
				st = s2
			}
			imgs[i], errs[i] = st.ImportOCILayout(context.Background(), d, "")
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("import %d: %v", i, err)
		}
		if imgs[i].Layers[0] != imgs[0].Layers[0] {
			t.Errorf("import %d has base %s, want %s", i, imgs[i].Layers[0], imgs[0].Layers[0])
		}
	}
	if got := readFile(t, filepath.Join(s.LayerPath(imgs[0].Layers[0]), "shared/f")); len(got) != 1<<16 {
		t.Errorf("shared layer file has %d bytes", len(got))
	}
	ents, _ := os.ReadDir(filepath.Join(s.root, "layers"))
	if len(ents) != 7 {
		t.Errorf("%d layer dirs, want 7", len(ents))
	}
	assertNoScratch(t, s)
	assertNoScratch(t, s2)
}

// upperDir builds what a sandbox's overlay upper dir looks like after it
// ran: shifted owners, a whiteout, an opaque dir, links, xattrs.
func upperDir(tb testing.TB) string {
	tb.Helper()
	d := filepath.Join(tb.TempDir(), "upper")
	must := func(err error) {
		tb.Helper()
		if err != nil {
			tb.Fatal(err)
		}
	}
	must(os.MkdirAll(filepath.Join(d, "work/sub"), 0o755))
	must(os.WriteFile(filepath.Join(d, "work/main.py"), []byte("print(1)\n"), 0o644))
	must(os.WriteFile(filepath.Join(d, "work/sub/run"), []byte("#!/bin/sh\n"), 0o755))
	must(os.Link(filepath.Join(d, "work/main.py"), filepath.Join(d, "work/alias.py")))
	must(os.Symlink("/etc/passwd", filepath.Join(d, "work/abs")))
	must(unix.Mknod(filepath.Join(d, "gone"), unix.S_IFCHR, 0))
	must(os.MkdirAll(filepath.Join(d, "opq"), 0o755))
	must(unix.Setxattr(filepath.Join(d, "opq"), opaqueXattr, []byte("y"), 0))
	must(os.WriteFile(filepath.Join(d, "opq/fresh"), []byte("fresh"), 0o600))
	must(unix.Setxattr(filepath.Join(d, "work/main.py"), "user.note", []byte("hi"), 0))
	must(unix.Mkfifo(filepath.Join(d, "fifo"), 0o644))
	must(os.WriteFile(filepath.Join(d, "suid"), []byte("x"), 0o755))
	must(filepath.Walk(d, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		uid, gid := 100000, 200000
		if strings.HasPrefix(fi.Name(), "main") || fi.Name() == "alias.py" {
			uid, gid = 101000, 201000
		}
		if err := os.Lchown(p, uid, gid); err != nil {
			return err
		}
		if fi.Name() == "suid" {
			return unix.Chmod(p, 0o4755) // chown cleared it
		}
		return nil
	}))
	// Fixed mtimes, deepest first, so a copy can match exactly.
	var paths []string
	must(filepath.Walk(d, func(p string, _ os.FileInfo, err error) error { paths = append(paths, p); return err }))
	for i := len(paths) - 1; i >= 0; i-- {
		ts := []unix.Timespec{unix.NsecToTimespec(testTime.UnixNano()), unix.NsecToTimespec(testTime.UnixNano() + 123)}
		must(unix.UtimesNanoAt(unix.AT_FDCWD, paths[i], ts, unix.AT_SYMLINK_NOFOLLOW))
	}
	return d
}

func TestCommitDir(t *testing.T) {
	s := newStore(t)
	ctx := context.Background()
	base := layerFromTar(t, mkTar(t, reg("gone", "old"), dir("opq/"), reg("opq/stale", "s"), reg("keep", "k")))
	img, err := mutate.AppendLayers(empty.Image, base)
	if err != nil {
		t.Fatal(err)
	}
	bi, err := s.ImportOCILayout(ctx, writeLayout(t, img, "base"), "")
	if err != nil {
		t.Fatal(err)
	}

	up := upperDir(t)
	id, size, err := s.CommitDir(ctx, up)
	if err != nil {
		t.Fatal(err)
	}
	if !s.HasLayer(id) || size != s.Size(id) || size != int64(len("print(1)\n")+len("#!/bin/sh\n")+len("fresh")+1) {
		t.Errorf("commit %s: size %d, Size %d", id, size, s.Size(id))
	}
	// Deterministic: the same tree, again and built afresh, gives the same id.
	id2, _, err := s.CommitDir(ctx, up)
	if err != nil {
		t.Fatal(err)
	}
	id3, _, err := s.CommitDir(ctx, upperDir(t))
	if err != nil {
		t.Fatal(err)
	}
	if id2 != id || id3 != id {
		t.Errorf("ids differ for equal trees: %s %s %s", id, id2, id3)
	}
	if err := os.WriteFile(filepath.Join(up, "work/main.py"), []byte("print(2)\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if id4, _, err := s.CommitDir(ctx, up); err != nil || id4 == id {
		t.Errorf("changed tree: id %s, err %v; want a new id", id4, err)
	}

	l := s.LayerPath(id)
	if !isWhiteout(t, filepath.Join(l, "gone")) || xattr(filepath.Join(l, "opq"), opaqueXattr) != "y" {
		t.Error("committed layer lost whiteout or opaque marker")
	}
	if exists(filepath.Join(l, "fifo")) {
		t.Error("fifo committed")
	}
	assertOwner(t, filepath.Join(l, "work/main.py"), 101000, 201000)
	assertOwner(t, filepath.Join(l, "work/sub/run"), 100000, 200000)
	assertMode(t, filepath.Join(l, "suid"), 0o4755)
	assertMode(t, filepath.Join(l, "opq/fresh"), 0o600)
	if xattr(filepath.Join(l, "work/main.py"), "user.note") != "hi" {
		t.Error("user xattr lost")
	}
	if a, b := lstat(t, filepath.Join(l, "work/main.py")), lstat(t, filepath.Join(l, "work/alias.py")); a.Ino != b.Ino {
		t.Error("hardlink lost")
	}
	if st := lstat(t, filepath.Join(l, "work/main.py")); st.Mtim.Nsec != 123 {
		t.Errorf("mtime nsec %d, want 123", st.Mtim.Nsec)
	}

	merged := mountOverlay(t, l, s.LayerPath(bi.Layers[0]))
	if exists(filepath.Join(merged, "gone")) || exists(filepath.Join(merged, "opq/stale")) {
		t.Error("merged view shows whited-out files")
	}
	if readFile(t, filepath.Join(merged, "keep")) != "k" || readFile(t, filepath.Join(merged, "opq/fresh")) != "fresh" {
		t.Error("merged view lacks files")
	}
	if l, _ := os.Readlink(filepath.Join(merged, "work/abs")); l != "/etc/passwd" {
		t.Errorf("symlink -> %q", l)
	}
	assertNoScratch(t, s)

	if _, _, err := s.CommitDir(ctx, filepath.Join(t.TempDir(), "none")); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("missing dir: err = %v, want ErrNotFound", err)
	}
}

func TestGC(t *testing.T) {
	s := newStore(t)
	ctx := context.Background()
	shared := layerFromTar(t, mkTar(t, reg("s", "s")))
	mk := func(extra string) *Image {
		img, err := mutate.AppendLayers(empty.Image, shared, layerFromTar(t, mkTar(t, reg(extra, extra))))
		if err != nil {
			t.Fatal(err)
		}
		got, err := s.ImportOCILayout(ctx, writeLayout(t, img, "x"), "")
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
	a, b := mk("a"), mk("b")
	keep := map[string]bool{a.Layers[0]: true, a.Layers[1]: true}
	removed, err := s.GC(ctx, keep)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(removed, []string{b.Layers[1]}) {
		t.Errorf("removed %v, want only %s", removed, b.Layers[1])
	}
	if !s.HasLayer(a.Layers[0]) || !s.HasLayer(a.Layers[1]) || s.HasLayer(b.Layers[1]) {
		t.Error("GC kept or removed the wrong layers")
	}
	if s.Size(b.Layers[1]) != -1 {
		t.Error("Size of a removed layer is not -1")
	}
	removed, err = s.GC(ctx, nil)
	if err != nil || len(removed) != 2 {
		t.Errorf("GC(nil) removed %v, err %v; want both remaining layers", removed, err)
	}
	assertNoScratch(t, s)
}

func TestBuiltin(t *testing.T) {
	osr := filepath.Join(t.TempDir(), "os-release")
	if err := os.WriteFile(osr, []byte("ID=testos\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	alt := filepath.Join(t.TempDir(), "alternatives")
	if err := os.MkdirAll(alt, 0o755); err != nil {
		t.Fatal(err)
	}
	// Only links into /usr come along; not a link elsewhere, through
	// "..", relative, nor a file.
	for name, target := range map[string]string{"which": "/usr/bin/which.debianutils", "evil": "/root/.ssh/id_rsa",
		"up": "/usr/../etc/shadow", "rel": "../x", "awk": "/usr/bin/mawk"} {
		if err := os.Symlink(target, filepath.Join(alt, name)); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(alt, "README"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	s := newStore(t, WithOSRelease(osr), WithAlternatives(alt))
	ctx := context.Background()
	img, err := s.Builtin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(img.Layers) != 1 || img.Config.Workdir != "/workspace" || !slices.Contains(img.Config.Env, "HOME=/root") ||
		!slices.Contains(img.Config.Env, "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin") {
		t.Fatalf("builtin image = %+v", img)
	}
	l := s.LayerPath(img.Layers[0])
	for d, mode := range map[string]uint32{"tmp": 0o1777, "var/tmp": 0o1777, "root": 0o700, "usr": 0o755, ".berth": 0o755,
		"workspace": 0o755, "proc": 0o555, "sys": 0o555, "dev": 0o755, "run": 0o755, "home": 0o755, "etc": 0o755} {
		assertMode(t, filepath.Join(l, d), mode)
		assertOwner(t, filepath.Join(l, d), 100000, 200000)
	}
	for link, target := range map[string]string{"bin": "usr/bin", "lib": "usr/lib", "lib64": "usr/lib64", "sbin": "usr/sbin"} {
		if got, _ := os.Readlink(filepath.Join(l, link)); got != target {
			t.Errorf("%s -> %q, want %q", link, got, target)
		}
	}
	if ents, _ := os.ReadDir(filepath.Join(l, "usr")); len(ents) != 0 {
		t.Error("/usr is not an empty mountpoint")
	}
	var etc []string
	ents, _ := os.ReadDir(filepath.Join(l, "etc"))
	for _, e := range ents {
		etc = append(etc, e.Name())
		assertOwner(t, filepath.Join(l, "etc", e.Name()), 100000, 200000)
	}
	if want := []string{"alternatives", "group", "hosts", "nsswitch.conf", "os-release", "passwd", "resolv.conf", "shells"}; !slices.Equal(etc, want) {
		t.Errorf("/etc = %v, want %v", etc, want)
	}
	var links []string
	ents, _ = os.ReadDir(filepath.Join(l, "etc/alternatives"))
	for _, e := range ents {
		target, _ := os.Readlink(filepath.Join(l, "etc/alternatives", e.Name()))
		links = append(links, e.Name()+"->"+target)
	}
	if want := []string{"awk->/usr/bin/mawk", "which->/usr/bin/which.debianutils"}; !slices.Equal(links, want) {
		t.Errorf("/etc/alternatives = %v, want %v", links, want)
	}
	if !strings.HasPrefix(readFile(t, filepath.Join(l, "etc/passwd")), "root:x:0:0:root:/root:/bin/sh\n") ||
		!strings.Contains(readFile(t, filepath.Join(l, "etc/passwd")), "nobody:x:65534:65534:") {
		t.Error("bad /etc/passwd")
	}
	if readFile(t, filepath.Join(l, "etc/os-release")) != "ID=testos\n" || readFile(t, filepath.Join(l, "etc/resolv.conf")) != "" {
		t.Error("bad os-release or resolv.conf")
	}
	again, err := s.Builtin(ctx)
	if err != nil || again.Layers[0] != img.Layers[0] {
		t.Errorf("second Builtin: %v, %v; want the same layer", again, err)
	}
	// Different host content, different layer.
	s2 := newStore(t, WithOSRelease(filepath.Join(t.TempDir(), "missing")), WithAlternatives(alt))
	other, err := s2.Builtin(ctx)
	if err != nil || other.Layers[0] == img.Layers[0] || exists(filepath.Join(s2.LayerPath(other.Layers[0]), "etc/os-release")) {
		t.Errorf("builtin without os-release: %v, %v", other, err)
	}
}

func TestOpenSweepsStaleScratch(t *testing.T) {
	s := newStore(t)
	tmp := filepath.Join(s.root, "tmp")
	// Left by a crashed process: lock file nobody holds, dir with an unpack.
	if err := os.MkdirAll(filepath.Join(tmp, "s-dead", "layer-1", "fs"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(tmp, "s-dead.lock"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	s2, err := Open(s.root, testMap)
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	if exists(filepath.Join(tmp, "s-dead")) || exists(filepath.Join(tmp, "s-dead.lock")) {
		t.Error("stale scratch dir not swept")
	}
	if !exists(s.work) {
		t.Error("a live store's scratch dir was swept")
	}
}

func TestLayerIDs(t *testing.T) {
	s := newStore(t)
	for _, id := range []string{"", "../../etc", "sha256:../x", "sha256:" + strings.Repeat("A", 64), "sha512:" + strings.Repeat("a", 64)} {
		if s.LayerPath(id) != "" || s.HasLayer(id) || s.Size(id) != -1 {
			t.Errorf("id %q accepted", id)
		}
	}
	good := "sha256:" + strings.Repeat("a", 64)
	if p := s.LayerPath(good); p != filepath.Join(s.root, "layers", strings.Repeat("a", 64), "fs") {
		t.Errorf("LayerPath = %s", p)
	}
}

func TestImportLimits(t *testing.T) {
	ctx := context.Background()
	img := testImage(t)
	dir := writeLayout(t, img, "x")
	s := newStore(t, WithMaxLayerBytes(8))
	if _, err := s.ImportOCILayout(ctx, dir, ""); !errors.Is(err, errdefs.ErrTooLarge) {
		t.Errorf("byte cap: err = %v, want ErrTooLarge", err)
	}
	s = newStore(t, WithMaxLayerEntries(3))
	if _, err := s.ImportOCILayout(ctx, dir, ""); !errors.Is(err, errdefs.ErrTooLarge) {
		t.Errorf("entry cap: err = %v, want ErrTooLarge", err)
	}
	for _, id := range diffIDs(t, img) {
		if s.HasLayer(id) {
			t.Errorf("layer %s stored despite the cap", id)
		}
	}
	assertNoScratch(t, s)
	if _, err := s.ImportOCILayout(ctx, filepath.Join(t.TempDir(), "none"), ""); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("missing layout: err = %v, want ErrNotFound", err)
	}
}
