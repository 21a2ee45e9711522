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
// that it was already in the store (for a push: in the registry) and
// nothing was read. TotalBytes and TotalSize are the same over all the
// image's layers (a cached layer counts as wholly read), when every
// layer's size is known (else both 0).
type Progress struct {
	Layer, Layers         int
	Digest                string // the layer's diffID
	Bytes, Size           int64
	Done, Cached          bool
	TotalBytes, TotalSize int64
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

// withTotals returns ctx with its progress function (if any) wrapped to
// fill in the totals over layers of sizes sizes (layer i+1 is sizes[i]);
// an unknown size (0 or less) leaves the totals out.
func withTotals(ctx context.Context, sizes []int64) context.Context {
	emit := progressOf(ctx)
	if emit == nil {
		return ctx
	}
	var total int64
	for _, n := range sizes {
		if n <= 0 {
			return ctx
		}
		total += n
	}
	var mu sync.Mutex
	read := make([]int64, len(sizes))
	return context.WithValue(ctx, progressKey{}, func(p Progress) {
		mu.Lock()
		if i := p.Layer - 1; i >= 0 && i < len(read) {
			switch {
			case p.Cached || p.Done:
				read[i] = sizes[i]
			default:
				read[i] = min(p.Bytes, sizes[i])
			}
		}
		var sum int64
		for _, n := range read {
			sum += n
		}
		p.TotalBytes, p.TotalSize = sum, total
		mu.Unlock()
		emit(p)
	})
}
