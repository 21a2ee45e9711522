package edge

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"time"

	"github.com/berth-sh/berth/internal/errdefs"
)

// Deadlines gives a request on a non-streaming route a deadline to send
// its body in (bodyTimeout, lifted once the body has been read, so a
// handler still working is not cut off by the connection's background
// read) and one to be answered in (writeTimeout). Streaming routes get
// neither: their own work bounds them; an upload's body gets an idle
// deadline instead, moved ahead by each read that brings data. Deadlines
// are per connection, so each request sets both, lifting what an earlier
// one on the same keep-alive connection left.
func Deadlines(w http.ResponseWriter, r *http.Request, stream, upload bool, writeTimeout, bodyTimeout time.Duration) *http.Request {
	rc := http.NewResponseController(w)
	if stream || writeTimeout <= 0 {
		_ = rc.SetWriteDeadline(time.Time{})
	} else {
		_ = rc.SetWriteDeadline(time.Now().Add(writeTimeout))
	}
	if upload && bodyTimeout > 0 && r.Body != nil && r.Body != http.NoBody {
		if rc.SetReadDeadline(time.Now().Add(bodyTimeout)) != nil {
			return r
		}
		r2 := r.WithContext(r.Context())
		r2.Body = &idleBody{ReadCloser: r.Body, idle: bodyTimeout, rc: rc}
		return r2
	}
	if stream || bodyTimeout <= 0 || r.Body == nil || r.Body == http.NoBody {
		return r
	}
	if rc.SetReadDeadline(time.Now().Add(bodyTimeout)) != nil {
		return r
	}
	r2 := r.WithContext(r.Context())
	r2.Body = &deadlineBody{ReadCloser: r.Body, lift: func() { _ = rc.SetReadDeadline(time.Time{}) }}
	return r2
}

// deadlineBody lifts the body's read deadline when the body has been
// read to its end.
type deadlineBody struct {
	io.ReadCloser
	lift func()
	done bool
}

func (b *deadlineBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	// Only at the end: after a timeout the deadline must stay, or
	// net/http's discard of the unread rest would wait for it forever.
	if err == io.EOF && !b.done {
		b.done = true
		b.lift()
	}
	return n, err
}

// idleBody is an upload's body: each read that brings data moves the read
// deadline idle ahead; at the end it is lifted. A read that times out is
// the client's fault, a 400 naming the pause allowed.
type idleBody struct {
	io.ReadCloser
	idle time.Duration
	rc   *http.ResponseController
	done bool
}

func (b *idleBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	switch {
	case err == io.EOF && !b.done:
		b.done = true
		_ = b.rc.SetReadDeadline(time.Time{})
	case errors.Is(err, os.ErrDeadlineExceeded):
		err = &errdefs.Error{Category: errdefs.ErrInvalid, Err: err,
			Msg: fmt.Sprintf("the upload stalled: no data for %s (--http-body-timeout)", b.idle)}
	case n > 0 && err == nil:
		_ = b.rc.SetReadDeadline(time.Now().Add(b.idle))
	}
	return n, err
}
