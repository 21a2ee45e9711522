package image

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/berth-sh/berth/internal/errdefs"
)

// A pull reads each layer blob once, and both of its digests must hold
// before the layer is stored: an uncompressed blob (its own tar, hashed
// once for both) and a gzip one, served right, then with a byte changed,
// cut short or with a byte more than the manifest says.
func TestPullServedBlobs(t *testing.T) {
	plain := static.NewLayer(mkTar(t, dir("p/"), reg("p/data", strings.Repeat("plain ", 5000))), types.OCIUncompressedLayer)
	gz := layerFromTar(t, mkTar(t, dir("g/"), reg("g/data", strings.Repeat("gzip ", 5000))))
	img, err := mutate.AppendLayers(empty.Image, plain, gz)
	if err != nil {
		t.Fatal(err)
	}
	// tamper changes the blob a GET of digest serves (nil: as stored).
	var tamper atomic.Pointer[func(v1.Hash, []byte) []byte]
	reg := registry.New(registry.Logger(log.New(io.Discard, "", 0)))
	var mu sync.Mutex
	gets := map[string]int{} // blob GETs by digest
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		i := strings.Index(r.URL.Path, "/blobs/sha256:")
		f := tamper.Load()
		if r.Method != http.MethodGet || i < 0 {
			reg.ServeHTTP(w, r)
			return
		}
		mu.Lock()
		gets[r.URL.Path[i+len("/blobs/"):]]++
		mu.Unlock()
		if f == nil {
			reg.ServeHTTP(w, r)
			return
		}
		rec := httptest.NewRecorder()
		reg.ServeHTTP(rec, r)
		h, err := v1.NewHash(r.URL.Path[i+len("/blobs/"):])
		if err != nil {
			t.Errorf("blob path %s: %v", r.URL.Path, err)
		}
		body := (*f)(h, rec.Body.Bytes())
		w.Header().Set("Content-Length", strconv.Itoa(len(body)))
		w.WriteHeader(rec.Code)
		w.Write(body)
	}))
	t.Cleanup(srv.Close)
	ref := strings.TrimPrefix(srv.URL, "http://") + "/berth/blobs:1"
	r, err := name.ParseReference(ref, name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(r, img); err != nil {
		t.Fatal(err)
	}
	ids := diffIDs(t, img)

	for i, target := range []struct {
		what  string
		layer v1.Layer
	}{{"uncompressed", plain}, {"gzip", gz}} {
		d, err := target.layer.Digest()
		if err != nil {
			t.Fatal(err)
		}
		for _, tc := range []struct {
			what   string
			change func([]byte) []byte
		}{
			{"a byte changed", func(b []byte) []byte {
				b = bytes.Clone(b)
				b[len(b)/2] ^= 1
				return b
			}},
			{"a header byte changed", func(b []byte) []byte {
				b = bytes.Clone(b)
				b[100] ^= 1 // the first tar header's, or the deflate stream's
				return b
			}},
			{"a byte short", func(b []byte) []byte { return b[:len(b)-1] }},
			{"a byte more", func(b []byte) []byte { return append(bytes.Clone(b), 0) }},
		} {
			t.Run(target.what+" "+tc.what, func(t *testing.T) {
				s := newStore(t)
				f := func(h v1.Hash, b []byte) []byte {
					if h == d {
						return tc.change(b)
					}
					return b
				}
				tamper.Store(&f)
				defer tamper.Store(nil)
				_, err := s.Pull(context.Background(), ref, true)
				if !errors.Is(err, errdefs.ErrDigestMismatch) || !errors.Is(err, errdefs.ErrUnavailable) ||
					!strings.Contains(errdefs.Message(err), "does not match its digest") {
					t.Fatalf("err = %v (%s), want a digest mismatch naming the blob", err, errdefs.Message(err))
				}
				if s.HasLayer(ids[i]) {
					t.Errorf("the layer of the bad blob was stored")
				}
				assertNoScratch(t, s)
			})
		}
	}

	t.Run("as stored", func(t *testing.T) {
		s := newStore(t)
		mu.Lock()
		clear(gets)
		mu.Unlock()
		got, err := s.Pull(context.Background(), ref, true)
		if err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		defer mu.Unlock()
		for _, l := range []v1.Layer{plain, gz} {
			if d, _ := l.Digest(); gets[d.String()] != 1 {
				t.Errorf("layer blob %s fetched %d times, want once", d, gets[d.String()])
			}
		}
		if len(got.Layers) != 2 || got.Layers[0] != ids[0] || got.Layers[1] != ids[1] {
			t.Fatalf("layers %v, want %v", got.Layers, ids)
		}
		if readFile(t, s.LayerPath(ids[0])+"/p/data") != strings.Repeat("plain ", 5000) ||
			readFile(t, s.LayerPath(ids[1])+"/g/data") != strings.Repeat("gzip ", 5000) {
			t.Error("layer content wrong")
		}
		assertNoScratch(t, s)
	})
}

// What follows a layer tar's end marker is read into both digests, up to
// maxTrailing bytes: a gzip blob that decompresses to far more (a bomb
// after a valid tar) is refused once the bound is passed, and nothing is
// stored.
func TestLayerTrailingBytesBounded(t *testing.T) {
	for _, tc := range []struct {
		what  string
		extra int
		ok    bool
	}{{"within the bound", maxTrailing / 2, true}, {"past the bound", 64 * maxTrailing, false}} {
		t.Run(tc.what, func(t *testing.T) {
			s := newStore(t)
			data := append(mkTar(t, reg("f", "payload")), make([]byte, tc.extra)...)
			img, err := mutate.AppendLayers(empty.Image, layerFromTar(t, data))
			if err != nil {
				t.Fatal(err)
			}
			got, err := s.ImportOCILayout(context.Background(), writeLayout(t, img, "x"), "")
			id := diffIDs(t, img)[0]
			if tc.ok {
				if err != nil || len(got.Layers) != 1 || readFile(t, s.LayerPath(id)+"/f") != "payload" {
					t.Fatalf("import: %v", err)
				}
				return
			}
			if !errors.Is(err, errdefs.ErrInvalid) || !strings.Contains(err.Error(), "after its end marker") {
				t.Fatalf("err = %v, want the trailing bytes refused", err)
			}
			if s.HasLayer(id) {
				t.Error("the layer was stored")
			}
			assertNoScratch(t, s)
		})
	}
}
