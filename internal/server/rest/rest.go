// Package rest is what every handler of the HTTP API (internal/server and
// its resource packages) shares: the JSON and NDJSON writers, the one
// mapping of error categories (internal/errdefs) to statuses and stable
// codes, request ids, paging, and the caller the guard put in the
// request's context. It knows no route and no engine: the root package
// server assembles the routes, the resource packages serve them.
package rest

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"sync"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/internal/auth"
	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/internal/identity"
	"github.com/berth-sh/berth/internal/sandbox"
	"github.com/berth-sh/berth/internal/store"
)

// JSON answers v as indented JSON with status.
func JSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}

// Error answers err as the JSON error body with its category's status
// and stable code (5xx logged with the request id; see errorFor).
func Error(w http.ResponseWriter, err error) {
	e, status := errorFor(w, err)
	JSON(w, status, api.ErrorBody{Error: *e})
}

// Actor is who the guard authorized r as.
func Actor(r *http.Request) string { return Principal(r).Actor }

// Tenant is the tenant of r's caller ("" for the host).
func Tenant(r *http.Request) string { return Principal(r).Tenant }

// Principal is r's caller, as the guard authorized it.
func Principal(r *http.Request) auth.Principal {
	p, _ := auth.From(r.Context())
	return p
}

// WithCaller puts p into ctx, and the identity the engine reads the owner
// of its store reads from. An anonymous request (a public port) carries
// none: it reaches a sandbox by its id alone, whoever owns it.
func WithCaller(ctx context.Context, p auth.Principal) context.Context {
	ctx = auth.With(ctx, p)
	if p.Actor == auth.Anonymous.Actor {
		return ctx
	}
	return identity.With(ctx, identity.Caller{Tenant: p.Tenant, Actor: p.Actor, KeyID: p.KeyID, Lease: p.Sandbox,
		Host: p.Host})
}

// OwnerOf is whose records a request reads (see WithCaller).
func OwnerOf(ctx context.Context) store.Owner {
	if c, ok := identity.From(ctx); ok && !c.Host {
		return store.OwnedBy(c.Tenant)
	}
	return store.AnyOwner
}

// WSProtocol is the WebSocket subprotocol of the exec and process
// attach routes (the root package server's BearerProtocol carries a
// browser's credential beside it).
const WSProtocol = "berth"

type trustedKey struct{}

// WithTrusted marks ctx as a request of a trusted listener (the unix
// socket: its callers are the host administrator) or not.
func WithTrusted(ctx context.Context, trusted bool) context.Context {
	return context.WithValue(ctx, trustedKey{}, trusted)
}

// Trusted reports whether ctx is a request of a trusted listener.
func Trusted(ctx context.Context) bool {
	t, _ := ctx.Value(trustedKey{}).(bool)
	return t
}

// Leasable reports whether a sandbox in state st may be acted on by a
// lease or port token: not once it stops, is quarantined, fails or goes.
func Leasable(st sandbox.State) bool {
	switch st {
	case sandbox.StateCreating, sandbox.StateRunning, sandbox.StatePaused, sandbox.StateStarting:
		return true
	}
	return false
}

// NDJSON writes a stream of JSON lines, flushing each, safe for
// concurrent writers (stdout and stderr).
type NDJSON struct {
	mu  sync.Mutex
	rc  *http.ResponseController
	enc *json.Encoder
	err error
}

// NewNDJSON starts an NDJSON answer on w.
func NewNDJSON(w http.ResponseWriter) *NDJSON {
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	return &NDJSON{rc: http.NewResponseController(w), enc: json.NewEncoder(w)}
}

// Send writes v as one line and flushes it; after a failed write every
// Send fails with that error.
func (n *NDJSON) Send(v any) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.err != nil {
		return n.err
	}
	if n.err = n.enc.Encode(v); n.err == nil {
		n.err = n.rc.Flush()
	}
	return n.err
}

// Err is the error of the failed write, if one failed.
func (n *NDJSON) Err() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.err
}

// A list's next page is announced in api.NextCursorHeader; a page without
// it is the last. The body stays the bare JSON array it always was, so
// callers that do not page keep working (up to the first page).

// PageOf reads a list request's limit (1 or more, default and cap
// store.MaxPage: a larger one is served as the cap) and cursor (the
// api.NextCursorHeader of the page before; one that is not is 400).
func PageOf(r *http.Request) (store.Page, error) {
	q := r.URL.Query()
	p := store.Page{Limit: store.MaxPage, Cursor: q.Get("cursor")}
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			return store.Page{}, errdefs.Invalid("limit must be a positive number of items (at most %d are served)", store.MaxPage)
		}
		p.Limit = min(n, store.MaxPage)
	}
	return p, nil
}

// SetNext announces the next page, if there is one.
func SetNext(w http.ResponseWriter, next string) {
	if next != "" {
		w.Header().Set(api.NextCursorHeader, next)
	}
}
