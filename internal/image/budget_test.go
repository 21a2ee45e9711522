package image

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
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

// zeroImage is an image of layers, each one file of size zero bytes: a
// gzip layout of it is tiny, its unpacked size is the sum.
func zeroImage(tb testing.TB, sizes ...int) v1.Image {
	tb.Helper()
	img := empty.Image
	for i, n := range sizes {
		l := layerFromTar(tb, mkTar(tb, reg("zero"+string(rune('a'+i)), strings.Repeat("\x00", n))))
		var err error
		if img, err = mutate.AppendLayers(img, l); err != nil {
			tb.Fatal(err)
		}
	}
	return img
}

func dockerArchive(tb testing.TB, img v1.Image) string {
	tb.Helper()
	p := filepath.Join(tb.TempDir(), "img.tar")
	if err := tarball.WriteToFile(p, name.MustParseReference("x:1").(name.Tag), img); err != nil {
		tb.Fatal(err)
	}
	return p
}

func layerDirs(tb testing.TB, s *Store) []string {
	tb.Helper()
	ents, err := os.ReadDir(filepath.Join(s.root, "layers"))
	if err != nil {
		tb.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		out = append(out, e.Name())
	}
	return out
}

// TestBudgetSharedByLayers: one budget bounds all layers of an import
// together, not each one: two layers of 600 KiB fit a budget of 2 MiB and
// are charged exactly, and overrun one of 1 MiB with the quota error,
// having charged no more than it; a layout's blobs are bounded by it too.
func TestBudgetSharedByLayers(t *testing.T) {
	ctx := context.Background()
	const kib = 1 << 10
	img := zeroImage(t, 600*kib, 600*kib)

	s := newStore(t)
	b := s.Budget(Charge{Bytes: 1 << 20})
	_, err := s.ImportArchive(WithBudget(ctx, b), dockerArchive(t, img))
	if !errors.Is(err, errdefs.ErrQuota) {
		t.Fatalf("over budget: err = %v, want ErrQuota", err)
	}
	if code, status := errdefs.Code(err); code != "quota_exceeded" || status != 429 {
		t.Errorf("over budget: code %s %d, want quota_exceeded 429", code, status)
	}
	if b.Used() > 1<<20 || b.Left() < 0 {
		t.Errorf("over budget: used %d, left %d: charged past the budget", b.Used(), b.Left())
	}
	b.Close()
	assertNoScratch(t, s)

	s = newStore(t)
	b = s.Budget(Charge{Bytes: 2 << 20})
	got, err := s.ImportArchive(WithBudget(ctx, b), dockerArchive(t, img))
	if err != nil {
		t.Fatal(err)
	}
	// Two members, one a layer: their bytes and a header's size each.
	if want := int64(1200*kib + 2*EntryCharge); b.Used() != want || b.Left() != 2<<20-want || got.Size != 1200*kib {
		t.Errorf("used %d, left %d, size %d; want %d charged of 2 MiB", b.Used(), b.Left(), got.Size, want)
	}
	b.Close()

	// An OCI layout archive's blobs lie on disk before any layer unpacks:
	// bounded by what is left. Incompressible blobs of 1200 KiB > 1 MiB.
	s = newStore(t)
	b = s.Budget(Charge{Bytes: 1 << 20})
	noise := make([]byte, 1200*kib)
	rand.NewChaCha8([32]byte{1}).Read(noise)
	incompressible, err := mutate.AppendLayers(empty.Image, layerFromTar(t, mkTar(t, reg("z", string(noise)))))
	if err != nil {
		t.Fatal(err)
	}
	_, err = s.ImportArchive(WithBudget(ctx, b), tarDir(t, writeLayout(t, incompressible, "x")))
	if !errors.Is(err, errdefs.ErrQuota) {
		t.Errorf("layout over budget: err = %v, want ErrQuota", err)
	}
	b.Close()
	if l := layerDirs(t, s); len(l) != 0 {
		t.Errorf("layers left after refused imports: %v", l)
	}
}

// TestExtractBudget: the extractor charges each member (EntryCharge) and
// each file's bytes before writing it, and stops at the first that does
// not fit, in whichever layer it is; a layer of empty files is not free.
func TestExtractBudget(t *testing.T) {
	requireRoot(t)
	s := newStore(t)
	b := s.Budget(Charge{Bytes: 2*EntryCharge + 10})
	defer b.Close()
	dir := t.TempDir()
	_, err := extractTar(context.Background(), bytes.NewReader(mkTar(t, reg("a", "123456"), reg("b", "123456"))), dir, IDMap{},
		extractLimits{maxBytes: 1 << 20, maxEntries: 100, budget: b}, nil)
	if !errors.Is(err, errdefs.ErrQuota) {
		t.Fatalf("err = %v, want ErrQuota", err)
	}
	if b.Used() != 2*EntryCharge+6 || b.Left() != 4 {
		t.Errorf("used %d, left %d; want %d and 4", b.Used(), b.Left(), 2*EntryCharge+6)
	}
	if exists(filepath.Join(dir, "b")) {
		t.Error("the refused file was created")
	}
	// The per-layer cap still applies below the budget.
	_, err = extractTar(context.Background(), bytes.NewReader(mkTar(t, reg("c", "123"))), t.TempDir(), IDMap{},
		extractLimits{maxBytes: 2, maxEntries: 100, budget: b}, nil)
	if !errors.Is(err, errdefs.ErrQuota) || b.Used() != 2*EntryCharge+6 {
		t.Errorf("4 bytes left: err = %v, used %d; want ErrQuota for the member alone", err, b.Used())
	}
	b2 := s.Budget(Charge{Bytes: 1 << 20})
	defer b2.Close()
	_, err = extractTar(context.Background(), bytes.NewReader(mkTar(t, reg("c", "123"))), t.TempDir(), IDMap{},
		extractLimits{maxBytes: 2, maxEntries: 100, budget: b2}, nil)
	if !errors.Is(err, errdefs.ErrTooLarge) || b2.Used() != EntryCharge {
		t.Errorf("layer cap: err = %v, used %d; want ErrTooLarge and only the member charged", err, b2.Used())
	}
	// A thousand empty files cost their headers.
	var ents []te
	for i := range 1000 {
		ents = append(ents, reg(fmt.Sprintf("e%d", i), ""))
	}
	b3 := s.Budget(Charge{Bytes: 999 * EntryCharge})
	defer b3.Close()
	_, err = extractTar(context.Background(), bytes.NewReader(mkTar(t, ents...)), t.TempDir(), IDMap{},
		extractLimits{maxBytes: 1 << 20, maxEntries: 10000, budget: b3}, nil)
	if !errors.Is(err, errdefs.ErrQuota) {
		t.Errorf("1000 empty files under 999 headers' worth: err = %v, want ErrQuota", err)
	}
}

// TestBudgetCachedLayers: a cached layer an account does not trust is
// reused only when the import's own bytes hash to its id. Naming another
// import's layer id over other bytes fails and leaves that layer as it
// was; the real bytes are charged and unpacked again (so it costs what a
// fresh import costs) before the cached copy is used; a trusted one (the
// tenant's own, listed in Reuse) is taken unread and free.
func TestBudgetCachedLayers(t *testing.T) {
	ctx := context.Background()
	s := newStore(t)
	secret := layerFromTar(t, mkTar(t, reg("secret", "the other tenant's data\n")))
	private, err := mutate.AppendLayers(empty.Image, secret)
	if err != nil {
		t.Fatal(err)
	}
	archive := dockerArchive(t, private)
	owner := s.Budget(Charge{Bytes: -1})
	first, err := s.ImportArchive(WithBudget(ctx, owner), archive)
	owner.Close()
	if err != nil {
		t.Fatal(err)
	}
	id := first.Layers[0]

	// Other bytes, config naming the private layer's id.
	forged, err := mutate.AppendLayers(empty.Image, layerFromTar(t, mkTar(t, reg("guess", "x"))))
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := forged.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	cfg = cfg.DeepCopy()
	cfg.RootFS.DiffIDs[0], _ = v1.NewHash(id)
	if forged, err = mutate.ConfigFile(forged, cfg); err != nil {
		t.Fatal(err)
	}
	forgedPath := dockerArchive(t, forged)
	other := s.Budget(Charge{Bytes: 1 << 20})
	_, err = s.ImportArchive(WithBudget(ctx, other), forgedPath)
	other.Close()
	if !errors.Is(err, errdefs.ErrInvalid) || !strings.Contains(err.Error(), "diffID mismatch") {
		t.Fatalf("forged layer: err = %v, want a diffID mismatch", err)
	}
	if got := readFile(t, filepath.Join(s.LayerPath(id), "secret")); got != "the other tenant's data\n" {
		t.Fatalf("the cached layer changed: %q", got)
	}
	// The host trusts its cache (the old behaviour, for the host only).
	if _, err := s.ImportArchive(ctx, forgedPath); err != nil {
		t.Errorf("host import of a cached id: %v", err)
	}

	// The real bytes prove the layer: charged like a fresh unpack, not
	// reported as cached.
	var cachedSeen bool
	prover := s.Budget(Charge{Bytes: 1 << 20})
	pctx := WithProgress(WithBudget(ctx, prover), func(p Progress) { cachedSeen = cachedSeen || p.Cached })
	if _, err := s.ImportArchive(pctx, archive); err != nil {
		t.Fatalf("import with the real bytes: %v", err)
	}
	prover.Close()
	if prover.Used() != s.Billed(id) || cachedSeen {
		t.Errorf("proving import: charged %d (layer bills %d), cached reported %v", prover.Used(), s.Billed(id), cachedSeen)
	}
	// Trusted: free and unread, even with nothing left.
	mine := s.Budget(Charge{Bytes: 0, Reuse: []string{id}})
	if _, err := s.ImportArchive(WithBudget(ctx, mine), forgedPath); err != nil {
		t.Errorf("reuse of a trusted layer: %v", err)
	}
	mine.Close()
	if mine.Used() != 0 {
		t.Errorf("trusted reuse charged %d", mine.Used())
	}
	assertNoScratch(t, s)
}

// TestBudgetHoldsLayersFromGC: the layers an open account unpacked or
// reused survive a GC that does not keep them (the import has not
// recorded its template yet); once it is closed they are GC's.
func TestBudgetHoldsLayersFromGC(t *testing.T) {
	ctx := context.Background()
	s := newStore(t)
	b := s.Budget(Charge{Bytes: -1})
	img, err := s.ImportArchive(WithBudget(ctx, b), dockerArchive(t, zeroImage(t, 10, 20)))
	if err != nil {
		t.Fatal(err)
	}
	if removed, err := s.GC(ctx, nil); err != nil || len(removed) != 0 {
		t.Fatalf("GC with the account open removed %v (%v)", removed, err)
	}
	b.Close()
	b.Close() // idempotent
	removed, err := s.GC(ctx, nil)
	if err != nil || len(removed) != len(img.Layers) {
		t.Fatalf("GC after close removed %v (%v), want %v", removed, err, img.Layers)
	}
}

// TestCommitDirBudget: a build's commit is charged like an import: an
// upper dir past what the account has left is refused with the quota
// error and stores no layer; one that fits is charged its size.
func TestCommitDirBudget(t *testing.T) {
	ctx := context.Background()
	s := newStore(t)
	upper := upperDir(t)
	small := s.Budget(Charge{Bytes: 8})
	_, _, err := s.CommitDir(WithBudget(ctx, small), upper)
	small.Close()
	if !errors.Is(err, errdefs.ErrQuota) {
		t.Fatalf("commit past the budget: %v, want ErrQuota", err)
	}
	if l := layerDirs(t, s); len(l) != 0 {
		t.Fatalf("layers after the refused commit: %v", l)
	}
	assertNoScratch(t, s)
	b := s.Budget(Charge{Bytes: 1 << 20})
	id, size, err := s.CommitDir(WithBudget(ctx, b), upper)
	b.Close()
	if err != nil {
		t.Fatal(err)
	}
	if b.Used() != s.Billed(id) || b.Used() <= size || !s.HasLayer(id) {
		t.Errorf("charged %d for a layer of %d bytes billing %d", b.Used(), size, s.Billed(id))
	}
}
