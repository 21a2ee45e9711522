package image

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"sync/atomic"
	"testing"
)

// blockingReader blocks its first Read until ctx ends, then fails with
// ctx's error: a download its caller gives up on half-way.
type blockingReader struct {
	ctx     context.Context
	started chan struct{}
}

func (r blockingReader) Read([]byte) (int, error) {
	close(r.started)
	<-r.ctx.Done()
	return 0, r.ctx.Err()
}

// Two unpacks of one layer: the first holds the layer's lock and is
// cancelled while reading; the second, waiting for the lock, must not fail
// with it: it unpacks the layer from its own stream once the lock is free.
func TestEnsureLayerCancelledFirstCaller(t *testing.T) {
	s := newStore(t)
	data := mkTar(t, reg("f", "payload"))
	sum := sha256.Sum256(data)
	id := "sha256:" + hex.EncodeToString(sum[:])

	firstCtx, cancel := context.WithCancel(context.Background())
	started := make(chan struct{})
	var opens atomic.Int32
	first := layerSource{diffID: id, open: func(context.Context) (io.ReadCloser, error) {
		opens.Add(1)
		return io.NopCloser(blockingReader{firstCtx, started}), nil
	}}
	second := layerSource{diffID: id, open: func(context.Context) (io.ReadCloser, error) {
		opens.Add(1)
		return io.NopCloser(bytes.NewReader(data)), nil
	}}
	firstErr := make(chan error, 1)
	go func() { firstErr <- s.ensureLayer(firstCtx, first) }()
	<-started // the first holds the lock and is reading
	secondErr := make(chan error, 1)
	go func() { secondErr <- s.ensureLayer(context.Background(), second) }()
	cancel()
	if err := <-firstErr; !errors.Is(err, context.Canceled) {
		t.Fatalf("first caller: %v, want its cancellation", err)
	}
	if err := <-secondErr; err != nil {
		t.Fatalf("second caller failed with the first: %v", err)
	}
	if !s.HasLayer(id) || readFile(t, s.LayerPath(id)+"/f") != "payload" {
		t.Fatal("the layer is not in the store")
	}
	if n := opens.Load(); n != 2 {
		t.Fatalf("%d opens, want 2", n)
	}
	assertNoScratch(t, s)
}
