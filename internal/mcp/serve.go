package mcp

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// ServeStdio serves one session over in and out (the stdio of `berth
// mcp`) until the client closes in or ctx ends (SIGINT/SIGTERM), then
// deletes the session's ephemeral sandboxes.
func ServeStdio(ctx context.Context, opts Options, in io.ReadCloser, out io.WriteCloser) error {
	s := NewSession(opts, &mcp.ServerOptions{Logger: opts.Log})
	defer s.Cleanup()
	err := s.server.Run(ctx, &mcp.IOTransport{Reader: in, Writer: out})
	if errors.Is(err, context.Canceled) || errors.Is(err, io.EOF) {
		err = nil
	}
	return err
}

// HTTPOptions configure an HTTPHandler.
type HTTPOptions struct {
	// MaxSessions bounds the live sessions (default 64); a new session
	// past it is refused with 503.
	MaxSessions int
	// MaxSessionsPerTenant bounds the live sessions of one tenant's
	// credentials together (default a quarter of MaxSessions, at least
	// 1), so no tenant takes every session; a new one past it is refused
	// with 429. The host's (tenant "") are bound by MaxSessions only.
	MaxSessionsPerTenant int
	// IdleTimeout closes a session that made no request for this long
	// (default 15 minutes); its ephemeral sandboxes are deleted.
	IdleTimeout time.Duration
	Log         *slog.Logger
}

// Caller is who makes an HTTP request, as the daemon authenticated it.
type Caller struct {
	// Owner names the credential: a session answers only requests whose
	// Owner is the one that created it.
	Owner string
	// Tenant is the caller's tenant ("" the host's), whose share of the
	// sessions a new one counts against.
	Tenant string
	// Options are the session options for this caller: its Client speaks
	// with the caller's credential.
	Options func() Options
	// Bind, if set, ties a new session to the caller's credential: the
	// context ends when the credential does (revoked, expired), and the
	// session ends with it. release is called when the session ends.
	Bind func() (alive context.Context, release func())
}

// HTTPHandler serves MCP's streamable HTTP transport: one Session per MCP
// session, owned by the credential that created it.
type HTTPHandler struct {
	opts   HTTPOptions
	caller func(*http.Request) (Caller, bool)
	h      *mcp.StreamableHTTPHandler

	mu       sync.Mutex
	sessions map[string]*httpSession
	pending  int            // sessions being created
	held     int            // slots held by sessions (a probe's is given back before its client hears)
	tenants  map[string]int // live sessions by tenant, once their client has their id (pending ones count against MaxSessions only)
	closed   bool
}

type httpSession struct {
	owner   string
	tenant  string
	s       *Session
	release func() // of the credential binding (Caller.Bind)
	counted bool   // in tenants: the client was told its id
	holds   bool   // in held: a slot of MaxSessions
}

// slotWriter gives back the slot of a session the response does not name
// (the SDK makes one to answer a client's discovery probe) when the
// response's headers are written, before the client can read them: its
// next request, the real initialize, must not find the slot still taken.
// Ending the probe's session waits until the SDK has answered with it.
type slotWriter struct {
	http.ResponseWriter
	h       *HTTPHandler
	created *string
	done    bool
}

func (w *slotWriter) headers() {
	if w.done {
		return
	}
	w.done = true
	w.h.mu.Lock()
	defer w.h.mu.Unlock()
	id := *w.created
	if hs := w.h.sessions[id]; hs != nil && hs.holds && w.Header().Get(SessionHeader) != id {
		hs.holds = false
		w.h.held--
	}
}

func (w *slotWriter) WriteHeader(code int) {
	w.headers()
	w.ResponseWriter.WriteHeader(code)
}

func (w *slotWriter) Write(p []byte) (int, error) {
	w.headers()
	return w.ResponseWriter.Write(p)
}

func (w *slotWriter) Flush() {
	w.headers()
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// Unwrap lets http.ResponseController reach the connection.
func (w *slotWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// NewHTTPHandler returns the handler. caller reports who makes a request
// (false: nobody authenticated; the request is refused).
func NewHTTPHandler(opts HTTPOptions, caller func(*http.Request) (Caller, bool)) *HTTPHandler {
	if opts.MaxSessions <= 0 {
		opts.MaxSessions = 64
	}
	if opts.MaxSessionsPerTenant <= 0 {
		opts.MaxSessionsPerTenant = max(1, opts.MaxSessions/4)
	}
	if opts.IdleTimeout <= 0 {
		opts.IdleTimeout = 15 * time.Minute
	}
	h := &HTTPHandler{opts: opts, caller: caller, sessions: map[string]*httpSession{}, tenants: map[string]int{}}
	h.h = mcp.NewStreamableHTTPHandler(h.newServer, &mcp.StreamableHTTPOptions{
		SessionTimeout: opts.IdleTimeout,
		Logger:         opts.Log,
		// The daemon's own authentication guards the route; DNS
		// rebinding needs a browser to hold a credential it would not.
		DisableLocalhostProtection: true,
	})
	return h
}

// SessionHeader is the header of the streamable HTTP transport that names
// a session.
const SessionHeader = "Mcp-Session-Id"

func (h *HTTPHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	c, ok := h.caller(r)
	if !ok {
		http.Error(w, "unauthenticated", http.StatusUnauthorized)
		return
	}
	if id := r.Header.Get(SessionHeader); id != "" {
		h.mu.Lock()
		hs := h.sessions[id]
		h.mu.Unlock()
		if hs == nil || hs.owner != c.Owner {
			// Another credential's session is answered as no session
			// at all: its id is not confirmed.
			http.Error(w, "session not found", http.StatusNotFound)
			return
		}
	} else if r.Method == http.MethodPost {
		h.mu.Lock()
		full := h.closed || h.held+h.pending >= h.opts.MaxSessions
		tenantFull := !full && c.Tenant != "" && h.tenants[c.Tenant] >= h.opts.MaxSessionsPerTenant
		if !full && !tenantFull {
			h.pending++
		}
		h.mu.Unlock()
		if full {
			http.Error(w, "too many MCP sessions", http.StatusServiceUnavailable)
			return
		}
		if tenantFull {
			http.Error(w, "too many MCP sessions in this tenant; close one", http.StatusTooManyRequests)
			return
		}
		created := new(string)
		sw := &slotWriter{ResponseWriter: w, h: h, created: created}
		h.h.ServeHTTP(sw, r.WithContext(context.WithValue(r.Context(), callerKey{}, callerCtx{c, created})))
		sw.headers() // a response with no body still frees an unnamed session's slot
		h.mu.Lock()
		if *created == "" { // no session made: the slot held is free again
			h.pending--
		}
		hs := h.sessions[*created]
		h.mu.Unlock()
		if hs != nil && w.Header().Get(SessionHeader) != *created {
			// A session the client was never told of (the SDK makes one
			// for a stateless server/discover probe): nobody can use it, so
			// it holds no slot.
			h.end(*created)
			return
		}
		if hs != nil {
			h.mu.Lock()
			if h.sessions[*created] == hs { // a session the client holds: its tenant's share
				hs.counted = true
				h.tenants[hs.tenant]++
			}
			h.mu.Unlock()
			h.watch(*created, hs, c)
		}
		return
	}
	h.h.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), callerKey{}, callerCtx{c, nil})))
}

type callerKey struct{}

type callerCtx struct {
	Caller
	created *string // where newServer leaves the id of the session it made
}

// untenant gives back a session of tenant (h.mu held).
func (h *HTTPHandler) untenant(tenant string) {
	if h.tenants[tenant]--; h.tenants[tenant] <= 0 {
		delete(h.tenants, tenant)
	}
}

// watch ends session id when its connection closes (DELETE, idle expiry,
// Close) or its caller's credential ends, or at once when the request
// that made it did not connect one.
func (h *HTTPHandler) watch(id string, hs *httpSession, c Caller) {
	var ss *mcp.ServerSession
	for s := range hs.s.server.Sessions() {
		ss = s
	}
	if ss == nil {
		h.end(id)
		return
	}
	var alive context.Context
	if c.Bind != nil {
		var release func()
		alive, release = c.Bind()
		h.mu.Lock()
		gone := h.sessions[id] != hs // Close took it already
		if !gone {
			hs.release = release
		}
		h.mu.Unlock()
		if gone {
			release()
		}
	}
	done := make(chan struct{})
	go func() {
		_ = ss.Wait()
		close(done)
		h.end(id)
	}()
	if alive != nil {
		go func() {
			select {
			case <-alive.Done():
				ss.Close() // the credential ended: so does the session
			case <-done:
			}
		}()
	}
}

// newServer makes the server of a new session (the SDK calls it for an
// initialize request without a session id).
func (h *HTTPHandler) newServer(r *http.Request) *mcp.Server {
	c, _ := r.Context().Value(callerKey{}).(callerCtx)
	if c.Owner == "" || c.created == nil {
		return nil
	}
	// The SDK also calls this for requests it then serves from an
	// existing session; only GetSessionID, called when it really makes
	// one, registers the session.
	var s *Session
	s = NewSession(c.Options(), &mcp.ServerOptions{
		Logger: h.opts.Log,
		GetSessionID: func() string {
			id := newSessionID()
			h.mu.Lock()
			if *c.created == "" {
				// The pending slot becomes this session's at once, not
				// when the request that made it ends: the client may
				// open its next session before then.
				h.pending--
			}
			h.sessions[id] = &httpSession{owner: c.Owner, tenant: c.Tenant, s: s, holds: true}
			h.held++
			*c.created = id
			h.mu.Unlock()
			return id
		},
	})
	return s.server
}

// end forgets a session and deletes its ephemeral sandboxes.
func (h *HTTPHandler) end(id string) {
	h.mu.Lock()
	hs := h.sessions[id]
	delete(h.sessions, id)
	var release func()
	if hs != nil {
		if hs.counted {
			h.untenant(hs.tenant)
		}
		if hs.holds {
			h.held--
		}
		release = hs.release
	}
	h.mu.Unlock()
	if release != nil {
		release()
	}
	if hs != nil {
		hs.s.Cleanup()
	}
}

// Sessions is the number of live sessions.
func (h *HTTPHandler) Sessions() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.sessions)
}

// Close ends every session (deleting their ephemeral sandboxes) and
// refuses new ones: the daemon is shutting down.
func (h *HTTPHandler) Close() {
	h.mu.Lock()
	h.closed = true
	all := make([]*httpSession, 0, len(h.sessions))
	var releases []func()
	for id, hs := range h.sessions {
		all = append(all, hs)
		if hs.release != nil {
			releases = append(releases, hs.release)
		}
		delete(h.sessions, id)
		if hs.counted {
			h.untenant(hs.tenant)
		}
	}
	h.mu.Unlock()
	var wg sync.WaitGroup
	for _, hs := range all {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ss := range hs.s.server.Sessions() {
				ss.Close()
			}
			hs.s.Cleanup()
		}()
	}
	wg.Wait()
	for _, release := range releases {
		release()
	}
}

func newSessionID() string {
	var b [24]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
