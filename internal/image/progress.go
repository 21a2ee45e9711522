package image

import (
	"context"
	"io"
	"sync"
	"time"
)

// Progress is how far an import is: of layer Layer (1-based) of Layers,
// Bytes of its stream (the blob as served: compressed for a layout or a
// registry, the tar for a docker archive) have been read, of Size when the
// manifest says (0: unknown). Done marks the layer's last report; Cached
// that it was already in the store and nothing was read.
type Progress struct {
	Layer, Layers int
	Digest        string // the layer's diffID
	Bytes, Size   int64
	Done, Cached  bool
}

type progressKey struct{}

// WithProgress returns a context under which imports report to fn: at the
// start and end of each layer and at most every progressEvery while one is
// read. fn is called from the goroutines unpacking the layers, never two
// calls at once.
func WithProgress(ctx context.Context, fn func(Progress)) context.Context {
	if fn == nil {
		return ctx
	}
	var mu sync.Mutex
	return context.WithValue(ctx, progressKey{}, func(p Progress) {
		mu.Lock()
		defer mu.Unlock()
		fn(p)
	})
}

func progressOf(ctx context.Context) func(Progress) {
	fn, _ := ctx.Value(progressKey{}).(func(Progress))
	return fn
}

const progressEvery = 200 * time.Millisecond

// countingReader reports the bytes read through it.
type countingReader struct {
	r    io.Reader
	p    Progress
	emit func(Progress)
	last time.Time
}

func (c *countingReader) Read(b []byte) (int, error) {
	n, err := c.r.Read(b)
	c.p.Bytes += int64(n)
	if now := time.Now(); n > 0 && now.Sub(c.last) >= progressEvery {
		c.last = now
		c.emit(c.p)
	}
	return n, err
}
