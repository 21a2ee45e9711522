package image

import (
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"runtime"
	"sync"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"golang.org/x/sys/unix"

	"github.com/berth-sh/berth/internal/errdefs"
)

// PushImage is what Push writes: a template's layers (layer ids, bottom
// first), its image config and when it was made (the config's created
// time, so pushing the same template twice gives the same digest).
type PushImage struct {
	Layers  []string
	Config  Config
	Labels  map[string]string
	Created time.Time
}

// Pushed is what a push wrote.
type Pushed struct {
	Ref    string // the reference pushed to
	Digest string // the manifest's digest
	// Layers are the pushed image's diffIDs. A layer berth committed
	// (a build step) serializes to its own id again; an imported layer's
	// tar is written anew, so its pushed diffID is that of berth's
	// serialization, not the original image's.
	Layers []string
}

// Push writes img to ref as an OCI image: each layer serialized from the
// store (the deterministic tar CommitDir hashes: whiteouts back in OCI
// form, container ids, user.* xattrs) and gzip-compressed into scratch
// space, then the blobs, config and manifest written with
// go-containerregistry's remote.Write, which skips blobs the registry
// already has. Progress (WithProgress) reports each layer while it is
// serialized and while it is uploaded. The layers are held from GC while
// the push runs. A failure names the step ("push"), the reference and the
// cause, as Pull's do.
func (s *Store) Push(ctx context.Context, ref string, img PushImage, insecure bool) (*Pushed, error) {
	var nopts []name.Option
	if insecure {
		nopts = append(nopts, name.Insecure)
	}
	r, err := name.ParseReference(ref, nopts...)
	if err != nil {
		return nil, &errdefs.Error{Category: errdefs.ErrInvalid, Msg: fmt.Sprintf("bad image reference %q: %v", ref, err), Err: err}
	}
	if len(img.Layers) == 0 {
		return nil, errdefs.Invalid("push %s: the template has no layers", ref)
	}
	b := s.Budget(Charge{Bytes: -1, TrustCache: true})
	defer b.Close()
	for _, id := range img.Layers {
		h, ok := parseID(id)
		if !ok {
			return nil, errdefs.Invalid("push %s: malformed layer id %q", ref, id)
		}
		s.gcMu.RLock()
		b.hold(h)
		has := s.HasLayer(h)
		s.gcMu.RUnlock()
		if !has {
			return nil, errdefs.NotFound("push %s: layer %s is not in the store", ref, id)
		}
	}
	dir, err := os.MkdirTemp(s.work, "push-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)

	emit := progressOf(ctx)
	layers := make([]*pushLayer, len(img.Layers))
	for i, id := range img.Layers {
		l, err := s.serializeLayer(ctx, id, dir, i+1, len(img.Layers), emit)
		if err != nil {
			return nil, registryErr("push", ref, inLayer(fmt.Sprintf("layer %d of %d (%s)", i+1, len(img.Layers), id), err))
		}
		layers[i] = l
	}
	sizes := make([]int64, len(layers))
	for i, l := range layers {
		sizes[i] = l.size
	}
	if emit != nil {
		ctx = withTotals(ctx, sizes)
		for _, l := range layers {
			l.emit = progressOf(ctx)
		}
	}
	out := &Pushed{Ref: ref}
	image := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	image = mutate.ConfigMediaType(image, types.OCIConfigJSON)
	adds := make([]mutate.Addendum, len(layers))
	for i, l := range layers {
		adds[i] = mutate.Addendum{Layer: l, MediaType: types.OCILayer}
		out.Layers = append(out.Layers, l.diffID.String())
	}
	image, err = mutate.Append(image, adds...)
	if err != nil {
		return nil, err
	}
	cf, err := image.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", runtime.GOARCH
	cf.Created = v1.Time{Time: img.Created.UTC()}
	cf.Config.Env = img.Config.Env
	cf.Config.WorkingDir = img.Config.Workdir
	cf.Config.User = img.Config.User
	cf.Config.Entrypoint = img.Config.Entrypoint
	cf.Config.Cmd = img.Config.Cmd
	cf.Config.StopSignal = img.Config.StopSignal
	cf.Config.Labels = maps.Clone(img.Labels)
	if len(img.Config.ExposedPorts) > 0 {
		cf.Config.ExposedPorts = map[string]struct{}{}
		for _, p := range img.Config.ExposedPorts {
			cf.Config.ExposedPorts[p] = struct{}{}
		}
	}
	// mutate.Append wrote one history entry per layer; created times of
	// the push would make every push of the same template differ.
	for i := range cf.History {
		cf.History[i].Created = cf.Created
	}
	if image, err = mutate.ConfigFile(image, cf); err != nil {
		return nil, err
	}
	dg, err := image.Digest()
	if err != nil {
		return nil, err
	}
	out.Digest = dg.String()

	opts, done, err := s.remoteOptions(ctx, r)
	if err != nil {
		return nil, registryErr("push", ref, err)
	}
	defer done()
	if err := remote.Write(r, image, opts...); err != nil {
		return nil, registryErr("push", ref, err)
	}
	// Layers the registry had already were never read: say so.
	for _, l := range layers {
		l.finish()
	}
	s.log.Info("pushed template image", "ref", ref, "digest", out.Digest, "layers", len(layers))
	return out, nil
}

// serializeLayer writes layer id's tar, gzip-compressed, to a file in dir
// and returns it as a v1.Layer with both digests computed.
func (s *Store) serializeLayer(ctx context.Context, id, dir string, index, count int, emit func(Progress)) (*pushLayer, error) {
	h, _ := parseID(id)
	fd, err := unix.Open(s.LayerPath(id), unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0)
	if err != nil {
		return nil, fmt.Errorf("open layer: %w", err)
	}
	defer unix.Close(fd)
	f, err := os.CreateTemp(dir, h[:12]+"-")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	compressed := sha256.New()
	counter := &countingWriter{w: io.MultiWriter(f, compressed)}
	zw := gzip.NewWriter(counter)
	uncompressed := sha256.New()
	if err := serializeDir(ctx, fd, s.idmap, io.MultiWriter(zw, uncompressed)); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	if err := f.Sync(); err != nil {
		return nil, err
	}
	l := &pushLayer{path: f.Name(), size: counter.n, emit: emit,
		p: Progress{Layer: index, Layers: count, Size: counter.n}}
	l.digest = v1.Hash{Algorithm: "sha256", Hex: hex.EncodeToString(compressed.Sum(nil))}
	l.diffID = v1.Hash{Algorithm: "sha256", Hex: hex.EncodeToString(uncompressed.Sum(nil))}
	l.p.Digest = l.diffID.String()
	return l, nil
}

type countingWriter struct {
	w io.Writer
	n int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// pushLayer is a serialized layer in scratch space; reading its
// compressed stream (the upload) reports progress.
type pushLayer struct {
	path           string
	size           int64
	digest, diffID v1.Hash
	emit           func(Progress)

	mu   sync.Mutex
	p    Progress
	read bool // an upload opened it
	done bool // its last report was made
}

func (l *pushLayer) Digest() (v1.Hash, error)            { return l.digest, nil }
func (l *pushLayer) DiffID() (v1.Hash, error)            { return l.diffID, nil }
func (l *pushLayer) Size() (int64, error)                { return l.size, nil }
func (l *pushLayer) MediaType() (types.MediaType, error) { return types.OCILayer, nil }

func (l *pushLayer) Compressed() (io.ReadCloser, error) {
	f, err := os.Open(l.path)
	if err != nil {
		return nil, err
	}
	if l.emit == nil {
		return f, nil
	}
	l.mu.Lock()
	l.read = true
	p := l.p
	l.mu.Unlock()
	p.Bytes = 0
	l.emit(p)
	return &pushReader{f: f, l: l, c: countingReader{r: f, p: p, emit: l.emit, last: time.Now()}}, nil
}

func (l *pushLayer) Uncompressed() (io.ReadCloser, error) {
	f, err := os.Open(l.path)
	if err != nil {
		return nil, err
	}
	zr, err := gzip.NewReader(f)
	if err != nil {
		f.Close()
		return nil, err
	}
	return multiCloser{zr, []io.Closer{zr, f}}, nil
}

// finish reports a layer that the upload never read (the registry had it)
// as cached.
func (l *pushLayer) finish() {
	if l.emit == nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.done {
		return
	}
	l.done = true
	p := l.p
	if !l.read {
		p.Cached = true
	} else {
		p.Bytes = l.size
	}
	p.Done = true
	l.emit(p)
}

// pushReader counts an upload's bytes and reports the layer done at EOF.
type pushReader struct {
	f *os.File
	l *pushLayer
	c countingReader
}

func (r *pushReader) Read(b []byte) (int, error) {
	n, err := r.c.Read(b)
	if errors.Is(err, io.EOF) {
		r.l.finish()
	}
	return n, err
}

func (r *pushReader) Close() error { return r.f.Close() }
