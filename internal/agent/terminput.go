package agent

import (
	"io"
	"sync"
)

// TermInput is a terminal's input as its user made it: bytes typed and
// size changes, in one order. A resize carried beside the input on a
// channel of its own reaches the agent by another goroutine and can be
// overtaken by bytes typed after it (a shell then answers `stty size`
// with the old size). Given as an exec's or an attach's Stdin, the
// client sends a TermInput's bytes and resizes as frames in the order
// they were written.
//
// One goroutine writes (Write, Resize, CloseWithError) and one reads
// (Next or Read, CloseRead). Like io.Pipe, a Write waits until the reader
// takes its bytes, so a slow process slows its terminal rather than
// queueing without bound; unlike io.Pipe, the bytes are copied, and a
// resize is never dropped.
type TermInput struct {
	ch     chan termEvent // unbuffered: a write waits for its reader
	rdone  chan struct{}  // closed by CloseRead
	wdone  chan struct{}  // closed by CloseWithError
	rOnce  sync.Once
	wOnce  sync.Once
	werr   error // io.EOF or the writer's error; set before wdone closes
	rest   []byte
	closed bool // reader side: wdone seen
}

type termEvent struct {
	data   []byte
	resize *Resize
}

// NewTermInput returns an empty terminal input.
func NewTermInput() *TermInput {
	return &TermInput{ch: make(chan termEvent), rdone: make(chan struct{}), wdone: make(chan struct{})}
}

// Write queues p as typed input. It fails with io.ErrClosedPipe once the
// reader is gone.
func (t *TermInput) Write(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	if err := t.send(termEvent{data: append([]byte(nil), p...)}); err != nil {
		return 0, err
	}
	return len(p), nil
}

// Resize queues a size change after everything written before it.
func (t *TermInput) Resize(rs Resize) error {
	return t.send(termEvent{resize: &rs})
}

func (t *TermInput) send(ev termEvent) error {
	select {
	case <-t.wdone:
		return io.ErrClosedPipe
	default:
	}
	select {
	case t.ch <- ev:
		return nil
	case <-t.rdone:
		return io.ErrClosedPipe
	}
}

// CloseWithError ends the input: the reader gets err after what was
// written before, or io.EOF when err is nil.
func (t *TermInput) CloseWithError(err error) {
	t.wOnce.Do(func() {
		if err == nil {
			err = io.EOF
		}
		t.werr = err
		close(t.wdone)
	})
}

// Close ends the input with io.EOF.
func (t *TermInput) Close() error {
	t.CloseWithError(nil)
	return nil
}

// CloseRead tells the writer nobody reads any more.
func (t *TermInput) CloseRead() {
	t.rOnce.Do(func() { close(t.rdone) })
}

// Next returns the next input: n bytes read into p, or a size change
// (n 0), in the order they were written; then the writer's error. A
// write larger than p is returned over several calls.
func (t *TermInput) Next(p []byte) (int, *Resize, error) {
	if len(t.rest) > 0 {
		n := copy(p, t.rest)
		t.rest = t.rest[n:]
		return n, nil, nil
	}
	if t.closed {
		return 0, nil, t.werr
	}
	// The single writer never writes after closing, so a closed wdone
	// means nothing is left to take from ch.
	select {
	case ev := <-t.ch:
		if ev.resize != nil {
			return 0, ev.resize, nil
		}
		n := copy(p, ev.data)
		t.rest = ev.data[n:]
		return n, nil, nil
	case <-t.wdone:
		t.closed = true
		return 0, nil, t.werr
	}
}

// Read reads typed input only; size changes are skipped.
func (t *TermInput) Read(p []byte) (int, error) {
	for {
		n, rs, err := t.Next(p)
		if rs == nil || err != nil {
			return n, err
		}
	}
}

// orderedInput is what the client's stdin pumps look for to send
// resizes in order with the bytes.
type orderedInput interface {
	Next(p []byte) (int, *Resize, error)
}
