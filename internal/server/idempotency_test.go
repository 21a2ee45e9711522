package server

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/internal/auth"
	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/internal/sandbox"
	"github.com/berth-sh/berth/internal/server/idempotency"
	"github.com/berth-sh/berth/internal/server/input"
	"github.com/berth-sh/berth/internal/server/rest"
	"github.com/berth-sh/berth/internal/store"
	"github.com/berth-sh/berth/internal/store/sqlite"
)

// idemFixture is the Idempotency-Key wrapper around a fake create
// handler that records a sandbox with the id the key chose and counts
// how often it acted.
type idemFixture struct {
	s     *Server
	st    store.Store
	h     http.HandlerFunc
	calls atomic.Int64
	block chan struct{} // if set, the handler waits on it
}

const idemRoute = "POST /v1/sandboxes"

var (
	alice = auth.Principal{Actor: "key:alice", Tenant: "t1", Scopes: []string{"admin"}}
	bob   = auth.Principal{Actor: "key:bob", Tenant: "t1", Scopes: []string{"admin"}}
)

func newIdemFixture(t *testing.T) *idemFixture {
	t.Helper()
	st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "berth.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	f := &idemFixture{st: st}
	f.s = &Server{log: slog.New(slog.NewTextHandler(io.Discard, nil)), metrics: newMetrics(),
		idem: idemState{store: st, node: "node-a"}}
	kind := idempotency.Kind{IDs: one, Found: func(ctx context.Context, r *http.Request, _ []byte, rec *store.IdempotencyKey) (int, any, bool, error) {
		sb, err := f.s.settled(ctx, rec.IDs[0])
		if err != nil || sb == nil {
			return 0, nil, false, err
		}
		return http.StatusCreated, map[string]string{"id": sb.ID, "name": sb.Name}, true, nil
	}}
	f.h = f.s.idempotent(kind, func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Name string `json:"name"`
			Fail int    `json:"fail"`
		}
		if err := input.Decode(r, &req); err != nil {
			rest.Error(w, err)
			return
		}
		f.calls.Add(1)
		if f.block != nil {
			<-f.block
		}
		switch req.Fail {
		case 0:
		case http.StatusConflict:
			rest.Error(w, errdefs.Conflict("name %q taken", req.Name))
			return
		default:
			rest.Error(w, errors.New("boom"))
			return
		}
		id := idempotency.ID(r)
		if id == "" {
			id = "nokey" + time.Now().Format("150405.000000000")
		}
		now := time.Now()
		if err := st.CreateSandbox(r.Context(), &sandbox.Sandbox{ID: id, Name: req.Name, State: sandbox.StateRunning,
			CreatedAt: now, UpdatedAt: now}); err != nil {
			rest.Error(w, err)
			return
		}
		rest.JSON(w, http.StatusCreated, map[string]string{"id": id, "name": req.Name})
	})
	return f
}

func (f *idemFixture) do(p auth.Principal, key, body string) *httptest.ResponseRecorder {
	r := httptest.NewRequest("POST", "/v1/sandboxes", strings.NewReader(body))
	r.Pattern = idemRoute
	if key != "" {
		r.Header.Set(IdempotencyHeader, key)
	}
	r = r.WithContext(auth.With(r.Context(), p))
	w := httptest.NewRecorder()
	f.h(w, r)
	return w
}

func idOf(t *testing.T, w *httptest.ResponseRecorder) string {
	t.Helper()
	var v struct{ ID string }
	if err := json.Unmarshal(w.Body.Bytes(), &v); err != nil || v.ID == "" {
		t.Fatalf("answer %d %q: no id", w.Code, w.Body)
	}
	return v.ID
}

func codeOf(w *httptest.ResponseRecorder) string {
	var eb api.ErrorBody
	_ = json.Unmarshal(w.Body.Bytes(), &eb)
	return eb.Error.Code
}

func (f *idemFixture) sandboxes(t *testing.T) int {
	t.Helper()
	sbs, _, err := f.st.ListSandboxes(context.Background(), store.SandboxFilter{Owner: store.AnyOwner}, store.Page{})
	if err != nil {
		t.Fatal(err)
	}
	return len(sbs)
}

func TestIdempotentCreate(t *testing.T) {
	f := newIdemFixture(t)
	first := f.do(alice, "k1", `{"name": "a"}`)
	if first.Code != 201 {
		t.Fatalf("first: %d %s", first.Code, first.Body)
	}
	// The same request (other spacing) gets the first answer byte for byte.
	again := f.do(alice, "k1", `{ "name":"a" }`)
	if again.Code != 201 || again.Body.String() != first.Body.String() {
		t.Fatalf("replay: %d %q, want 201 %q", again.Code, again.Body, first.Body)
	}
	if again.Header().Get(IdempotentReplayedHeader) != "true" || again.Header().Get("Content-Type") != "application/json" {
		t.Fatalf("replay headers %v", again.Header())
	}
	if n := f.calls.Load(); n != 1 {
		t.Fatalf("handler acted %d times for one key", n)
	}
	if n := f.sandboxes(t); n != 1 {
		t.Fatalf("%d sandboxes for one key", n)
	}
	// Another body with the same key: refused, nothing done.
	reused := f.do(alice, "k1", `{"name": "b"}`)
	if reused.Code != 422 || codeOf(reused) != "idempotency_key_reused" {
		t.Fatalf("reused key: %d %s", reused.Code, reused.Body)
	}
	// Another caller's key space is its own.
	other := f.do(bob, "k1", `{"name": "a2"}`)
	if other.Code != 201 || idOf(t, other) == idOf(t, first) {
		t.Fatalf("bob's k1: %d %s", other.Code, other.Body)
	}
	// Without a key every request acts.
	f.do(alice, "", `{"name": "c"}`)
	f.do(alice, "", `{"name": "d"}`)
	if n := f.calls.Load(); n != 4 {
		t.Fatalf("handler acted %d times, want 4", n)
	}
}

func TestIdempotentErrorAnswers(t *testing.T) {
	f := newIdemFixture(t)
	// A 4xx is the answer: kept.
	c1 := f.do(alice, "k409", `{"fail": 409}`)
	c2 := f.do(alice, "k409", `{"fail": 409}`)
	if c1.Code != 409 || c2.Code != 409 || c1.Body.String() != c2.Body.String() || f.calls.Load() != 1 {
		t.Fatalf("4xx: %d %d, %d calls", c1.Code, c2.Code, f.calls.Load())
	}
	// A 5xx is not: the retry acts again.
	f.do(alice, "k500", `{"fail": 500}`)
	if w := f.do(alice, "k500", `{"fail": 500}`); w.Code != 500 || f.calls.Load() != 3 {
		t.Fatalf("5xx: %d, %d calls", w.Code, f.calls.Load())
	}
	// A bad body is a 4xx too, and the key's answer.
	if w := f.do(alice, "kbad", `{"nope": 1}`); w.Code != 400 {
		t.Fatalf("bad body: %d", w.Code)
	}
	if w := f.do(alice, "kbad", `{"nope": 1}`); w.Code != 400 || w.Header().Get(IdempotentReplayedHeader) != "true" {
		t.Fatalf("bad body again: %d %v", w.Code, w.Header())
	}
}

func TestIdempotencyKeyHeader(t *testing.T) {
	f := newIdemFixture(t)
	for _, key := range []string{strings.Repeat("x", 256), "a\x01b", "caf\xc3\xa9", "tab\there"} {
		if w := f.do(alice, key, `{}`); w.Code != 400 || codeOf(w) != "invalid_idempotency_key" {
			t.Errorf("key %q: %d %s", key, w.Code, w.Body)
		}
	}
	r := httptest.NewRequest("POST", "/v1/sandboxes", strings.NewReader(`{}`))
	r.Pattern = idemRoute
	r.Header.Add(IdempotencyHeader, "a")
	r.Header.Add(IdempotencyHeader, "b")
	w := httptest.NewRecorder()
	f.h(w, r.WithContext(auth.With(r.Context(), alice)))
	if w.Code != 400 || codeOf(w) != "invalid_idempotency_key" {
		t.Errorf("two keys: %d %s", w.Code, w.Body)
	}
	r.Header.Set(IdempotencyHeader, "")
	w = httptest.NewRecorder()
	f.h(w, r.WithContext(auth.With(r.Context(), alice)))
	if w.Code != 400 {
		t.Errorf("empty key: %d %s", w.Code, w.Body)
	}
	if f.calls.Load() != 0 {
		t.Fatal("a request with a bad key acted")
	}
	if w := f.do(alice, strings.Repeat("~", 255)+"", `{}`); w.Code != 201 {
		t.Errorf("255-byte key: %d %s", w.Code, w.Body)
	}
}

// TestIdempotentInProgress: a retry while the first attempt runs waits
// for its answer; past the wait it gets 409 with Retry-After. Of many
// concurrent requests with one key exactly one acts.
func TestIdempotentInProgress(t *testing.T) {
	f := newIdemFixture(t)
	f.block = make(chan struct{})
	const n = 6
	answers := make([]*httptest.ResponseRecorder, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() { defer wg.Done(); answers[i] = f.do(alice, "same", `{"name": "x"}`) }()
	}
	for f.calls.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	time.Sleep(100 * time.Millisecond)
	close(f.block)
	wg.Wait()
	for i, w := range answers {
		if w.Code != 201 || w.Body.String() != answers[0].Body.String() {
			t.Fatalf("answer %d: %d %s", i, w.Code, w.Body)
		}
	}
	if f.calls.Load() != 1 || f.sandboxes(t) != 1 {
		t.Fatalf("%d calls, %d sandboxes for one key", f.calls.Load(), f.sandboxes(t))
	}

	defer func(d time.Duration) { idempotency.Wait = d }(idempotency.Wait)
	idempotency.Wait = 150 * time.Millisecond
	f.block = make(chan struct{})
	done := make(chan struct{})
	go func() { defer close(done); f.do(alice, "slow", `{}`) }()
	for f.calls.Load() == 1 {
		time.Sleep(time.Millisecond)
	}
	w := f.do(alice, "slow", `{}`)
	close(f.block)
	<-done
	if w.Code != 409 || codeOf(w) != "idempotency_in_progress" || w.Header().Get("Retry-After") == "" {
		t.Fatalf("in progress: %d %v %s", w.Code, w.Header(), w.Body)
	}
}

// TestIdempotentAfterCrash: a pending key whose attempt died with an
// earlier daemon process is taken over. If the dead attempt made its
// sandbox, that is the answer (and nothing is made); if not, the retry
// acts, with a fresh id. Another node's pending key is not presumed dead.
func TestIdempotentAfterCrash(t *testing.T) {
	f := newIdemFixture(t)
	ctx := context.Background()
	pending := func(key, owner, body string, ids ...string) {
		t.Helper()
		r := httptest.NewRequest("POST", "/v1/sandboxes", nil)
		now := time.Now()
		if _, ok, err := f.st.PutIdempotencyKey(ctx, &store.IdempotencyKey{Scope: idempotency.Scope(alice), Route: idemRoute, Key: key,
			RequestHash: idempotency.RequestHash(r, []byte(body)), IDs: ids, Owner: owner, CreatedAt: now, ExpiresAt: now.Add(time.Hour)}); err != nil || !ok {
			t.Fatalf("put: %v %v", ok, err)
		}
	}
	// Made, and finished by the reconciler after the restart.
	pending("made", "node-a|deadboot|1", `{"name": "m"}`, "madeid")
	now := time.Now()
	must(t, f.st.CreateSandbox(ctx, &sandbox.Sandbox{ID: "madeid", Name: "m", State: sandbox.StateCreating, CreatedAt: now, UpdatedAt: now}))
	go func() {
		time.Sleep(100 * time.Millisecond)
		sb, _ := f.st.GetSandbox(ctx, store.AnyOwner, "madeid")
		sb.State = sandbox.StateRunning
		_ = f.st.UpdateSandbox(ctx, sb)
	}()
	w := f.do(alice, "made", `{"name": "m"}`)
	if w.Code != 201 || idOf(t, w) != "madeid" || f.calls.Load() != 0 {
		t.Fatalf("resumed create: %d %s, %d calls", w.Code, w.Body, f.calls.Load())
	}
	if again := f.do(alice, "made", `{"name": "m"}`); again.Body.String() != w.Body.String() {
		t.Fatalf("resumed answer not kept: %s", again.Body)
	}
	// Not made: the retry acts.
	pending("lost", "node-a|deadboot|2", `{"name": "l"}`, "lostid")
	w = f.do(alice, "lost", `{"name": "l"}`)
	if w.Code != 201 || idOf(t, w) == "lostid" || f.calls.Load() != 1 {
		t.Fatalf("redone create: %d %s, %d calls", w.Code, w.Body, f.calls.Load())
	}
	// Another node's: in progress, as far as this one knows.
	defer func(d time.Duration) { idempotency.Wait = d }(idempotency.Wait)
	idempotency.Wait = 100 * time.Millisecond
	pending("far", "node-b|boot|1", `{}`, "farid")
	if w := f.do(alice, "far", `{}`); w.Code != 409 || codeOf(w) != "idempotency_in_progress" {
		t.Fatalf("other node's key: %d %s", w.Code, w.Body)
	}
	if f.sandboxes(t) != 2 {
		t.Fatalf("%d sandboxes, want 2", f.sandboxes(t))
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
