package server

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
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/internal/auth"
	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/internal/manager"
	"github.com/berth-sh/berth/internal/sandbox"
	"github.com/berth-sh/berth/internal/store"
)

// Idempotency keys (as Stripe's API has them). A request to a route
// wrapped by idempotent that carries an Idempotency-Key header is recorded
// in the store before it acts — with the ids the objects it makes will get
// — and its answer when it has one. The same key again (same caller, same
// route) within idemTTL gets the first answer, byte for byte, instead of
// acting again; with another request body, 422 idempotency_key_reused;
// while the first attempt still runs, the retry waits up to idemWait for
// it, then 409 idempotency_in_progress with Retry-After. 4xx answers are
// kept; 5xx answers are not (the retry acts again).
//
// Crash safety: a pending key whose attempt died with the daemon (same
// node, another boot; or this boot and no longer running) is taken over
// by the retry, which looks up the recorded ids: objects the dead attempt
// made (the reconciler finishes interrupted creates after a restart) are
// answered once they are no longer creating; if it made none, the retry
// acts, with fresh ids.

// IdempotencyHeader is the request header carrying the key.
const IdempotencyHeader = "Idempotency-Key"

// IdempotentReplayedHeader marks an answer replayed from a stored key.
const IdempotentReplayedHeader = "Idempotent-Replayed"

// MaxIdempotencyKey is the longest key accepted, in bytes.
const MaxIdempotencyKey = 255

var (
	idemTTL  = 24 * time.Hour
	idemWait = 10 * time.Second // how long a retry waits for its first attempt
	idemPoll = 50 * time.Millisecond
)

// maxIdemBody bounds a stored answer; a larger one is not kept.
const maxIdemBody = 4 << 20

// ParseIdempotencyKey returns the request's key and whether it has one.
// A key is 1..255 printable ASCII bytes (0x20-0x7e), given once.
func ParseIdempotencyKey(h http.Header) (string, bool, error) {
	vs := h.Values(IdempotencyHeader)
	if len(vs) == 0 {
		return "", false, nil
	}
	if len(vs) > 1 {
		return "", false, badKey("give the %s header once", IdempotencyHeader)
	}
	v := vs[0]
	if v == "" || len(v) > MaxIdempotencyKey {
		return "", false, badKey("%s must be 1 to %d bytes, not %d", IdempotencyHeader, MaxIdempotencyKey, len(v))
	}
	for i := 0; i < len(v); i++ {
		if c := v[i]; c < 0x20 || c > 0x7e {
			return "", false, badKey("%s must be printable ASCII; byte %d is 0x%02x", IdempotencyHeader, i, c)
		}
	}
	return v, true, nil
}

func badKey(format string, args ...any) error {
	return &errdefs.Error{Category: errdefs.ErrIdempotencyKeyInvalid, Msg: fmt.Sprintf(format, args...)}
}

var (
	errKeyReused = &errdefs.Error{Category: errdefs.ErrIdempotencyKeyReused,
		Msg: "this Idempotency-Key was used with a different request (method, path or body); use a new key for a new request"}
	errInProgress = &errdefs.Error{Category: errdefs.ErrIdempotencyInProgress,
		Msg: "the first request with this Idempotency-Key is still in progress; retry later"}
)

// idemKind is what idempotent needs to know of one route.
type idemKind struct {
	// ids is how many object ids the request (its body) makes.
	ids func(body []byte) int
	// found answers for the objects a dead first attempt made (rec.IDs),
	// waiting while they are being created; ok false: it made none.
	found func(ctx context.Context, r *http.Request, body []byte, rec *store.IdempotencyKey) (status int, v any, ok bool, err error)
}

// idemState is a server's part of the key owners.
type idemState struct {
	// store and node, if set, stand in for the manager's (tests).
	store    store.Store
	node     string
	once     sync.Once
	boot     string // this daemon process
	seq      atomic.Int64
	inflight sync.Map // owners of attempts running in this process
}

func (st *idemState) init() {
	st.once.Do(func() {
		var b [8]byte
		_, _ = rand.Read(b[:])
		st.boot = hex.EncodeToString(b[:])
	})
}

// idemBackend is the store keys are kept in and this daemon's node;
// a nil store: keys are not served.
func (s *Server) idemBackend() (store.Store, string) {
	if s.idem.store != nil {
		return s.idem.store, s.idem.node
	}
	if s.m == nil {
		return nil, ""
	}
	return s.m.Store(), s.m.Node()
}

// owner names a new attempt: node|boot|seq.
func (st *idemState) owner(node string) string {
	st.init()
	return fmt.Sprintf("%s|%s|%d", node, st.boot, st.seq.Add(1))
}

// orphaned reports whether the attempt owner is known to be dead: it ran
// on this node in an earlier daemon process, or in this one and ended
// without an answer. Another node's attempt is never presumed dead.
func (st *idemState) orphaned(owner, node string) bool {
	st.init()
	rest, _, ok := cutLast(owner)
	if !ok {
		return owner == ""
	}
	n, boot, ok := cutLast(rest)
	if !ok || n != node {
		return false
	}
	if boot != st.boot {
		return true
	}
	_, running := st.inflight.Load(owner)
	return !running
}

func cutLast(s string) (string, string, bool) {
	i := strings.LastIndexByte(s, '|')
	if i < 0 {
		return "", "", false
	}
	return s[:i], s[i+1:], true
}

// idemCall is the key of the attempt a handler runs for.
type idemCall struct {
	s   *Server
	mu  sync.Mutex
	rec *store.IdempotencyKey
}

type idemCtxKey struct{}

func callOf(r *http.Request) *idemCall {
	c, _ := r.Context().Value(idemCtxKey{}).(*idemCall)
	return c
}

// idemIDs returns the ids the objects of the request are to get (none
// without a key).
func idemIDs(r *http.Request) []string {
	c := callOf(r)
	if c == nil {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.rec.IDs...)
}

func idemID(r *http.Request) string {
	if ids := idemIDs(r); len(ids) == 1 {
		return ids[0]
	}
	return ""
}

// idemReserve returns the manager's CreateOptions.Reserve for the request:
// it records the id the create hands out (a warm-pool member's) before it
// does, so a retry after a crash finds it.
func idemReserve(r *http.Request) func(string) error {
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
		st, _ := c.s.idemBackend()
		if err := st.UpdateIdempotencyKey(context.WithoutCancel(r.Context()), c.rec, c.rec.Owner); err != nil {
			c.rec.IDs = prev
			return fmt.Errorf("recording the idempotency key: %w", err)
		}
		return nil
	}
}

// idempotent wraps a create handler with Idempotency-Key handling.
func (s *Server) idempotent(kind idemKind, h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		key, ok, err := ParseIdempotencyKey(r.Header)
		if err != nil {
			writeError(w, err)
			return
		}
		st, node := s.idemBackend()
		if !ok || st == nil {
			h(w, r)
			return
		}
		body, err := io.ReadAll(io.LimitReader(r.Body, maxJSONBody+1))
		if err != nil {
			writeError(w, errdefs.Invalid("reading the request body: %v", err))
			return
		}
		if len(body) > maxJSONBody {
			writeError(w, errdefs.TooLarge("request body exceeds %d bytes", maxJSONBody))
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		p, _ := auth.From(r.Context())
		now := time.Now().UTC()
		rec := &store.IdempotencyKey{Scope: idemScope(p), Route: r.Pattern, Key: key,
			RequestHash: requestHash(r, body), IDs: newIDs(kind.ids(body)), Owner: s.idem.owner(node),
			CreatedAt: now, ExpiresAt: now.Add(idemTTL)}
		s.idemServe(w, r, h, kind, body, rec)
	}
}

// idemScope is the caller a key belongs to: two callers' keys never meet.
func idemScope(p auth.Principal) string { return p.Tenant + "|" + p.Actor }

// requestHash identifies a request: method, path and its body in
// canonical form (JSON re-encoded with sorted keys; other bytes as they
// are), so the same request sent with other whitespace or field order is
// the same.
func requestHash(r *http.Request, body []byte) string {
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
	b, err := json.Marshal(v)
	if err != nil {
		return body
	}
	return b
}

func newIDs(n int) []string {
	ids := make([]string, n)
	for i := range ids {
		ids[i] = manager.NewID()
	}
	return ids
}

func (s *Server) idemServe(w http.ResponseWriter, r *http.Request, h http.HandlerFunc, kind idemKind, body []byte, rec *store.IdempotencyKey) {
	ctx := r.Context()
	st, node := s.idemBackend()
	deadline := time.Now().Add(idemWait)
	for {
		cur, inserted, err := st.PutIdempotencyKey(ctx, rec)
		if err != nil {
			writeError(w, err)
			return
		}
		if inserted {
			s.idemRun(w, r, h, rec)
			return
		}
		if cur.RequestHash != rec.RequestHash {
			writeError(w, errKeyReused)
			return
		}
		if cur.Done {
			s.replay(w, cur)
			return
		}
		if s.idem.orphaned(cur.Owner, node) {
			prev := cur.Owner
			cur.Owner = rec.Owner
			err := st.UpdateIdempotencyKey(ctx, cur, prev)
			if err == nil {
				s.idemResume(w, r, h, kind, body, cur)
				return
			}
			if !errors.Is(err, errdefs.ErrConflict) && !errors.Is(err, errdefs.ErrNotFound) {
				writeError(w, err)
				return
			}
			// Another retry took it over, or it ended: look again.
		}
		if time.Now().After(deadline) {
			w.Header().Set("Retry-After", "1")
			writeError(w, errInProgress)
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(idemPoll):
		}
	}
}

// idemRun runs the attempt rec owns and stores its answer: a 2xx-4xx is
// kept, a 5xx (or a panic) releases the key.
func (s *Server) idemRun(w http.ResponseWriter, r *http.Request, h http.HandlerFunc, rec *store.IdempotencyKey) {
	st, _ := s.idemBackend()
	bg := context.WithoutCancel(r.Context())
	s.idem.inflight.Store(rec.Owner, struct{}{})
	defer s.idem.inflight.Delete(rec.Owner)
	call := &idemCall{s: s, rec: rec}
	cw := &captureWriter{ResponseWriter: w, status: http.StatusOK}
	finished := false
	defer func() {
		if !finished {
			_ = st.DeleteIdempotencyKey(bg, rec.Scope, rec.Route, rec.Key, rec.Owner)
		}
	}()
	h(cw, r.WithContext(context.WithValue(r.Context(), idemCtxKey{}, call)))
	finished = true
	call.mu.Lock()
	defer call.mu.Unlock()
	if cw.status >= 500 || cw.overflow {
		if err := st.DeleteIdempotencyKey(bg, rec.Scope, rec.Route, rec.Key, rec.Owner); err != nil {
			s.log.Warn("releasing an idempotency key", "key", rec.Key, "err", err)
		}
		return
	}
	rec.Done, rec.Status, rec.ContentType = true, cw.status, cw.Header().Get("Content-Type")
	rec.Body = s.sealLeases(cw.buf.Bytes(), rec.IDs)
	if err := st.UpdateIdempotencyKey(bg, rec, rec.Owner); err != nil {
		s.log.Warn("storing the answer of an idempotency key", "key", rec.Key, "err", err)
	}
}

// sealLeases keeps lease tokens (credentials) out of stored answers: each
// is replaced by a marker naming its sandbox, and replay mints it again
// (tokens are a function of the id), so the replay is still byte for
// byte the first answer.
func (s *Server) sealLeases(body []byte, ids []string) []byte {
	if s.Leases == nil {
		return body
	}
	for _, id := range ids {
		body = bytes.ReplaceAll(body, []byte(s.Leases.Token(id)), []byte(leaseMarker(id)))
	}
	return body
}

func (s *Server) unsealLeases(body []byte, ids []string) []byte {
	if s.Leases == nil {
		return body
	}
	for _, id := range ids {
		body = bytes.ReplaceAll(body, []byte(leaseMarker(id)), []byte(s.Leases.Token(id)))
	}
	return body
}

func leaseMarker(id string) string { return "@@berth-lease-token:" + id + "@@" }

func (s *Server) replay(w http.ResponseWriter, k *store.IdempotencyKey) {
	if k.ContentType != "" {
		w.Header().Set("Content-Type", k.ContentType)
	}
	w.Header().Set(IdempotentReplayedHeader, "true")
	w.WriteHeader(k.Status)
	_, _ = w.Write(s.unsealLeases(k.Body, k.IDs))
}

// idemResume continues a key whose first attempt died: it answers for
// what that attempt made, or acts now if it made nothing.
func (s *Server) idemResume(w http.ResponseWriter, r *http.Request, h http.HandlerFunc, kind idemKind, body []byte, rec *store.IdempotencyKey) {
	s.log.Info("taking over an interrupted idempotent request", "route", rec.Route, "key", rec.Key, "ids", rec.IDs)
	if kind.found != nil {
		status, v, ok, err := kind.found(r.Context(), r, body, rec)
		if err != nil {
			// Still being created (or the store failed): the key stays
			// pending with no running attempt, so the next retry resumes.
			if errors.Is(err, errdefs.ErrIdempotencyInProgress) {
				w.Header().Set("Retry-After", "1")
			}
			writeError(w, err)
			return
		}
		if ok {
			s.idemRun(w, r, func(w http.ResponseWriter, r *http.Request) { writeJSON(w, status, v) }, rec)
			return
		}
	}
	// Nothing was made: act now, with fresh ids (the recorded one may
	// name a warm-pool member the dead attempt did not get).
	rec.IDs = newIDs(len(rec.IDs))
	st, _ := s.idemBackend()
	if err := st.UpdateIdempotencyKey(r.Context(), rec, rec.Owner); err != nil {
		writeError(w, err)
		return
	}
	s.idemRun(w, r, h, rec)
}

// settled returns the sandbox id once it is no longer being created, nil
// if there is none (or only a warm-pool member never handed out).
func (s *Server) settled(ctx context.Context, id string) (*sandbox.Sandbox, error) {
	st, _ := s.idemBackend()
	deadline := time.Now().Add(idemWait)
	for {
		sb, err := st.GetSandbox(ctx, ownerOf(ctx), id)
		if errors.Is(err, errdefs.ErrNotFound) {
			return nil, nil
		} else if err != nil {
			return nil, err
		}
		if sb.Spec.Pool != "" {
			return nil, nil
		}
		if sb.State != sandbox.StateCreating {
			return sb, nil
		}
		if time.Now().After(deadline) {
			return nil, errInProgress
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(idemPoll):
		}
	}
}

// createFailed is the answer for a sandbox whose interrupted create
// failed when it was finished: a 5xx, as the first attempt would have
// had, so the key is released and a retry creates anew.
func createFailed(sb *sandbox.Sandbox) (int, any, bool, error) {
	return http.StatusInternalServerError, api.ErrorBody{Error: api.Error{Code: "internal",
		Message: "creating sandbox " + sb.ID + " (finished after a daemon restart) failed: " + sb.Error}}, true, nil
}

func one([]byte) int { return 1 }

func (s *Server) idemCreate() idemKind {
	return idemKind{ids: one, found: func(ctx context.Context, r *http.Request, _ []byte, rec *store.IdempotencyKey) (int, any, bool, error) {
		if len(rec.IDs) != 1 {
			return 0, nil, false, nil
		}
		sb, err := s.settled(ctx, rec.IDs[0])
		if err != nil || sb == nil {
			return 0, nil, false, err
		}
		if !sb.State.Live() && sb.Error != "" {
			return createFailed(sb)
		}
		out := s.toAPI(sb)
		if s.Leases != nil {
			out.LeaseToken = s.Leases.Token(sb.ID)
		}
		return http.StatusCreated, out, true, nil
	}}
}

func (s *Server) idemFork() idemKind {
	count := func(body []byte) int {
		var req struct {
			Count int `json:"count"`
		}
		_ = json.Unmarshal(body, &req)
		switch {
		case req.Count == 0:
			return 1
		case req.Count < 0 || req.Count > manager.MaxForkCount:
			return 0 // refused by the manager
		}
		return req.Count
	}
	return idemKind{ids: count, found: func(ctx context.Context, r *http.Request, _ []byte, rec *store.IdempotencyKey) (int, any, bool, error) {
		resp := api.ForkResponse{Children: []api.Sandbox{}}
		var failed *sandbox.Sandbox
		for _, id := range rec.IDs {
			sb, err := s.settled(ctx, id)
			if err != nil {
				return 0, nil, false, err
			}
			switch {
			case sb == nil:
			case !sb.State.Live() && sb.Error != "":
				failed = sb
			default:
				resp.Children = append(resp.Children, s.toAPI(sb))
			}
		}
		if len(resp.Children) == 0 {
			if failed != nil {
				return createFailed(failed)
			}
			return 0, nil, false, nil
		}
		return http.StatusCreated, resp, true, nil
	}}
}

func (s *Server) idemSnapshot() idemKind {
	return idemKind{ids: one, found: func(ctx context.Context, r *http.Request, _ []byte, rec *store.IdempotencyKey) (int, any, bool, error) {
		if len(rec.IDs) != 1 {
			return 0, nil, false, nil
		}
		sn, err := s.m.Store().GetSnapshot(ctx, ownerOf(ctx), rec.IDs[0])
		if errors.Is(err, errdefs.ErrNotFound) {
			return 0, nil, false, nil
		} else if err != nil {
			return 0, nil, false, err
		}
		return http.StatusCreated, snapshotToAPI(sn), true, nil
	}}
}

// idemVolume: a volume's name is its identity (unique per tenant), so a
// dead attempt's volume is the one of that name made since the key was.
func (s *Server) idemVolume() idemKind {
	return idemKind{ids: func([]byte) int { return 0 }, found: func(ctx context.Context, r *http.Request, body []byte, rec *store.IdempotencyKey) (int, any, bool, error) {
		var req api.CreateVolumeRequest
		if json.Unmarshal(body, &req) != nil || req.Name == "" {
			return 0, nil, false, nil
		}
		v, err := s.m.Store().GetVolumeByName(ctx, ownerOf(ctx), req.Name)
		if errors.Is(err, errdefs.ErrNotFound) {
			return 0, nil, false, nil
		} else if err != nil {
			return 0, nil, false, err
		}
		if v.CreatedAt.Before(rec.CreatedAt) {
			return 0, nil, false, nil // older: the retry's create will say the name is taken
		}
		return http.StatusCreated, s.volumeToAPI(v), true, nil
	}}
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
	if w.buf.Len()+len(b) <= maxIdemBody {
		w.buf.Write(b)
	} else {
		w.overflow = true
	}
	return w.ResponseWriter.Write(b)
}

func (w *captureWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
