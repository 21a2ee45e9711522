package image

import (
	"context"
	"sync"

	"github.com/berth-sh/berth/internal/errdefs"
)

// EntryCharge is what each member of a layer costs a Budget besides its
// file bytes: the size of its tar header. An inode and a directory entry
// take disk too, and a layer of a million empty files must not be free;
// at a tar header's size the charge never exceeds the archive's own.
const EntryCharge = 512

// Charge is what an import or build done for one tenant may add to the
// store, and which cached layers it may reuse without proving them.
type Charge struct {
	// Bytes is how many bytes the layers this import unpacks may add up
	// to, shared by all of them (the tenant's storage quota minus its
	// usage): their regular files' bytes and EntryCharge a member (what
	// Billed says of a stored layer); below 0 means no limit beyond the
	// store's per-layer caps.
	Bytes int64
	// Reuse names the layers ("sha256:<hex>") already on the tenant's bill
	// or free to it (its own templates' and the shared catalogue's): a
	// cached copy of one is taken without reading its bytes and costs
	// nothing. Any other cached layer is reused only after this import's
	// own bytes for it have been unpacked and hashed to its id.
	Reuse []string
	// TrustCache reuses every cached layer unread (the host's imports:
	// the host owns every layer anyway).
	TrustCache bool
	// Exceeded is the error an unpack that would pass Bytes fails with; it
	// gets the bytes the import had left when it was refused.
	Exceeded func(left int64) error
}

// Budget is one import's running account against its Charge. It also
// keeps the layers the import has touched from GC until it is closed, so
// that the caller can record them first.
type Budget struct {
	s *Store
	c Charge

	mu     sync.Mutex
	left   int64
	used   int64
	made   int             // layers this account unpacked (new or proving a cached one)
	reuse  map[string]bool // hex ids taken without proof
	held   map[string]bool // hex ids this import unpacked or reused
	closed bool
}

// Budget opens an account of c on the store; Close it once the layers it
// produced are recorded (or the import failed).
func (s *Store) Budget(c Charge) *Budget {
	if c.Exceeded == nil {
		c.Exceeded = func(left int64) error {
			return errdefs.QuotaExceeded(0, "the import unpacks to more than the %d bytes of storage left", left)
		}
	}
	b := &Budget{s: s, c: c, left: c.Bytes, reuse: map[string]bool{}, held: map[string]bool{}}
	for _, id := range c.Reuse {
		if h, ok := parseID(id); ok {
			b.reuse[h] = true
		}
	}
	s.mu.Lock()
	s.budgets[b] = struct{}{}
	s.mu.Unlock()
	return b
}

// Close ends the account: its layers are GC's to judge again. It is
// idempotent.
func (b *Budget) Close() {
	b.s.mu.Lock()
	defer b.s.mu.Unlock()
	delete(b.s.budgets, b)
	b.closed = true
}

// Left is what the account has left (below 0: unlimited).
func (b *Budget) Left() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.left
}

// trusted reports whether a cached copy of layer h may be taken unread.
func (b *Budget) trusted(h string) bool {
	if b == nil {
		return true
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.c.TrustCache || b.reuse[h]
}

// hold keeps layer h from GC until the budget is closed. Call it under
// s.gcMu (shared), so that a GC sees either the hold or the layer gone.
func (b *Budget) hold(h string) {
	if b == nil {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.held[h] = true
}

// proven records that this import's own bytes unpacked to layer h, so a
// second use of it in the same import costs nothing and reads nothing.
func (b *Budget) proven(h string) {
	if b == nil {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.held[h] = true
	b.reuse[h] = true
	b.made++
}

// Unpacked reports whether the account unpacked any layer: only then can
// a failed import have left one that nothing records.
func (b *Budget) Unpacked() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.made > 0
}

// take charges n bytes, or refuses them with the Charge's error and
// charges nothing. A nil or unlimited Budget takes anything.
func (b *Budget) take(n int64) error {
	if b == nil {
		return nil
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.c.Bytes >= 0 {
		if n > b.left {
			return b.c.Exceeded(b.left)
		}
		b.left -= n
	}
	b.used += n
	return nil
}

// limited reports the bytes left when the account is limited.
func (b *Budget) limited() (int64, bool) {
	if b == nil {
		return 0, false
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.left, b.c.Bytes >= 0
}

type budgetKey struct{}

// WithBudget returns a context under which imports, pulls and commits
// charge b. Without one they are the host's: cached layers are trusted and
// only the store's own caps apply.
func WithBudget(ctx context.Context, b *Budget) context.Context {
	return context.WithValue(ctx, budgetKey{}, b)
}

func budgetOf(ctx context.Context) *Budget {
	b, _ := ctx.Value(budgetKey{}).(*Budget)
	return b
}

// heldLayers is the set of layers open budgets hold, which GC keeps.
// s.mu must be held.
func (s *Store) heldLayers() map[string]bool {
	out := map[string]bool{}
	for b := range s.budgets {
		b.mu.Lock()
		for h := range b.held {
			out[h] = true
		}
		b.mu.Unlock()
	}
	return out
}

// Used is how many bytes the account has been charged so far.
func (b *Budget) Used() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.used
}
