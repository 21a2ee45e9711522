package image

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"golang.org/x/sys/unix"

	"github.com/berth-sh/berth/internal/errdefs"
)

// IDMap is the user-namespace mapping of the sandboxes that use the store's
// layers: container id c is host id Host+c when c < Size, else
// HostUID+65534 (nobody). A zero Size means no shift: ids are kept as they
// are (for hosts that run sandboxes without a user namespace, and tests).
type IDMap struct{ HostUID, HostGID, Size uint32 }

// Config is the part of an image's configuration a sandbox starts from.
type Config struct {
	Env        []string
	Workdir    string
	User       string
	Entrypoint []string
	Cmd        []string // the image's Cmd: arguments to Entrypoint, or the command
	// ExposedPorts are the image's "port/proto" entries, sorted; only
	// shown, never published.
	ExposedPorts []string
	StopSignal   string
}

// Image is an imported template image.
type Image struct {
	Layers []string // diffIDs, "sha256:<hex>" of each uncompressed layer, bottom first
	Config Config
	Size   int64 // bytes unpacked, summed over Layers
}

// Store is berth's on-disk layer store. It is safe for concurrent use, also
// by several Stores (or processes) on the same root.
type Store struct {
	root   string
	idmap  IDMap
	opts   options
	work   string   // our private scratch dir under root/tmp
	lockf  *os.File // flock held while work is in use
	log    *slog.Logger
	gcMu   sync.RWMutex // imports hold it shared, GC exclusive
	mu     sync.Mutex
	layerL map[string]chan struct{} // per-layer unpack locks
	// budgets are the open import accounts; GC keeps what they hold.
	budgets map[*Budget]struct{}

	trMu       sync.Mutex
	transports map[string]cachedTransport // by registry host (transportFor)
	baseBlobs  *http.Transport            // blobTransport of the default transport
}

type options struct {
	maxBytes        int64
	maxEntries      int64
	maxArchiveBytes int64
	log             *slog.Logger
	keychain        authn.Keychain
	certsDir        string
	hubMirror       string // host[:port] Docker Hub's references are pulled from
	hubMirrorPlain  bool
	osRelease       string
	alternatives    string
	parallel        int
}

// Option configures a Store.
type Option func(*options)

// WithMaxLayerBytes caps the regular-file bytes one layer may unpack to
// (default 16 GiB).
func WithMaxLayerBytes(n int64) Option { return func(o *options) { o.maxBytes = n } }

// WithMaxLayerEntries caps the members of one layer archive (default 1,000,000).
func WithMaxLayerEntries(n int64) Option { return func(o *options) { o.maxEntries = n } }

// WithMaxArchiveBytes caps the files an OCI-layout archive may unpack to
// before its layers are imported (default 64 GiB).
func WithMaxArchiveBytes(n int64) Option { return func(o *options) { o.maxArchiveBytes = n } }

// WithLogger sets the structured logger (default: discard).
func WithLogger(l *slog.Logger) Option { return func(o *options) { o.log = l } }

// WithKeychain sets registry credentials for Pull (default: the docker
// config of the daemon's user, as docker and crane read it).
func WithKeychain(k authn.Keychain) Option { return func(o *options) { o.keychain = k } }

// WithOSRelease sets the host file Builtin copies to /etc/os-release
// (default /usr/lib/os-release; a missing file is left out).
func WithOSRelease(path string) Option { return func(o *options) { o.osRelease = path } }

// WithAlternatives sets the host directory whose links into /usr Builtin
// copies to /etc/alternatives (default /etc/alternatives; missing, none).
func WithAlternatives(dir string) Option { return func(o *options) { o.alternatives = dir } }

// Open opens, creating if needed, the layer store at root and sweeps the
// scratch space left by crashed processes.
func Open(root string, idmap IDMap, opts ...Option) (*Store, error) {
	o := options{
		maxBytes:        defaultMaxB,
		maxEntries:      defaultMaxN,
		maxArchiveBytes: 64 << 30,
		keychain:        authn.DefaultKeychain,
		osRelease:       "/usr/lib/os-release",
		alternatives:    "/etc/alternatives",
		parallel:        4,
	}
	for _, opt := range opts {
		opt(&o)
	}
	if o.log == nil {
		o.log = slog.New(slog.DiscardHandler)
	}
	if uint64(idmap.HostUID)+uint64(idmap.Size) > math.MaxUint32 || uint64(idmap.HostGID)+uint64(idmap.Size) > math.MaxUint32 ||
		(idmap.Size > 0 && (uint64(idmap.HostUID)+nobodyID > math.MaxUint32 || uint64(idmap.HostGID)+nobodyID > math.MaxUint32)) {
		return nil, errdefs.Invalid("id map %+v overflows 32-bit ids", idmap)
	}
	if o.maxBytes <= 0 || o.maxEntries <= 0 || o.maxArchiveBytes <= 0 {
		return nil, errdefs.Invalid("image store limits must be positive")
	}
	root, err := filepath.Abs(root)
	if err != nil {
		return nil, err
	}
	// 0711: overlay mounts made from inside a user namespace must be able
	// to traverse to the layers, but nobody may list them.
	for _, d := range []struct {
		p    string
		mode os.FileMode
	}{{root, 0o711}, {filepath.Join(root, "layers"), 0o711}, {filepath.Join(root, "tmp"), 0o700}} {
		if err := os.MkdirAll(d.p, d.mode); err != nil {
			return nil, fmt.Errorf("image store: %w", err)
		}
		if err := os.Chmod(d.p, d.mode); err != nil {
			return nil, fmt.Errorf("image store: %w", err)
		}
	}
	s := &Store{root: root, idmap: idmap, opts: o, log: o.log, layerL: map[string]chan struct{}{}, budgets: map[*Budget]struct{}{}}
	s.sweepTmp()
	if err := s.claimWork(); err != nil {
		return nil, err
	}
	return s, nil
}

// Close releases the store's scratch space. Layers stay on disk.
func (s *Store) Close() error {
	s.trMu.Lock()
	for _, c := range s.transports {
		c.tr.CloseIdleConnections()
		c.blobs.CloseIdleConnections()
	}
	s.transports = nil
	if s.baseBlobs != nil {
		s.baseBlobs.CloseIdleConnections()
	}
	s.trMu.Unlock()
	if s.lockf == nil {
		return nil
	}
	err := os.RemoveAll(s.work)
	if rerr := os.Remove(s.lockf.Name()); err == nil {
		err = rerr
	}
	if cerr := s.lockf.Close(); err == nil {
		err = cerr
	}
	s.lockf = nil
	return err
}

// claimWork creates root/tmp/<name> and holds an flock on root/tmp/<name>.lock
// for as long as the Store lives, so that sweepTmp elsewhere leaves it alone.
func (s *Store) claimWork() error {
	tmp := filepath.Join(s.root, "tmp")
	f, err := os.CreateTemp(tmp, "s-*.lock")
	if err != nil {
		return fmt.Errorf("image store: %w", err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		os.Remove(f.Name())
		return fmt.Errorf("image store: lock scratch dir: %w", err)
	}
	work := strings.TrimSuffix(f.Name(), ".lock")
	if err := os.Mkdir(work, 0o700); err != nil {
		f.Close()
		os.Remove(f.Name())
		return fmt.Errorf("image store: %w", err)
	}
	s.work, s.lockf = work, f
	return nil
}

// sweepTmp removes scratch dirs whose owner is gone (its flock is free).
func (s *Store) sweepTmp() {
	tmp := filepath.Join(s.root, "tmp")
	ents, err := os.ReadDir(tmp)
	if err != nil {
		return
	}
	for _, e := range ents {
		name, ok := strings.CutSuffix(e.Name(), ".lock")
		if !ok {
			continue
		}
		f, err := os.Open(filepath.Join(tmp, e.Name()))
		if err != nil {
			continue
		}
		if unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB) == nil {
			if err := os.RemoveAll(filepath.Join(tmp, name)); err == nil {
				os.Remove(f.Name())
				s.log.Info("removed stale image scratch dir", "dir", name)
			}
		}
		f.Close()
	}
}

// parseID validates a layer id ("sha256:<hex>", or the bare hex) and
// returns its hex part.
func parseID(id string) (string, bool) {
	h := strings.TrimPrefix(id, "sha256:")
	if len(h) != 64 {
		return "", false
	}
	for _, c := range h {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return "", false
		}
	}
	return h, true
}

func (s *Store) layerDir(hexID string) string { return filepath.Join(s.root, "layers", hexID) }

// LayerPath returns the directory holding the unpacked, id-shifted layer,
// usable as an overlay lowerdir, or "" for a malformed id. The layer need
// not exist; see HasLayer.
func (s *Store) LayerPath(id string) string {
	h, ok := parseID(id)
	if !ok {
		return ""
	}
	return filepath.Join(s.layerDir(h), "fs")
}

// HasLayer reports whether layer id is unpacked and complete.
func (s *Store) HasLayer(id string) bool {
	h, ok := parseID(id)
	if !ok {
		return false
	}
	_, err := os.Stat(filepath.Join(s.layerDir(h), metaFile))
	return err == nil
}

// Size returns the unpacked size in bytes of layer id, or -1 if it is not
// in the store.
func (s *Store) Size(id string) int64 {
	m, err := s.readMeta(id)
	if err != nil {
		return -1
	}
	return m.Size
}

// Billed is what layer id costs a tenant's storage quota: its unpacked
// file bytes and EntryCharge for each member (as a Budget charged it), or
// -1 if it is not in the store.
func (s *Store) Billed(id string) int64 {
	m, err := s.readMeta(id)
	if err != nil {
		return -1
	}
	return m.Size + m.Entries*EntryCharge
}

const (
	metaFile    = "meta.json"
	maxTrailing = 1 << 20 // bytes accepted after a layer tar's end marker
)

// layerMeta is stored beside each layer's fs/ directory.
type layerMeta struct {
	Size    int64     `json:"size"`
	Entries int64     `json:"entries"`
	Skipped int64     `json:"skipped"`
	Created time.Time `json:"created"`
}

func (s *Store) readMeta(id string) (layerMeta, error) {
	var m layerMeta
	h, ok := parseID(id)
	if !ok {
		return m, errdefs.Invalid("malformed layer id %q", id)
	}
	b, err := os.ReadFile(filepath.Join(s.layerDir(h), metaFile))
	if errors.Is(err, os.ErrNotExist) {
		return m, errdefs.NotFound("layer %s", id)
	}
	if err != nil {
		return m, err
	}
	return m, json.Unmarshal(b, &m)
}

// lockLayer serialises unpacks of one layer within this process; across
// processes the final rename decides.
func (s *Store) lockLayer(ctx context.Context, h string) (func(), error) {
	for {
		s.mu.Lock()
		ch, busy := s.layerL[h]
		if !busy {
			ch = make(chan struct{})
			s.layerL[h] = ch
			s.mu.Unlock()
			return func() {
				s.mu.Lock()
				delete(s.layerL, h)
				s.mu.Unlock()
				close(ch)
			}, nil
		}
		s.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// layerSource is one layer's byte stream and what it must hash to.
type layerSource struct {
	diffID string // "sha256:<hex>" of the uncompressed tar
	// open returns the stream. When digest is set the stream is the
	// (possibly compressed) blob and must hash to digest; it is
	// decompressed by sniffing its magic. Otherwise it is the tar itself.
	open   func(context.Context) (io.ReadCloser, error)
	digest string
	// index (1-based) of count names the layer in errors and progress
	// (0: a single layer of berth's own, named by its id alone).
	index, count int
	size         int64 // the stream's size when known, for progress
}

// inLayer prefixes err's message, the one the API shows, with the layer's
// name; the category and cause are kept.
func inLayer(name string, err error) error {
	var e *errdefs.Error
	if !errors.As(err, &e) {
		return fmt.Errorf("%s: %w", name, err)
	}
	c := *e
	c.Msg = name + ": " + e.Msg
	return &c
}

// name is how errors name the layer: its place in the image and its id.
func (src layerSource) name() string {
	if src.index > 0 {
		return fmt.Sprintf("layer %d of %d (%s)", src.index, src.count, src.diffID)
	}
	return "layer " + src.diffID
}

// ensureLayer unpacks src into root/layers/<hex> unless it is already there.
// The tar is unpacked into scratch space and renamed into place only after
// the digests matched, so a layer dir, once visible, is complete and is
// what its name says.
//
// A cached layer is taken unread only when ctx's Budget trusts it (the
// tenant's own, the shared catalogue's, any for the host). Otherwise the
// import's own bytes are unpacked, charged and hashed like a new layer's,
// and only when they hash to the id is the cached copy used (the fresh one
// is discarded): naming another tenant's layer id without its bytes gets
// nothing. What stays observable to a tenant who does have the bytes is
// only that the final rename found the layer there, which costs no time
// it could measure from outside, and that the per-layer lock may make it
// wait while another import unpacks the same layer.
func (s *Store) ensureLayer(ctx context.Context, src layerSource) error {
	h, ok := parseID(src.diffID)
	if !ok {
		return errdefs.Invalid("unsupported or malformed diffID %q", src.diffID)
	}
	b := budgetOf(ctx)
	// Under GC's lock: a GC either ran before (HasLayer sees its result)
	// or will keep the layer for us.
	has := func() bool {
		s.gcMu.RLock()
		defer s.gcMu.RUnlock()
		b.hold(h)
		return s.HasLayer(h) && b.trusted(h)
	}
	emit := progressOf(ctx)
	prog := Progress{Layer: src.index, Layers: src.count, Digest: src.diffID, Size: src.size}
	cached := func() error {
		if emit != nil {
			prog.Done, prog.Cached = true, true
			emit(prog)
		}
		return nil
	}
	if has() {
		return cached()
	}
	unlock, err := s.lockLayer(ctx, h)
	if err != nil {
		return err
	}
	defer unlock()
	if has() {
		return cached()
	}
	// The transfer ends with the layer: a failed unpack stops the
	// stream's goroutine even while it waits for the registry.
	lctx, cancel := context.WithCancel(ctx)
	defer cancel()
	rc, err := src.open(lctx)
	if err != nil {
		return inLayer(src.name(), err)
	}
	defer rc.Close()

	var counter *countingReader
	var count func(io.Reader) io.Reader
	if emit != nil {
		emit(prog)
		count = func(r io.Reader) io.Reader {
			counter = &countingReader{r: r, p: prog, emit: emit, last: time.Now()}
			return counter
		}
	}
	ls := newLayerStream(rc, src.digest != "", count)
	defer func() {
		cancel()
		ls.Close()
	}()
	start := time.Now()
	_, stats, err := s.unpack(ctx, b, ls, func() ([]byte, error) {
		// Read what follows the tar end marker too, so both digests cover
		// the whole stream as it was served: GNU tar pads an archive to
		// its 10240-byte record after the end marker, and that padding is
		// part of what the diffID hashes. The bound keeps a compressed
		// bomb from running for long.
		n, err := io.Copy(io.Discard, io.LimitReader(ls, maxTrailing+1))
		if err != nil {
			return nil, invalid("read layer "+src.diffID, err)
		}
		if n > maxTrailing {
			return nil, errdefs.Invalid("layer %s has more than %d bytes after its end marker", src.diffID, maxTrailing)
		}
		// The stream is at its end: its goroutine is done with the hashes.
		raw, diff := ls.Sums()
		if src.digest != "" {
			if d := "sha256:" + hex.EncodeToString(raw); d != src.digest {
				return nil, blobMismatch(d, src.digest)
			}
		}
		return diff, nil
	}, h)
	if err != nil {
		if errors.Is(err, errdefs.ErrInvalid) && !errors.Is(err, errdefs.ErrDigestMismatch) {
			// Bad bytes: the blob's own, or other bytes than its digest's?
			if merr := ls.checkBlob(src.digest); merr != nil {
				err = merr
			}
		}
		return inLayer(src.name(), err)
	}
	if counter != nil {
		counter.p.Done = true
		emit(counter.p)
	}
	s.log.Info("unpacked layer", "layer", src.diffID, "bytes", stats.Bytes, "entries", stats.Entries,
		"skipped", stats.Skipped, "compression", ls.compress, "took", time.Since(start).Round(time.Millisecond),
		"sync", stats.Sync.Round(time.Millisecond))
	return nil
}

// unpack extracts the tar r into scratch space, charging its bytes to b,
// runs finish (which must consume the rest of r and returns the sha256 of
// all of r), takes the id from that, checks it against want if set, syncs
// the filesystem and renames the result to root/layers/<id>. If the layer already exists, the fresh copy is
// discarded and the existing one used: content addressing makes them
// equal. Either way b holds the layer from then on.
func (s *Store) unpack(ctx context.Context, b *Budget, r io.Reader, finish func() ([]byte, error), want string) (string, extractStats, error) {
	s.gcMu.RLock()
	defer s.gcMu.RUnlock()
	tmp, err := os.MkdirTemp(s.work, "layer-")
	if err != nil {
		return "", extractStats{}, err
	}
	defer os.RemoveAll(tmp)
	if err := os.Chmod(tmp, 0o711); err != nil {
		return "", extractStats{}, err
	}
	fsDir := filepath.Join(tmp, "fs")
	if err := os.Mkdir(fsDir, 0o755); err != nil {
		return "", extractStats{}, err
	}
	if err := os.Lchown(fsDir, s.idmap.hostUID(0), s.idmap.hostGID(0)); err != nil {
		return "", extractStats{}, err
	}
	stats, err := extractTar(ctx, r, fsDir, s.idmap, extractLimits{maxBytes: s.opts.maxBytes, maxEntries: s.opts.maxEntries, budget: b}, s.log)
	if err != nil {
		return "", stats, err
	}
	sum, err := finish()
	if err != nil {
		return "", stats, err
	}
	got := hex.EncodeToString(sum)
	if want != "" && got != want {
		return "", stats, &errdefs.Error{Category: errdefs.ErrInvalid, Reason: errdefs.ErrDigestMismatch,
			Msg: fmt.Sprintf("invalid layer archive: diffID mismatch: the layer's content hashes to sha256:%s, the image config says sha256:%s", got, want)}
	}
	meta, err := json.Marshal(layerMeta{Size: stats.Bytes, Entries: stats.Entries, Skipped: stats.Skipped, Created: time.Now().UTC()})
	if err != nil {
		return "", stats, err
	}
	if err := os.WriteFile(filepath.Join(tmp, metaFile), meta, 0o644); err != nil {
		return "", stats, err
	}
	t0 := time.Now()
	if err := syncFS(tmp); err != nil {
		return "", stats, err
	}
	stats.Sync = time.Since(t0)
	dst := s.layerDir(got)
	if err := os.Rename(tmp, dst); err != nil {
		if errors.Is(err, unix.EEXIST) || errors.Is(err, unix.ENOTEMPTY) {
			// Another unpack (another process, or the copy this import
			// had to prove its bytes against) is there already.
			b.proven(got)
			return got, stats, nil
		}
		return "", stats, err
	}
	b.proven(got)
	_ = syncDir(filepath.Dir(dst))
	return got, stats, nil
}

// syncFS flushes the filesystem holding dir once, cheaper than an fsync per
// file, so a layer renamed into place survives a crash complete.
func syncFS(dir string) error {
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	return unix.Syncfs(fd)
}

func syncDir(dir string) error {
	f, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer f.Close()
	return f.Sync()
}

// GC removes every layer whose id is not in keep and returns the ids it
// removed. It waits for imports running in this Store and keeps the layers
// open Budgets hold (imports not yet recorded); the caller must include in
// keep the layers of every template it records and of every sandbox that
// still mounts them.
func (s *Store) GC(ctx context.Context, keep map[string]bool) ([]string, error) {
	s.gcMu.Lock()
	defer s.gcMu.Unlock()
	s.mu.Lock()
	keepHex := s.heldLayers()
	s.mu.Unlock()
	for id, k := range keep {
		if h, ok := parseID(id); ok && k {
			keepHex[h] = true
		}
	}
	ents, err := os.ReadDir(filepath.Join(s.root, "layers"))
	if err != nil {
		return nil, fmt.Errorf("image gc: %w", err)
	}
	var removed []string
	var errs []error
	for _, e := range ents {
		if err := ctx.Err(); err != nil {
			return removed, err
		}
		h, ok := parseID(e.Name())
		if !ok || e.Name() != h || keepHex[h] {
			continue
		}
		// Rename first so the layer disappears atomically, then delete.
		trash, err := os.MkdirTemp(s.work, "gc-")
		if err != nil {
			return removed, err
		}
		dst := filepath.Join(trash, h)
		if err := os.Rename(s.layerDir(h), dst); err != nil {
			errs = append(errs, err)
			os.Remove(trash)
			continue
		}
		if err := os.RemoveAll(trash); err != nil {
			errs = append(errs, err)
		}
		removed = append(removed, "sha256:"+h)
		s.log.Info("removed layer", "layer", "sha256:"+h)
	}
	return removed, errors.Join(errs...)
}
