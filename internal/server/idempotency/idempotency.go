// Package idempotency is the API's Idempotency-Key machinery (as Stripe's
// API has it). A request to a route wrapped by Keys.Wrap that carries an
// Idempotency-Key header is recorded in the store before it acts — with
// the ids the objects it makes will get — and its answer when it has one.
// The same key again (same caller, same route) within TTL gets the first
// answer, byte for byte, instead of acting again; with another request
// body, 422 idempotency_key_reused; while the first attempt still runs,
// the retry waits up to Wait for it, then 409 idempotency_in_progress with
// Retry-After. 4xx answers are kept; 5xx answers are not (the retry acts
// again).
//
// Crash safety: a pending key whose attempt died with the daemon (same
// node, another boot; or this boot and no longer running) is taken over
// by the retry, which asks the route (Kind.Found) for the recorded ids:
// objects the dead attempt made (the reconciler finishes interrupted
// creates after a restart) are answered once they are no longer creating;
// if it made none, the retry acts, with fresh ids.
//
// The server supplies what is its own (Config): the store, how errors and
// JSON are written, how ids are made and lease tokens sealed.
//
// In berth: POST /v1/sandboxes, /fork, /snapshots and POST /v1/volumes are
// wrapped (internal/server/idempotency.go holds each route's Kind). A key
// is 1-255 printable ASCII bytes (ParseKey; else 400
// invalid_idempotency_key), scoped to the caller (tenant and actor) and the
// route, and expires 24 h after its first request (the reconciler purges
// expired keys). Before the handler acts the key is put if absent (exactly
// one concurrent attempt wins) with the hash of the canonical request
// (method, path, JSON body re-encoded with sorted keys), its owner
// (node|boot|seq) and the ids the new objects will get; a warm-pool claim
// hands out the member's own id, which CreateOptions.Reserve records before
// the claim commits. Stored answers have lease tokens replaced by a marker
// and minted again on replay (Idempotent-Replayed: true). Another node's
// pending key is never presumed dead. Not covered: POST /v1/run (its answer
// is live output) and snapshot restore; a fork interrupted after some
// children were recorded answers with those children.
package idempotency

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/berth-sh/berth/internal/auth"
	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/internal/store"
)

// Header is the request header carrying the key.
const Header = "Idempotency-Key"

// ReplayedHeader marks an answer replayed from a stored key.
const ReplayedHeader = "Idempotent-Replayed"

// MaxKey is the longest key accepted, in bytes.
const MaxKey = 255

var (
	// TTL is how long a key is kept after its first request.
	TTL = 24 * time.Hour
	// Wait is how long a retry waits for its first attempt (tests shorten it).
	Wait = 10 * time.Second
	// Poll is how often a waiting retry looks again.
	Poll = 50 * time.Millisecond
)

// maxStored bounds a stored answer; a larger one is not kept.
const maxStored = 4 << 20

// ParseKey returns the request's key and whether it has one.
// A key is 1..255 printable ASCII bytes (0x20-0x7e), given once.
func ParseKey(h http.Header) (string, bool, error) {
	vs := h.Values(Header)
	if len(vs) == 0 {
		return "", false, nil
	}
	if len(vs) > 1 {
		return "", false, badKey("give the %s header once", Header)
	}
	v := vs[0]
	if v == "" || len(v) > MaxKey {
		return "", false, badKey("%s must be 1 to %d bytes, not %d", Header, MaxKey, len(v))
	}
	for i := 0; i < len(v); i++ {
		if c := v[i]; c < 0x20 || c > 0x7e {
			return "", false, badKey("%s must be printable ASCII; byte %d is 0x%02x", Header, i, c)
		}
	}
	return v, true, nil
}

func badKey(format string, args ...any) error {
	return &errdefs.Error{Category: errdefs.ErrIdempotencyKeyInvalid, Msg: fmt.Sprintf(format, args...)}
}

var errKeyReused = &errdefs.Error{Category: errdefs.ErrIdempotencyKeyReused,
	Msg: "this Idempotency-Key was used with a different request (method, path or body); use a new key for a new request"}

// ErrInProgress answers a retry whose first attempt still runs.
var ErrInProgress = &errdefs.Error{Category: errdefs.ErrIdempotencyInProgress,
	Msg: "the first request with this Idempotency-Key is still in progress; retry later"}

// Store is where keys are kept (the engine's store.Store has these).
type Store interface {
	// PutIdempotencyKey inserts k unless its key exists; it returns the
	// stored one and whether k was inserted.
	PutIdempotencyKey(ctx context.Context, k *store.IdempotencyKey) (*store.IdempotencyKey, bool, error)
	// UpdateIdempotencyKey replaces k if its owner is still owner.
	UpdateIdempotencyKey(ctx context.Context, k *store.IdempotencyKey, owner string) error
	// DeleteIdempotencyKey removes a key if its owner is still owner.
	DeleteIdempotencyKey(ctx context.Context, scope, route, key, owner string) error
}

// Kind is what Wrap needs to know of one route.
type Kind struct {
	// IDs is how many object ids the request (its body) makes.
	IDs func(body []byte) int
	// Found answers for the objects a dead first attempt made (rec.IDs),
	// waiting while they are being created; ok false: it made none.
	Found func(ctx context.Context, r *http.Request, body []byte, rec *store.IdempotencyKey) (status int, v any, ok bool, err error)
}

// Config is what the server lends the keys.
type Config struct {
	// Backend is the store keys are kept in and this daemon's node; a nil
	// store: keys are not served.
	Backend func() (Store, string)
	// MaxBody bounds a request body read before the handler runs.
	MaxBody int
	// NewID makes the id of an object a request will create.
	NewID func() string
	// Seal and Unseal replace the credentials in an answer before it is
	// stored, and put them back on replay; nil: stored as it is.
	Seal, Unseal func(body []byte, ids []string) []byte
	// WriteError and WriteJSON write the API's answers.
	WriteError func(w http.ResponseWriter, err error)
	WriteJSON  func(w http.ResponseWriter, status int, v any)
	// Log is the daemon's logger.
	Log func() *slog.Logger
}

// Keys serves Idempotency-Key on the routes it wraps; its zero value plus
// a Config is ready. The owners of attempts are this daemon process's.
type Keys struct {
	Config
	once     sync.Once
	boot     string // this daemon process
	seq      atomic.Int64
	inflight sync.Map // owners of attempts running in this process
}

func (k *Keys) init() {
	k.once.Do(func() {
		var b [8]byte
		_, _ = rand.Read(b[:])
		k.boot = hex.EncodeToString(b[:])
	})
}

// owner names a new attempt: node|boot|seq.
func (k *Keys) owner(node string) string {
	k.init()
	return fmt.Sprintf("%s|%s|%d", node, k.boot, k.seq.Add(1))
}

// orphaned reports whether the attempt owner is known to be dead: it ran
// on this node in an earlier daemon process, or in this one and ended
// without an answer. Another node's attempt is never presumed dead.
func (k *Keys) orphaned(owner, node string) bool {
	k.init()
	rest, _, ok := cutLast(owner)
	if !ok {
		return owner == ""
	}
	n, boot, ok := cutLast(rest)
	if !ok || n != node {
		return false
	}
	if boot != k.boot {
		return true
	}
	_, running := k.inflight.Load(owner)
	return !running
}

func cutLast(s string) (string, string, bool) {
	i := strings.LastIndexByte(s, '|')
	if i < 0 {
		return "", "", false
	}
	return s[:i], s[i+1:], true
}

// call is the key of the attempt a handler runs for.
type call struct {
	st  Store
	mu  sync.Mutex
	rec *store.IdempotencyKey
}

type ctxKey struct{}

func callOf(r *http.Request) *call {
	c, _ := r.Context().Value(ctxKey{}).(*call)
	return c
}

// IDs returns the ids the objects of the request are to get (none
// without a key).
func IDs(r *http.Request) []string {
	c := callOf(r)
	if c == nil {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.rec.IDs...)
}

// ID is IDs for a request that makes one object ("": none chosen).
func ID(r *http.Request) string {
	if ids := IDs(r); len(ids) == 1 {
		return ids[0]
	}
	return ""
}

// Reserve returns the engine's CreateOptions.Reserve for the request:
// it records the id the create hands out (a warm-pool member's) before it
// does, so a retry after a crash finds it.
func Reserve(r *http.Request) func(string) error {
	c := callOf(r)
	if c == nil {
		return nil
	}
	return func(id string) error {
		c.mu.Lock()
		defer c.mu.Unlock()
		if len(c.rec.IDs) == 1 && c.rec.IDs[0] == id {
			return nil
		}
		prev := c.rec.IDs
		c.rec.IDs = []string{id}
		if err := c.st.UpdateIdempotencyKey(context.WithoutCancel(r.Context()), c.rec, c.rec.Owner); err != nil {
			c.rec.IDs = prev
			return fmt.Errorf("recording the idempotency key: %w", err)
		}
		return nil
	}
}

// Wrap wraps a create handler with Idempotency-Key handling.
func (k *Keys) Wrap(kind Kind, h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		key, ok, err := ParseKey(r.Header)
		if err != nil {
			k.WriteError(w, err)
			return
		}
		st, node := k.Backend()
		if !ok || st == nil {
			h(w, r)
			return
		}
		body, err := io.ReadAll(io.LimitReader(r.Body, int64(k.MaxBody)+1))
		if err != nil {
			k.WriteError(w, errdefs.Invalid("reading the request body: %v", err))
			return
		}
		if len(body) > k.MaxBody {
			k.WriteError(w, errdefs.TooLarge("request body exceeds %d bytes", k.MaxBody))
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		p, _ := auth.From(r.Context())
		now := time.Now().UTC()
		rec := &store.IdempotencyKey{Scope: Scope(p), Route: r.Pattern, Key: key,
			RequestHash: RequestHash(r, body), IDs: k.newIDs(kind.IDs(body)), Owner: k.owner(node),
			CreatedAt: now, ExpiresAt: now.Add(TTL)}
		k.serve(w, r, h, kind, body, st, node, rec)
	}
}

// Scope is the caller a key belongs to: two callers' keys never meet.
func Scope(p auth.Principal) string { return p.Tenant + "|" + p.Actor }

// RequestHash identifies a request: method, path and its body in
// canonical form (JSON re-encoded with sorted keys; other bytes as they
// are), so the same request sent with other whitespace or field order is
// the same.
func RequestHash(r *http.Request, body []byte) string {
	h := sha256.New()
	fmt.Fprintf(h, "%s %s\n", r.Method, r.URL.EscapedPath())
	h.Write(canonicalJSON(body))
	return hex.EncodeToString(h.Sum(nil))
}

func canonicalJSON(body []byte) []byte {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil || dec.More() {
		return body
	}
	if m, ok := v.(map[string]any); ok {
		// A registry account (create --image) is no part of what the
		// request makes, and its hash, kept with the key, must not be a
		// way to test guesses of its password.
		delete(m, "registry_auth")
	}
	b, err := json.Marshal(v)
	if err != nil {
		return body
	}
	return b
}

func (k *Keys) newIDs(n int) []string {
	ids := make([]string, n)
	for i := range ids {
		ids[i] = k.NewID()
	}
	return ids
}

func (k *Keys) serve(w http.ResponseWriter, r *http.Request, h http.HandlerFunc, kind Kind, body []byte, st Store, node string, rec *store.IdempotencyKey) {
	ctx := r.Context()
	deadline := time.Now().Add(Wait)
	// This attempt counts as running from before its row can exist (the
	// insert, or the take-over, below) to its end: a retry that reads the
	// row in between must not find its owner absent from this process and
	// take it for dead, which made two attempts act on one key.
	k.inflight.Store(rec.Owner, struct{}{})
	defer k.inflight.Delete(rec.Owner)
	for {
		cur, inserted, err := st.PutIdempotencyKey(ctx, rec)
		if err != nil {
			k.WriteError(w, err)
			return
		}
		if inserted {
			k.run(w, r, h, st, rec)
			return
		}
		if cur.RequestHash != rec.RequestHash {
			k.WriteError(w, errKeyReused)
			return
		}
		if cur.Done {
			k.replay(w, cur)
			return
		}
		if k.orphaned(cur.Owner, node) {
			prev := cur.Owner
			cur.Owner = rec.Owner
			err := st.UpdateIdempotencyKey(ctx, cur, prev)
			if err == nil {
				k.resume(w, r, h, kind, body, st, cur)
				return
			}
			if !errors.Is(err, errdefs.ErrConflict) && !errors.Is(err, errdefs.ErrNotFound) {
				k.WriteError(w, err)
				return
			}
			// Another retry took it over, or it ended: look again.
		}
		if time.Now().After(deadline) {
			w.Header().Set("Retry-After", "1")
			k.WriteError(w, ErrInProgress)
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(Poll):
		}
	}
}

// run runs the attempt rec owns and stores its answer: a 2xx-4xx is
// kept, a 5xx (or a panic) releases the key.
func (k *Keys) run(w http.ResponseWriter, r *http.Request, h http.HandlerFunc, st Store, rec *store.IdempotencyKey) {
	bg := context.WithoutCancel(r.Context())
	c := &call{st: st, rec: rec}
	cw := &captureWriter{ResponseWriter: w, status: http.StatusOK}
	finished := false
	defer func() {
		if !finished {
			_ = st.DeleteIdempotencyKey(bg, rec.Scope, rec.Route, rec.Key, rec.Owner)
		}
	}()
	h(cw, r.WithContext(context.WithValue(r.Context(), ctxKey{}, c)))
	finished = true
	c.mu.Lock()
	defer c.mu.Unlock()
	if cw.status >= 500 || cw.overflow {
		if err := st.DeleteIdempotencyKey(bg, rec.Scope, rec.Route, rec.Key, rec.Owner); err != nil {
			k.Log().Warn("releasing an idempotency key", "key", rec.Key, "err", err)
		}
		return
	}
	rec.Done, rec.Status, rec.ContentType = true, cw.status, cw.Header().Get("Content-Type")
	rec.Body = cw.buf.Bytes()
	if k.Seal != nil {
		rec.Body = k.Seal(rec.Body, rec.IDs)
	}
	if err := st.UpdateIdempotencyKey(bg, rec, rec.Owner); err != nil {
		k.Log().Warn("storing the answer of an idempotency key", "key", rec.Key, "err", err)
	}
}

func (k *Keys) replay(w http.ResponseWriter, rec *store.IdempotencyKey) {
	if rec.ContentType != "" {
		w.Header().Set("Content-Type", rec.ContentType)
	}
	w.Header().Set(ReplayedHeader, "true")
	w.WriteHeader(rec.Status)
	body := rec.Body
	if k.Unseal != nil {
		body = k.Unseal(body, rec.IDs)
	}
	_, _ = w.Write(body)
}

// resume continues a key whose first attempt died: it answers for what
// that attempt made, or acts now if it made nothing.
func (k *Keys) resume(w http.ResponseWriter, r *http.Request, h http.HandlerFunc, kind Kind, body []byte, st Store, rec *store.IdempotencyKey) {
	k.Log().Info("taking over an interrupted idempotent request", "route", rec.Route, "key", rec.Key, "ids", rec.IDs)
	if kind.Found != nil {
		status, v, ok, err := kind.Found(r.Context(), r, body, rec)
		if err != nil {
			// Still being created (or the store failed): the key stays
			// pending with no running attempt, so the next retry resumes.
			if errors.Is(err, errdefs.ErrIdempotencyInProgress) {
				w.Header().Set("Retry-After", "1")
			}
			k.WriteError(w, err)
			return
		}
		if ok {
			k.run(w, r, func(w http.ResponseWriter, r *http.Request) { k.WriteJSON(w, status, v) }, st, rec)
			return
		}
	}
	// Nothing was made: act now, with fresh ids (the recorded one may
	// name a warm-pool member the dead attempt did not get).
	rec.IDs = k.newIDs(len(rec.IDs))
	if err := st.UpdateIdempotencyKey(r.Context(), rec, rec.Owner); err != nil {
		k.WriteError(w, err)
		return
	}
	k.run(w, r, h, st, rec)
}

// captureWriter passes an answer through and keeps a copy.
type captureWriter struct {
	http.ResponseWriter
	status   int
	wrote    bool
	buf      bytes.Buffer
	overflow bool
}

func (w *captureWriter) WriteHeader(code int) {
	if !w.wrote {
		w.status, w.wrote = code, true
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *captureWriter) Write(b []byte) (int, error) {
	w.wrote = true
	if w.buf.Len()+len(b) <= maxStored {
		w.buf.Write(b)
	} else {
		w.overflow = true
	}
	return w.ResponseWriter.Write(b)
}

func (w *captureWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
