package image

import (
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/berth-sh/berth/internal/errdefs"
)

// gnuTarLayer archives a small tree with the real tar binary (GNU tar's
// default blocking factor 20: the archive is padded with zeros after its
// end marker to a multiple of 10240 bytes) and returns the archive.
func gnuTarLayer(tb testing.TB) []byte {
	tb.Helper()
	bin, err := exec.LookPath("tar")
	if err != nil {
		tb.Fatal("tar binary not found: install GNU tar (scripts/install-deps.sh)")
	}
	if out, err := exec.Command(bin, "--version").Output(); err != nil || !strings.Contains(string(out), "GNU tar") {
		tb.Fatalf("%s is not GNU tar (%v): %s", bin, err, out)
	}
	src := tb.TempDir()
	if err := os.MkdirAll(filepath.Join(src, "app"), 0o755); err != nil {
		tb.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(src, "app", "hello"), []byte("made by GNU tar\n"), 0o644); err != nil {
		tb.Fatal(err)
	}
	out := filepath.Join(tb.TempDir(), "layer.tar")
	if b, err := exec.Command(bin, "-C", src, "--owner=0", "--group=0", "-cf", out, "app").CombinedOutput(); err != nil {
		tb.Fatalf("tar: %v: %s", err, b)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		tb.Fatal(err)
	}
	// One header, one data block, the directory's header and the two
	// zero blocks of the end marker make 2560 bytes; the rest is padding
	// the Go tar reader never reads.
	if len(b)%10240 != 0 || len(b) < 10240 {
		tb.Fatalf("GNU tar wrote %d bytes, want a multiple of its 10240-byte record", len(b))
	}
	return b
}

func gnuTarImage(tb testing.TB, layer []byte, opts ...tarball.LayerOption) v1.Image {
	tb.Helper()
	img, err := mutate.AppendLayers(empty.Image, layerFromTar(tb, layer, opts...))
	if err != nil {
		tb.Fatal(err)
	}
	return img
}

// TestImportGNUTarPadding imports a layer GNU tar made, with the padding
// after its end marker, from every kind of source: the diffID covers the
// whole stream, padding included, as every other tool computes it.
func TestImportGNUTarPadding(t *testing.T) {
	ctx := context.Background()
	layer := gnuTarLayer(t)
	check := func(t *testing.T, s *Store, got *Image, img v1.Image) {
		t.Helper()
		want := diffIDs(t, img)
		if len(got.Layers) != 1 || got.Layers[0] != want[0] {
			t.Fatalf("layers = %v, want %v", got.Layers, want)
		}
		if c := readFile(t, filepath.Join(s.LayerPath(want[0]), "app/hello")); c != "made by GNU tar\n" {
			t.Errorf("app/hello = %q", c)
		}
		assertNoScratch(t, s)
	}
	t.Run("layout uncompressed", func(t *testing.T) {
		s := newStore(t)
		img := gnuTarImage(t, layer)
		got, err := s.ImportOCILayout(ctx, writeLayout(t, img, "x"), "")
		if err != nil {
			t.Fatal(err)
		}
		check(t, s, got, img)
	})
	t.Run("layout gzip", func(t *testing.T) {
		s := newStore(t)
		var gz bytes.Buffer
		zw := gzip.NewWriter(&gz)
		if _, err := zw.Write(layer); err != nil {
			t.Fatal(err)
		}
		if err := zw.Close(); err != nil {
			t.Fatal(err)
		}
		img := gnuTarImage(t, gz.Bytes())
		got, err := s.ImportOCILayout(ctx, writeLayout(t, img, "x"), "")
		if err != nil {
			t.Fatal(err)
		}
		check(t, s, got, img)
	})
	t.Run("docker archive", func(t *testing.T) {
		s := newStore(t)
		img := gnuTarImage(t, layer)
		path := filepath.Join(t.TempDir(), "img.tar")
		if err := tarball.WriteToFile(path, name.MustParseReference("x:1").(name.Tag), img); err != nil {
			t.Fatal(err)
		}
		got, err := s.ImportArchive(ctx, path)
		if err != nil {
			t.Fatal(err)
		}
		check(t, s, got, img)
	})
	t.Run("padding changed", func(t *testing.T) {
		// The padding is hashed: a byte flipped in it is a different
		// layer, and the error names the layer and both digests.
		s := newStore(t)
		img := gnuTarImage(t, layer)
		want := diffIDs(t, img)[0]
		bad := bytes.Clone(layer)
		bad[len(bad)-1] = 1
		badImg := gnuTarImage(t, bad)
		cfg, err := badImg.ConfigFile()
		if err != nil {
			t.Fatal(err)
		}
		got := cfg.RootFS.DiffIDs[0].String()
		cfg = cfg.DeepCopy()
		cfg.RootFS.DiffIDs[0], _ = v1.NewHash(want)
		if badImg, err = mutate.ConfigFile(badImg, cfg); err != nil {
			t.Fatal(err)
		}
		_, err = s.ImportOCILayout(ctx, writeLayout(t, badImg, "x"), "")
		if !errors.Is(err, errdefs.ErrInvalid) || !strings.Contains(err.Error(), "diffID mismatch") ||
			!strings.Contains(err.Error(), "layer 1 of 1") || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), got) {
			t.Errorf("err = %v, want a diffID mismatch naming layer 1 of 1, %s and %s", err, want, got)
		}
		if s.HasLayer(want) || s.HasLayer(got) {
			t.Error("corrupt layer was stored")
		}
		assertNoScratch(t, s)
	})
}

// TestImportProgress checks the reports of an import: each layer starts
// and ends, its last report has read the whole blob, and a second import
// reports the layers as cached.
func TestImportProgress(t *testing.T) {
	s := newStore(t)
	img := testImage(t)
	dir := writeLayout(t, img, "x")
	m, err := img.Manifest()
	if err != nil {
		t.Fatal(err)
	}
	var got []Progress
	ctx := WithProgress(context.Background(), func(p Progress) { got = append(got, p) })
	if _, err := s.ImportOCILayout(ctx, dir, ""); err != nil {
		t.Fatal(err)
	}
	done := map[int]Progress{}
	for _, p := range got {
		if p.Layers != 2 || p.Layer < 1 || p.Layer > 2 {
			t.Fatalf("report %+v: want layer 1 or 2 of 2", p)
		}
		if p.Done {
			done[p.Layer] = p
		}
	}
	for i, l := range m.Layers {
		p, ok := done[i+1]
		if !ok || p.Cached || p.Bytes != l.Size || p.Size != l.Size || p.Digest != diffIDs(t, img)[i] {
			t.Errorf("layer %d: last report %+v (found %v), want %d of %d bytes read", i+1, p, ok, l.Size, l.Size)
		}
	}
	got = nil
	if _, err := s.ImportOCILayout(ctx, dir, ""); err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || !got[0].Cached || !got[1].Cached {
		t.Errorf("second import reported %+v, want two cached layers", got)
	}
}
