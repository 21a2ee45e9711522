package image

import (
	"archive/tar"
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"sync"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/klauspost/compress/gzip"

	"github.com/berth-sh/berth/internal/errdefs"
)

const (
	annotationRefName        = "org.opencontainers.image.ref.name"
	annotationContainerdName = "io.containerd.image.name"
	maxIndexDepth            = 4
)

// ImportOCILayout imports an image from the OCI image layout at dir. ref
// selects a manifest of index.json by its org.opencontainers.image.ref.name
// (or io.containerd.image.name) annotation or by digest; if ref is empty
// the index must name exactly one image, or one per platform, of which
// linux/GOARCH is taken. Blob, config and layer digests are all verified.
func (s *Store) ImportOCILayout(ctx context.Context, dir, ref string) (*Image, error) {
	if _, err := os.Stat(filepath.Join(dir, "index.json")); errors.Is(err, os.ErrNotExist) {
		return nil, errdefs.NotFound("no OCI layout at %s", dir)
	}
	p, err := layout.FromPath(dir)
	if err != nil {
		return nil, invalid("not an OCI layout", err)
	}
	ii, err := p.ImageIndex()
	if err != nil {
		return nil, invalid("read index.json", err)
	}
	img, err := pickImage(ii, ref, 0)
	if err != nil {
		return nil, err
	}
	return s.importImage(ctx, img, fromLayout, nil)
}

// pickImage resolves ref in index ii down to one image manifest.
func pickImage(ii v1.ImageIndex, ref string, depth int) (v1.Image, error) {
	if depth > maxIndexDepth {
		return nil, errdefs.Invalid("image indexes nested too deep")
	}
	im, err := ii.IndexManifest()
	if err != nil {
		return nil, invalid("read image index", err)
	}
	cands := im.Manifests
	if ref != "" {
		var match []v1.Descriptor
		for _, d := range cands {
			if d.Digest.String() == ref || d.Annotations[annotationRefName] == ref || d.Annotations[annotationContainerdName] == ref {
				match = append(match, d)
			}
		}
		if len(match) == 0 {
			return nil, errdefs.NotFound("no manifest named %q in the image index", ref)
		}
		cands = match
	}
	if len(cands) > 1 {
		var plat []v1.Descriptor
		for _, d := range cands {
			if d.Platform != nil && d.Platform.OS == "linux" && d.Platform.Architecture == runtime.GOARCH {
				plat = append(plat, d)
			}
		}
		if len(plat) == 0 {
			return nil, &errdefs.Error{Category: errdefs.ErrInvalid, Reason: errdefs.ErrImageUnsupported,
				Msg: fmt.Sprintf("image index has %d manifests and none for linux/%s; name one", len(cands), runtime.GOARCH)}
		}
		cands = plat[:1]
	}
	if len(cands) == 0 {
		return nil, errdefs.Invalid("image index is empty")
	}
	d := cands[0]
	if d.Digest.Algorithm != "sha256" {
		return nil, errdefs.Invalid("unsupported digest %s", d.Digest)
	}
	switch {
	case d.MediaType.IsIndex():
		child, err := ii.ImageIndex(d.Digest)
		if err != nil {
			return nil, invalid("read image index", err)
		}
		if err := checkDigest(child.Digest, d.Digest, "image index"); err != nil {
			return nil, err
		}
		return pickImage(child, "", depth+1)
	case d.MediaType.IsImage():
		img, err := ii.Image(d.Digest)
		if err != nil {
			return nil, invalid("read image manifest", err)
		}
		if err := checkDigest(img.Digest, d.Digest, "image manifest"); err != nil {
			return nil, err
		}
		return img, nil
	default:
		return nil, &errdefs.Error{Category: errdefs.ErrInvalid, Reason: errdefs.ErrImageUnsupported,
			Msg: fmt.Sprintf("manifest %s has unsupported media type %q", d.Digest, d.MediaType)}
	}
}

// mismatch reports content that does not hash to the digest naming it.
func mismatch(msg string) error {
	return &errdefs.Error{Category: errdefs.ErrInvalid, Reason: errdefs.ErrDigestMismatch,
		Msg: "invalid layer archive: digest mismatch: " + msg}
}

func checkDigest(got func() (v1.Hash, error), want v1.Hash, what string) error {
	h, err := got()
	if err != nil {
		return invalid("read "+what, err)
	}
	if h != want {
		return mismatch(fmt.Sprintf("%s hashes to %s, index says %s", what, h, want))
	}
	return nil
}

// ImportArchive imports a `docker save` tarball or a tar of an OCI layout
// (optionally gzip-compressed), telling them apart by their contents. An
// archive that has both (docker 25 and later writes both) is read as a
// docker archive, which needs no unpacking of the blobs.
func (s *Store) ImportArchive(ctx context.Context, archive string) (*Image, error) {
	gz, err := isGzip(archive)
	if err != nil {
		return nil, err
	}
	opener := func() (io.ReadCloser, error) { return openMaybeGzip(archive, gz) }
	var docker, oci bool
	if err := scanTar(opener, func(hdr *tar.Header, _ io.Reader) error {
		switch path.Clean(hdr.Name) {
		case "manifest.json":
			docker = true
		case "oci-layout":
			oci = true
		}
		return nil
	}); err != nil {
		return nil, err
	}
	switch {
	case docker:
		img, err := tarball.Image(tarball.Opener(opener), nil)
		if err != nil {
			return nil, invalid("read docker archive", err)
		}
		return s.importImage(ctx, img, fromArchive, nil)
	case oci:
		dir, err := os.MkdirTemp(s.work, "oci-")
		if err != nil {
			return nil, err
		}
		defer os.RemoveAll(dir)
		if err := s.unpackLayoutTar(ctx, opener, dir); err != nil {
			return nil, err
		}
		return s.ImportOCILayout(ctx, dir, "")
	default:
		return nil, errdefs.Invalid("archive is neither a docker save tarball nor an OCI layout")
	}
}

var layoutFileRE = regexp.MustCompile(`^(oci-layout|index\.json|blobs/[a-z0-9]+/[a-f0-9]{32,128})$`)

// unpackLayoutTar writes the OCI layout files of an archive to dir. Only
// the names a layout has are taken, so nothing can land outside dir. Under
// a limited Budget the blobs may not hold more than it has left: they lie
// on the tenant's disk while the import runs (they are not charged, only
// bounded, as the layers they unpack to will be charged).
func (s *Store) unpackLayoutTar(ctx context.Context, opener func() (io.ReadCloser, error), dir string) error {
	var total int64
	left, limited := budgetOf(ctx).limited()
	return scanTar(opener, func(hdr *tar.Header, r io.Reader) error {
		rel := path.Clean(hdr.Name)
		if hdr.Typeflag != tar.TypeReg || !layoutFileRE.MatchString(rel) {
			return nil
		}
		total += hdr.Size
		if hdr.Size < 0 || total > s.opts.maxArchiveBytes {
			return errdefs.TooLarge("OCI layout archive holds more than %d bytes", s.opts.maxArchiveBytes)
		}
		if limited && total > left {
			return budgetOf(ctx).c.Exceeded(left)
		}
		dst := filepath.Join(dir, filepath.FromSlash(rel))
		if err := os.MkdirAll(filepath.Dir(dst), 0o700); err != nil {
			return err
		}
		_ = os.Remove(dst)
		f, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if err != nil {
			return err
		}
		_, err = io.Copy(f, tarReader{r})
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		return err
	})
}

// scanTar calls fn for each member of the tar from opener.
func scanTar(opener func() (io.ReadCloser, error), fn func(*tar.Header, io.Reader) error) error {
	rc, err := opener()
	if err != nil {
		return err
	}
	defer rc.Close()
	tr := tar.NewReader(rc)
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return invalid("read archive", err)
		}
		if err := fn(hdr, tr); err != nil {
			return err
		}
	}
}

func isGzip(p string) (bool, error) {
	f, err := os.Open(p)
	if errors.Is(err, os.ErrNotExist) {
		return false, errdefs.NotFound("archive %s", p)
	}
	if err != nil {
		return false, err
	}
	defer f.Close()
	var b [2]byte
	n, _ := io.ReadFull(f, b[:])
	return n == 2 && b[0] == 0x1f && b[1] == 0x8b, nil
}

type multiCloser struct {
	io.Reader
	closers []io.Closer
}

func (m multiCloser) Close() error {
	var errs []error
	for _, c := range m.closers {
		errs = append(errs, c.Close())
	}
	return errors.Join(errs...)
}

func openMaybeGzip(p string, gz bool) (io.ReadCloser, error) {
	f, err := os.Open(p)
	if err != nil || !gz {
		return f, err
	}
	zr, err := gzip.NewReader(bufio.NewReader(f))
	if err != nil {
		f.Close()
		return nil, invalid("read gzip archive", err)
	}
	return multiCloser{zr, []io.Closer{zr, f}}, nil
}

// Pull fetches ref from its registry (linux/GOARCH of a multi-platform
// image) and imports it. insecure allows plain HTTP. Credentials come from
// the Store's keychain (WithKeychain), extra CA certificates from its
// certs directory (WithRegistryCerts). A failure names the step, the
// reference and the cause, with a registry reason (registryErr).
func (s *Store) Pull(ctx context.Context, ref string, insecure bool) (*Image, error) {
	var nopts []name.Option
	if insecure {
		nopts = append(nopts, name.Insecure)
	}
	r, err := name.ParseReference(ref, nopts...)
	if err != nil {
		return nil, &errdefs.Error{Category: errdefs.ErrInvalid, Msg: fmt.Sprintf("bad image reference %q: %v", ref, err), Err: err}
	}
	if r, err = s.mirrored(r); err != nil {
		return nil, errdefs.Invalid("bad image reference %q on the registry mirror: %v", ref, err)
	}
	opts, done, err := s.remoteOptions(ctx, r)
	if err != nil {
		return nil, registryErr("pull", ref, err)
	}
	defer done()
	img, err := s.resolveImage(r, append(opts, remote.WithPlatform(platform)))
	if err != nil {
		return nil, registryErr("pull", ref, err)
	}
	blobs, err := s.blobFetcher(ctx, r)
	if err != nil {
		return nil, registryErr("pull", ref, err)
	}
	out, err := s.importImage(ctx, img, fromRegistry, blobs)
	if err != nil {
		return nil, registryErr("pull", ref, err)
	}
	return out, nil
}

// source is where an image's blobs come from; it decides what is checked
// and how failures are classified.
type source int

const (
	fromLayout   source = iota // local OCI layout: digests checked, bad blobs are bad input
	fromArchive                // docker archive: its manifest is made up by the reader, diffIDs checked
	fromRegistry               // registry: digests checked, read failures are the registry's
)

// importImage unpacks img's layers and returns it. For layouts and
// registries, the config and each layer blob are checked against the
// manifest's digests; docker archives carry no digests, so there only the
// diffIDs are checked, which every source is. A registry's layer blobs
// are read with blobs.
func (s *Store) importImage(ctx context.Context, img v1.Image, src source, blobs *blobFetcher) (*Image, error) {
	if src != fromArchive {
		if err := checkMediaTypes(img); err != nil {
			return nil, err
		}
	}
	rawCfg, err := img.RawConfigFile()
	if err != nil {
		return nil, invalid("read image config", err)
	}
	cfg, err := v1.ParseConfigFile(bytes.NewReader(rawCfg))
	if err != nil {
		return nil, invalid("parse image config", err)
	}
	if cfg.OS != "" && cfg.OS != "linux" {
		return nil, &errdefs.Error{Category: errdefs.ErrInvalid, Reason: errdefs.ErrImageUnsupported,
			Msg: fmt.Sprintf("image is for %s, not linux", cfg.OS)}
	}
	diffIDs := cfg.RootFS.DiffIDs
	srcs := make([]layerSource, len(diffIDs))
	for i, d := range diffIDs {
		if d.Algorithm != "sha256" {
			return nil, errdefs.Invalid("unsupported diffID %s", d)
		}
		srcs[i].diffID = d.String()
		srcs[i].index, srcs[i].count = i+1, len(diffIDs)
	}
	if src == fromArchive {
		for i, d := range diffIDs {
			l, err := img.LayerByDiffID(d)
			if err != nil {
				return nil, invalid("find layer", err)
			}
			srcs[i].open = openWith(ignoreCtx(l.Uncompressed), src)
		}
	} else {
		m, err := img.Manifest()
		if err != nil {
			return nil, invalid("read image manifest", err)
		}
		sum := sha256.Sum256(rawCfg)
		if got := "sha256:" + hex.EncodeToString(sum[:]); got != m.Config.Digest.String() {
			return nil, mismatch(fmt.Sprintf("config hashes to %s, manifest says %s", got, m.Config.Digest))
		}
		if len(m.Layers) != len(diffIDs) {
			return nil, errdefs.Invalid("manifest has %d layers, config %d diffIDs", len(m.Layers), len(diffIDs))
		}
		for i, ld := range m.Layers {
			if ld.Digest.Algorithm != "sha256" {
				return nil, errdefs.Invalid("unsupported layer digest %s", ld.Digest)
			}
			if blobs != nil {
				srcs[i].open = openWith(func(ctx context.Context) (io.ReadCloser, error) {
					return blobs.open(ctx, ld.Digest, ld.Size)
				}, src)
			} else {
				l, err := img.LayerByDigest(ld.Digest)
				if err != nil {
					return nil, invalid("find layer", err)
				}
				srcs[i].open = openWith(ignoreCtx(l.Compressed), src)
			}
			srcs[i].digest = ld.Digest.String()
			srcs[i].size = ld.Size
		}
	}
	if src != fromArchive {
		sizes := make([]int64, len(srcs))
		for i := range srcs {
			sizes[i] = srcs[i].size
		}
		ctx = withTotals(ctx, sizes)
	}
	if err := s.ensureAll(ctx, srcs); err != nil {
		return nil, err
	}
	out := &Image{Config: Config{
		Env:          cfg.Config.Env,
		Workdir:      cfg.Config.WorkingDir,
		User:         cfg.Config.User,
		Entrypoint:   cfg.Config.Entrypoint,
		Cmd:          cfg.Config.Cmd,
		ExposedPorts: slices.Sorted(maps.Keys(cfg.Config.ExposedPorts)),
		StopSignal:   cfg.Config.StopSignal,
	}}
	for _, src := range srcs {
		out.Layers = append(out.Layers, src.diffID)
		out.Size += max(s.Size(src.diffID), 0)
	}
	return out, nil
}

// checkMediaTypes refuses what is no container image: an artifact (a Helm
// chart, a signature, an SBOM) is pushed with an image manifest too, and
// its config and layer media types tell.
func checkMediaTypes(img v1.Image) error {
	m, err := img.Manifest()
	if err != nil {
		return invalid("read image manifest", err)
	}
	if mt := m.Config.MediaType; mt != "" && !mt.IsConfig() {
		return &errdefs.Error{Category: errdefs.ErrInvalid, Reason: errdefs.ErrImageUnsupported,
			Msg: fmt.Sprintf("config has media type %q: an artifact, not a container image", mt)}
	}
	for i, ld := range m.Layers {
		if ld.MediaType != "" && !ld.MediaType.IsLayer() {
			return &errdefs.Error{Category: errdefs.ErrInvalid, Reason: errdefs.ErrImageUnsupported,
				Msg: fmt.Sprintf("layer %d of %d has media type %q, not a container image layer", i+1, len(m.Layers), ld.MediaType)}
		}
	}
	return nil
}

// openWith classifies the failures of open and of reading what it returns:
// a registry's are ErrUnavailable, a local file's are ErrInvalid.
func openWith(open func(context.Context) (io.ReadCloser, error), src source) func(context.Context) (io.ReadCloser, error) {
	return func(ctx context.Context) (io.ReadCloser, error) {
		rc, err := open(ctx)
		if err != nil {
			if src == fromRegistry {
				return nil, err // Pull's registryErr classifies it
			}
			return nil, invalid("open layer blob", err)
		}
		if src == fromRegistry {
			return unavailableReader{rc}, nil
		}
		return rc, nil
	}
}

// ignoreCtx adapts an opener of local bytes, which needs no context.
func ignoreCtx(open func() (io.ReadCloser, error)) func(context.Context) (io.ReadCloser, error) {
	return func(context.Context) (io.ReadCloser, error) { return open() }
}

// unavailableReader marks errors reading a registry's stream as
// ErrUnavailable, so a dropped connection is not reported as a bad archive.
type unavailableReader struct{ io.ReadCloser }

func (u unavailableReader) Read(p []byte) (int, error) {
	n, err := u.ReadCloser.Read(p)
	if err != nil && err != io.EOF && !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) {
		var e *errdefs.Error
		if cause, ok := digestMismatch(err); ok {
			err = &errdefs.Error{Category: errdefs.ErrUnavailable, Reason: errdefs.ErrDigestMismatch, Msg: cause, Err: err}
		} else if !errors.As(err, &e) {
			err = &errdefs.Error{Category: errdefs.ErrUnavailable, Msg: "registry read failed: " + clip(err.Error()), Err: err}
		}
	}
	return n, err
}

// ensureAll unpacks layers a few at a time; the first error cancels the rest.
func (s *Store) ensureAll(ctx context.Context, srcs []layerSource) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	sem := make(chan struct{}, s.opts.parallel)
	var wg sync.WaitGroup
	var once sync.Once
	var first error
	for _, src := range srcs {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			break
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			if err := s.ensureLayer(ctx, src); err != nil {
				once.Do(func() { first = err; cancel() })
			}
		}()
	}
	wg.Wait()
	if first != nil {
		return first
	}
	return ctx.Err()
}
