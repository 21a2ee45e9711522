package client

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/berth-sh/berth/api"
)

// EventsQuery selects events across sandboxes (ListAllEvents,
// StreamEvents).
type EventsQuery struct {
	// Sandboxes are ids or names; empty: every sandbox the caller sees.
	Sandboxes []string
	// Types are event types ("state", "exec", ...); empty: every type.
	Types []string
	// After is the last event id already seen: only later ones come.
	After int64
}

func (q EventsQuery) values() url.Values {
	v := url.Values{}
	for _, s := range q.Sandboxes {
		v.Add("sandbox", s)
	}
	for _, t := range q.Types {
		v.Add("type", t)
	}
	if q.After > 0 {
		v.Set("after", strconv.FormatInt(q.After, 10))
	}
	return v
}

// path is the route of q: one sandbox's own (which its lease may read
// too), or GET /v1/events.
func (q EventsQuery) path() (string, url.Values) {
	v := q.values()
	if len(q.Sandboxes) == 1 {
		v.Del("sandbox")
		return sandboxPath(q.Sandboxes[0], "events"), v
	}
	return "/v1/events", v
}

// ListAllEvents returns the recorded events q selects, oldest first, all
// pages of GET /v1/events.
func (c *Client) ListAllEvents(ctx context.Context, q EventsQuery) ([]api.Event, error) {
	return listAll[api.Event](ctx, c, "/v1/events", q.values())
}

// StreamEvents calls each for every event q selects after q.After, then
// for each new one as the daemon records it (Server-Sent Events), until
// ctx ends (then it returns nil) or each returns an error (returned). A
// cut stream is reopened with Last-Event-ID, the id of the last event
// each was given, so none is lost or repeated; an answer that is not a
// stream (a revoked key, a sandbox not found) ends it with that error, as
// does a daemon unreachable for a minute.
func (c *Client) StreamEvents(ctx context.Context, q EventsQuery, each func(api.Event) error) error {
	last := q.After
	retry := 2 * time.Second
	var down time.Time // since when no stream could be opened
	for {
		err := c.streamOnce(ctx, q, last, func(f sseFrame) error {
			if f.retry > 0 {
				retry = min(f.retry, 30*time.Second)
			}
			if f.data == "" {
				return nil
			}
			var ev api.Event
			if err := json.Unmarshal([]byte(f.data), &ev); err != nil {
				return fmt.Errorf("event stream: bad event %q: %w", f.data, err)
			}
			if ev.ID <= last {
				return nil // never given twice, whatever the server sends
			}
			if err := each(ev); err != nil {
				return &callbackError{err}
			}
			last = ev.ID
			down = time.Time{}
			return nil
		})
		if ctx.Err() != nil {
			return nil
		}
		var cb *callbackError
		var apiErr *Error
		switch {
		case errors.As(err, &cb):
			return cb.err
		case errors.As(err, &apiErr) && apiErr.Status < 500 && apiErr.Status != http.StatusTooManyRequests:
			return err
		case err != nil && errors.As(err, new(*streamOpened)):
			down = time.Time{} // the stream ran, then broke: reconnect
		case err != nil:
			if down.IsZero() {
				down = time.Now()
			} else if time.Since(down) > time.Minute {
				return fmt.Errorf("event stream: %w", err)
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(retry):
		}
	}
}

type callbackError struct{ err error }

func (e *callbackError) Error() string { return e.err.Error() }

// streamOpened wraps the error of a stream that had been opened.
type streamOpened struct{ err error }

func (e *streamOpened) Error() string { return e.err.Error() }
func (e *streamOpened) Unwrap() error { return e.err }

// streamOnce opens one stream after last and reads it to its end.
func (c *Client) streamOnce(ctx context.Context, q EventsQuery, last int64, each func(sseFrame) error) error {
	path, v := q.path()
	v.Del("after")
	req, err := c.newRequest(ctx, http.MethodGet, path, v, nil)
	if err != nil {
		return err
	}
	req.Header.Set("Accept", "text/event-stream")
	if last > 0 {
		req.Header.Set("Last-Event-ID", strconv.FormatInt(last, 10))
	}
	resp, err := c.send(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/event-stream") {
		return fmt.Errorf("GET %s: answered %q, not an event stream (is the daemon older than this client?)", path, ct)
	}
	err = readSSE(resp.Body, each)
	var cb *callbackError
	if errors.As(err, &cb) {
		return err
	}
	if err == nil {
		err = io.ErrUnexpectedEOF // the daemon ended it: shutdown, a stall
	}
	return &streamOpened{err}
}

// sseFrame is one dispatched Server-Sent Events frame.
type sseFrame struct {
	id, event, data string
	retry           time.Duration
}

// maxSSELine bounds one line of an event stream.
const maxSSELine = 1 << 20

// readSSE reads a text/event-stream (the WHATWG HTML "event stream"
// interpretation: lines end in LF, CRLF or CR; a blank line dispatches;
// a line starting with a colon is a comment; "field: value" with one
// leading space dropped; data lines join with LF) and calls each for every
// dispatched frame, and for a frame holding only retry. It returns nil at
// the end of r.
func readSSE(r io.Reader, each func(sseFrame) error) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 4096), maxSSELine)
	sc.Split(scanSSELines)
	var (
		f       sseFrame
		data    []string
		hasData bool
	)
	for sc.Scan() {
		line := sc.Text()
		if line == "" {
			if hasData || f.retry > 0 {
				f.data = strings.Join(data, "\n")
				if err := each(f); err != nil {
					return err
				}
			}
			f, data, hasData = sseFrame{id: f.id}, nil, false
			continue
		}
		if strings.HasPrefix(line, ":") {
			continue
		}
		field, value, _ := strings.Cut(line, ":")
		value = strings.TrimPrefix(value, " ")
		switch field {
		case "id":
			if !strings.ContainsRune(value, 0) {
				f.id = value
			}
		case "event":
			f.event = value
		case "data":
			data, hasData = append(data, value), true
		case "retry":
			if n, err := strconv.ParseUint(value, 10, 31); err == nil && strings.Trim(value, "0123456789") == "" {
				f.retry = time.Duration(n) * time.Millisecond
			}
		}
	}
	return sc.Err()
}

// scanSSELines splits at LF, CRLF or CR.
func scanSSELines(data []byte, atEOF bool) (int, []byte, error) {
	for i, b := range data {
		switch b {
		case '\n':
			return i + 1, data[:i], nil
		case '\r':
			if i+1 < len(data) {
				if data[i+1] == '\n' {
					return i + 2, data[:i], nil
				}
				return i + 1, data[:i], nil
			}
			if atEOF {
				return i + 1, data[:i], nil
			}
			return 0, nil, nil // a LF may follow
		}
	}
	if atEOF && len(data) > 0 {
		return len(data), data, nil
	}
	return 0, nil, nil
}
