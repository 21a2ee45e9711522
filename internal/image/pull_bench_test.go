package image

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/berth-sh/berth/internal/testenv/regtest"
)

// BenchmarkPullRegistry pulls an image like berth bench's images
// measurement (one uncompressed layer of 1 MiB files of random bytes) from
// the test registry into a new store at each iteration, and breaks the
// pull into its parts: "fetch" reads the blob over TLS to nowhere,
// "fetch-ggcr" reads it as go-containerregistry does (HTTP/2, hashed),
// "extract" unpacks the tar from memory (no network, no digests) and syncs,
// "pull" is Store.Pull. What a round unpacks stays until the benchmark
// ends (see extract). BERTH_PULL_BENCH_MIB sets the layer's size
// (default 256), BERTH_PULL_BENCH_LOG=1 prints the store's log (each
// layer's time and its syncfs's); -cpuprofile shows where each part's time goes. It needs
// root and the registry of scripts/install-registry.sh.
func BenchmarkPullRegistry(b *testing.B) {
	mib := 256
	if v := os.Getenv("BERTH_PULL_BENCH_MIB"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			b.Fatalf("BERTH_PULL_BENCH_MIB=%q", v)
		}
		mib = n
	}
	tarBytes := benchLayerTar(b, mib)
	layer := static.NewLayer(tarBytes, types.OCIUncompressedLayer)
	reg := regtest.Start(b, regtest.Basic)
	img, err := mutate.AppendLayers(empty.Image, layer)
	if err != nil {
		b.Fatal(err)
	}
	ref := reg.Addr + "/bench/pull:v1"
	r, err := name.ParseReference(ref)
	if err != nil {
		b.Fatal(err)
	}
	basic := authn.FromConfig(authn.AuthConfig{Username: reg.User, Password: reg.Password})
	if err := remote.Write(r, img, remote.WithTransport(reg.Transport()), remote.WithAuth(basic)); err != nil {
		b.Fatal(err)
	}
	certs := filepath.Join(b.TempDir(), "certs.d")
	if err := os.MkdirAll(filepath.Join(certs, reg.Addr), 0o755); err != nil {
		b.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(certs, reg.Addr, "ca.crt"), reg.CAPEM, 0o644); err != nil {
		b.Fatal(err)
	}
	auth, _ := json.Marshal(map[string]any{"auths": map[string]any{
		reg.Addr: map[string]string{"auth": base64.StdEncoding.EncodeToString([]byte(reg.User + ":" + reg.Password))}}})
	creds, err := ParseCredentials(auth)
	if err != nil {
		b.Fatal(err)
	}
	log := slog.New(slog.DiscardHandler)
	if os.Getenv("BERTH_PULL_BENCH_LOG") != "" {
		log = slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	open := func(b *testing.B) *Store {
		s, err := Open(b.TempDir(), testMap, WithRegistryCerts(certs), WithKeychain(creds), WithLogger(log))
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { s.Close() })
		return s
	}
	digest, err := layer.Digest()
	if err != nil {
		b.Fatal(err)
	}

	// As go-containerregistry reads a blob: over HTTP/2, hashed.
	b.Run("fetch-ggcr", func(b *testing.B) {
		s := open(b)
		b.SetBytes(int64(len(tarBytes)))
		for b.Loop() {
			opts, _, err := s.remoteOptions(context.Background(), r)
			if err != nil {
				b.Fatal(err)
			}
			l, err := remote.Layer(r.Context().Digest(digest.String()), opts...)
			if err != nil {
				b.Fatal(err)
			}
			rc, err := l.Compressed()
			if err != nil {
				b.Fatal(err)
			}
			if _, err := io.Copy(io.Discard, rc); err != nil {
				b.Fatal(err)
			}
			rc.Close()
		}
	})
	// As Pull reads a blob: over HTTP/1.1, not hashed.
	b.Run("fetch", func(b *testing.B) {
		s := open(b)
		b.SetBytes(int64(len(tarBytes)))
		buf := make([]byte, streamChunk)
		for b.Loop() {
			f, err := s.blobFetcher(context.Background(), r)
			if err != nil {
				b.Fatal(err)
			}
			rc, err := f.open(context.Background(), digest, int64(len(tarBytes)))
			if err != nil {
				b.Fatal(err)
			}
			if _, err := io.CopyBuffer(io.Discard, struct{ io.Reader }{rc}, buf); err != nil {
				b.Fatal(err)
			}
			rc.Close()
		}
	})
	b.Run("extract", func(b *testing.B) {
		s := open(b)
		b.SetBytes(int64(len(tarBytes)))
		n := 0
		dir := filepath.Join(s.work, "x0")
		for b.Loop() {
			if err := os.Mkdir(dir, 0o755); err != nil {
				b.Fatal(err)
			}
			if _, err := extractTar(context.Background(), bytes.NewReader(tarBytes), dir, testMap, extractLimits{maxBytes: defaultMaxB, maxEntries: defaultMaxN}, nil); err != nil {
				b.Fatal(err)
			}
			if err := syncFS(dir); err != nil {
				b.Fatal(err)
			}
			// Removed at the end only: on ext4 without a journal, new
			// inodes skip those deleted in the last 30 s, one by one
			// (find_inode_bit's recently_deleted), which would make each
			// round slower than the last.
			b.StopTimer()
			n++
			dir = filepath.Join(s.work, fmt.Sprint("x", n))
			b.StartTimer()
		}
	})
	b.Run("pull", func(b *testing.B) {
		b.SetBytes(int64(len(tarBytes)))
		for b.Loop() {
			b.StopTimer()
			s := open(b)
			b.StartTimer()
			got, err := s.Pull(context.Background(), ref, false)
			if err != nil {
				b.Fatal(err)
			}
			if len(got.Layers) != 1 || !s.HasLayer(got.Layers[0]) {
				b.Fatalf("pulled %+v", got)
			}
		}
	})
}

// benchLayerTar is a tar of mib files of 1 MiB of random bytes.
func benchLayerTar(tb testing.TB, mib int) []byte {
	rng := rand.NewChaCha8([32]byte{'p', 'u', 'l', 'l'})
	var buf bytes.Buffer
	buf.Grow((mib + 1) << 20)
	tw := tar.NewWriter(&buf)
	if err := tw.WriteHeader(&tar.Header{Name: "base/", Typeflag: tar.TypeDir, Mode: 0o755}); err != nil {
		tb.Fatal(err)
	}
	data := make([]byte, 1<<20)
	for i := range mib {
		rng.Read(data)
		if err := tw.WriteHeader(&tar.Header{Name: fmt.Sprintf("base/f%05d", i), Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(len(data))}); err != nil {
			tb.Fatal(err)
		}
		if _, err := tw.Write(data); err != nil {
			tb.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		tb.Fatal(err)
	}
	return buf.Bytes()
}
