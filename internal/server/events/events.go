// Package events serves the event routes (GET /v1/events and
// /v1/sandboxes/{id}/events): a page of JSON, or, for a request that
// accepts text/event-stream, a live Server-Sent Events stream
// (docs/events.md).
//
// A stream is a follower of the store: it reads the events after the last
// id it sent, sends them, and waits for the store's next commit of events
// (store.Events.EventsWritten), a poll tick (another daemon sharing the
// PostgreSQL store commits without waking this one), a heartbeat, or the
// end — its credential's end included (package server, live.go). Event ids become visible in id
// order (the store's EventOrderLock), so reading "after the last id sent"
// neither skips nor repeats an event, committed concurrently or not, and a
// client that comes back with Last-Event-ID continues exactly where it
// was. Nothing is queued for a subscriber: what it has not read waits in
// the store, so a slow client costs the engine nothing, and one that stops
// reading is cut off when a write does not complete within
// streamWriteTimeout (its socket buffers are the bounded buffer); it
// resumes from its last id.
package events

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"mime"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/internal/auth"
	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/internal/sandbox"
	"github.com/berth-sh/berth/internal/server/rest"
	"github.com/berth-sh/berth/internal/store"
)

const (
	// streamWriteTimeout bounds one write of frames: a client that does
	// not take them in that long is cut off.
	streamWriteTimeout = 30 * time.Second
	// streamRetry is the reconnection delay the stream asks for (ms).
	streamRetry = 2000
	// MaxStreamsPerKey caps the open streams of one credential, and
	// MaxStreamsPerTenant those of one tenant's credentials together (its
	// admins can make many keys, and every sandbox's lease is one).
	MaxStreamsPerKey    = 16
	MaxStreamsPerTenant = 64
	// MaxEventFilters caps the sandbox= and type= values of one request.
	MaxEventFilters = 32
)

const (
	// defaultStreamPage is the most events one read of a stream holds in
	// memory (Handlers.Page).
	defaultStreamPage = 256
	// streamPoll is how often a stream reads without a wake-up: the
	// bound on how late it sees another daemon's events.
	streamPoll = time.Second
	// defaultStreamPing is the heartbeat of an idle stream (Handlers.Ping).
	defaultStreamPing = 15 * time.Second
)

// Engine is what the event routes read of the engine.
type Engine interface {
	Get(ctx context.Context, ref string) (*sandbox.Sandbox, error)
	Events(ctx context.Context, ref string, after int64, p store.Page) ([]*sandbox.Event, string, error)
	AllEvents(ctx context.Context, ids, types []string, after int64, p store.Page) (evs []*sandbox.Event, next string, last int64, err error)
	EventsWritten() <-chan struct{}
	LatestEventID(ctx context.Context) (int64, error)
}

// Handlers serves the event routes.
type Handlers struct {
	E Engine
	// Ping is the heartbeat of an idle stream, read per stream (0: 15 s).
	Ping func() time.Duration
	// Page is the most events one read of a stream holds (0: 256).
	Page int
	// Log is where a failed stream read is told.
	Log func() *slog.Logger

	streams streams
}

// streams tracks the open event streams: per-credential counts, and the
// channel closed at shutdown.
type streams struct {
	mu      sync.Mutex
	open    map[string]int
	closing chan struct{}
	closed  bool
}

func (st *streams) init() {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.closing == nil {
		st.closing = make(chan struct{})
		st.open = map[string]int{}
	}
}

// admit counts a new stream of key, refusing one over MaxStreamsPerKey
// or, for a tenant's credential (tenant not ""), over
// MaxStreamsPerTenant; the host's are not capped by tenant.
func (st *streams) admit(key, tenant string) (release func(), err error) {
	st.init()
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.closed {
		return nil, errdefs.Unavailable("the daemon is shutting down")
	}
	if st.open[key] >= MaxStreamsPerKey {
		return nil, errdefs.Exhausted("%d event streams are open with this credential already; close one", MaxStreamsPerKey)
	}
	tkey := "\x01tenant\x00" + tenant
	if tenant != "" && st.open[tkey] >= MaxStreamsPerTenant {
		return nil, errdefs.Exhausted("%d event streams are open in tenant %s already; close one", MaxStreamsPerTenant, tenant)
	}
	keys := []string{key}
	if tenant != "" {
		keys = append(keys, tkey)
	}
	for _, k := range keys {
		st.open[k]++
	}
	return func() {
		st.mu.Lock()
		defer st.mu.Unlock()
		for _, k := range keys {
			if st.open[k]--; st.open[k] <= 0 {
				delete(st.open, k)
			}
		}
	}, nil
}

// Close ends every open event stream and refuses new ones: the daemon
// calls it before shutting its listeners down, so streams do not hold the
// shutdown up (their clients reconnect to the next daemon).
func (h *Handlers) Close() {
	h.streams.init()
	h.streams.mu.Lock()
	defer h.streams.mu.Unlock()
	if !h.streams.closed {
		h.streams.closed = true
		close(h.streams.closing)
	}
}

// eventQuery is what an events request asks for.
type eventQuery struct {
	Sandboxes []string // sandbox= (ids or names); empty: every one
	Types     []string // type=; empty: every type
	After     int64    // after=, or the Last-Event-ID header, which wins
	Latest    bool     // after=latest (and no Last-Event-ID): only what comes next
}

// parseEventQuery reads an events request's filters and position:
// sandbox= and type= (repeatable, at most MaxEventFilters each), after= and
// Last-Event-ID (an event id: a non-negative decimal number).
func parseEventQuery(q url.Values, lastEventID string) (eventQuery, error) {
	var eq eventQuery
	for _, k := range []string{"sandbox", "type"} {
		vs := q[k]
		if len(vs) > MaxEventFilters {
			return eventQuery{}, errdefs.Invalid("at most %d %s= filters are served", MaxEventFilters, k)
		}
		for _, v := range vs {
			if err := checkFilterValue(k, v); err != nil {
				return eventQuery{}, err
			}
		}
	}
	eq.Sandboxes, eq.Types = dedupe(q["sandbox"]), dedupe(q["type"])
	if v := q.Get("after"); v == "latest" {
		eq.Latest = true
	} else if v != "" {
		n, err := parseEventID(v)
		if err != nil {
			return eventQuery{}, errdefs.Invalid("after must be an event id or latest")
		}
		eq.After = n
	}
	if lastEventID != "" {
		eq.Latest = false
		n, err := parseEventID(strings.TrimSpace(lastEventID))
		if err != nil {
			return eventQuery{}, errdefs.Invalid("Last-Event-ID must be an event id")
		}
		eq.After = n
	}
	return eq, nil
}

// query reads an events request's query; after=latest becomes the
// newest event's id now, so a page is empty and a stream holds only what
// comes next (a console that lists first and then follows needs no
// replay of the whole history).
func (h *Handlers) query(r *http.Request) (eventQuery, error) {
	eq, err := parseEventQuery(r.URL.Query(), r.Header.Get("Last-Event-ID"))
	if err != nil || !eq.Latest {
		return eq, err
	}
	eq.After, err = h.E.LatestEventID(r.Context())
	return eq, err
}

// parseEventID reads an event id: decimal digits only (no sign, no
// spaces), at most int64.
func parseEventID(v string) (int64, error) {
	if v == "" || len(v) > 19 || strings.Trim(v, "0123456789") != "" {
		return 0, errdefs.Invalid("not an event id")
	}
	return strconv.ParseInt(v, 10, 64)
}

// checkFilterValue refuses a sandbox= or type= value no sandbox id, name
// or event type can be: empty, longer than 128 bytes, or with a byte
// outside [A-Za-z0-9._-].
func checkFilterValue(k, v string) error {
	if v == "" || len(v) > 128 {
		return errdefs.Invalid("%s= must be 1 to 128 characters", k)
	}
	for i := 0; i < len(v); i++ {
		c := v[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			return errdefs.Invalid("%s= holds a character no %s has", k, k)
		}
	}
	return nil
}

func dedupe(vs []string) []string {
	var out []string
	seen := map[string]bool{}
	for _, v := range vs {
		if !seen[v] {
			seen[v] = true
			out = append(out, v)
		}
	}
	return out
}

// WantsStream reports whether r accepts text/event-stream.
func WantsStream(r *http.Request) bool {
	for _, h := range r.Header.Values("Accept") {
		for _, part := range strings.Split(h, ",") {
			if mt, _, err := mime.ParseMediaType(strings.TrimSpace(part)); err == nil && mt == "text/event-stream" {
				return true
			}
		}
	}
	return false
}

// EventJSON is an event as the events API writes it: the body of its
// webhook delivery too (webhook.Config.Encode).
func EventJSON(e *sandbox.Event) ([]byte, error) { return json.Marshal(apiEvent(e)) }

func apiEvent(e *sandbox.Event) api.Event {
	return api.Event{ID: e.ID, SandboxID: e.SandboxID, Time: e.Time, Type: e.Type,
		From: string(e.From), To: string(e.To), Actor: e.Actor, Cause: string(e.Cause),
		Reason: e.Reason, Outcome: e.Outcome, Message: e.Message}
}

// Sandbox serves GET /v1/sandboxes/{id}/events: that sandbox's events, a
// page or a stream.
func (h *Handlers) Sandbox(w http.ResponseWriter, r *http.Request) {
	eq, err := h.query(r)
	if err != nil {
		rest.Error(w, err)
		return
	}
	if len(eq.Sandboxes) > 0 {
		rest.Error(w, errdefs.Invalid("sandbox= filters GET /v1/events; this route is one sandbox's"))
		return
	}
	sb, err := h.E.Get(r.Context(), r.PathValue("id"))
	if err != nil {
		rest.Error(w, err)
		return
	}
	if WantsStream(r) {
		h.streamEvents(w, r, []string{sb.ID}, eq.Types, eq.After)
		return
	}
	p, err := rest.PageOf(r)
	if err != nil {
		rest.Error(w, err)
		return
	}
	var evs []*sandbox.Event
	var next string
	if len(eq.Types) == 0 {
		evs, next, err = h.E.Events(r.Context(), sb.ID, eq.After, p)
	} else {
		evs, next, _, err = h.E.AllEvents(r.Context(), []string{sb.ID}, eq.Types, eq.After, p)
	}
	if err != nil {
		rest.Error(w, err)
		return
	}
	writeEvents(w, evs, next)
}

// All serves GET /v1/events: the events of every sandbox the caller
// sees, filtered; a page or a stream.
func (h *Handlers) All(w http.ResponseWriter, r *http.Request) {
	eq, err := h.query(r)
	if err != nil {
		rest.Error(w, err)
		return
	}
	// Names become ids now: a stream follows the sandbox it was asked
	// for, whatever later takes the name. One the caller does not see is
	// 404, as on every route.
	var ids []string
	for _, ref := range eq.Sandboxes {
		sb, err := h.E.Get(r.Context(), ref)
		if err != nil {
			rest.Error(w, err)
			return
		}
		ids = append(ids, sb.ID)
	}
	if WantsStream(r) {
		h.streamEvents(w, r, dedupe(ids), eq.Types, eq.After)
		return
	}
	p, err := rest.PageOf(r)
	if err != nil {
		rest.Error(w, err)
		return
	}
	evs, next, _, err := h.E.AllEvents(r.Context(), dedupe(ids), eq.Types, eq.After, p)
	if err != nil {
		rest.Error(w, err)
		return
	}
	writeEvents(w, evs, next)
}

func writeEvents(w http.ResponseWriter, evs []*sandbox.Event, next string) {
	rest.SetNext(w, next)
	out := make([]api.Event, 0, len(evs))
	for _, e := range evs {
		out = append(out, apiEvent(e))
	}
	rest.JSON(w, 200, out)
}

// streamEvents serves the events of sandboxes ids (every one the caller
// sees when empty) of types (every one when empty) after id after, then
// live, as Server-Sent Events (see the top of this file).
func (h *Handlers) streamEvents(w http.ResponseWriter, r *http.Request, ids, types []string, after int64) {
	ctx := r.Context()
	p, _ := auth.From(ctx)
	release, err := h.streams.admit(p.Actor+"\x00"+p.LeaseID, p.Tenant)
	if err != nil {
		rest.Error(w, err)
		return
	}
	defer release()
	// The first read happens before the answer's status, so a failing
	// store is a JSON error and not an empty stream.
	page := h.Page
	if page <= 0 {
		page = defaultStreamPage
	}
	wake := h.E.EventsWritten()
	evs, next, last, err := h.E.AllEvents(ctx, ids, types, after, store.Page{Limit: page})
	if err != nil {
		rest.Error(w, err)
		return
	}
	hdr := w.Header()
	hdr.Set("Content-Type", "text/event-stream")
	hdr.Set("Cache-Control", "no-cache")
	hdr.Set("X-Accel-Buffering", "no") // a proxy in front must not buffer it
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	var buf bytes.Buffer
	send := func() bool {
		_ = rc.SetWriteDeadline(time.Now().Add(streamWriteTimeout))
		_, err := w.Write(buf.Bytes())
		buf.Reset()
		if err == nil {
			err = rc.Flush()
		}
		return err == nil
	}
	buf.WriteString("retry: " + strconv.Itoa(streamRetry) + "\n\n")
	var pingEvery time.Duration
	if h.Ping != nil {
		pingEvery = h.Ping()
	}
	if pingEvery <= 0 {
		pingEvery = defaultStreamPing
	}
	ping := time.NewTicker(pingEvery)
	defer ping.Stop()
	poll := time.NewTicker(streamPoll)
	defer poll.Stop()
	h.streams.init()
	for {
		for _, e := range evs {
			writeFrame(&buf, e)
		}
		if buf.Len() > 0 && !send() {
			return
		}
		evs, after = nil, last
		// A stream that never catches up (a long history, a slow reader)
		// still ends: its credential's end (the request's context is bound
		// to it: package server, live.go), cancellation and shutdown are looked at on every
		// pass, not only when idle.
		select {
		case <-ctx.Done():
			return
		case <-h.streams.closing:
			return
		default:
		}
		if next == "" { // caught up: wait for more
			select {
			case <-wake:
			case <-poll.C:
			case <-ping.C:
				buf.WriteString(": ping\n\n")
				if !send() {
					return
				}
				continue
			case <-ctx.Done():
				return
			case <-h.streams.closing:
				return
			}
		}
		wake = h.E.EventsWritten()
		evs, next, last, err = h.E.AllEvents(ctx, ids, types, after, store.Page{Limit: page})
		if err != nil {
			if ctx.Err() == nil {
				rid := rest.RequestID(w)
				h.logger().Warn("event stream read failed; the client resumes from its last id", "err", err, "request_id", rid)
			}
			return
		}
	}
}

// writeFrame appends e as one SSE frame: its id, its type as the event
// name, and the api.Event JSON on one line (JSON escapes every newline).
func writeFrame(buf *bytes.Buffer, e *sandbox.Event) {
	data, _ := json.Marshal(apiEvent(e))
	buf.WriteString("id: " + strconv.FormatInt(e.ID, 10) + "\n")
	if t := e.Type; t != "" && !strings.ContainsAny(t, "\r\n") {
		buf.WriteString("event: " + t + "\n")
	}
	buf.WriteString("data: ")
	buf.Write(data)
	buf.WriteString("\n\n")
}

func (h *Handlers) logger() *slog.Logger {
	if h.Log == nil {
		return slog.Default()
	}
	return h.Log()
}
