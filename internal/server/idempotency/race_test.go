package idempotency

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/internal/store"
)

// memStore is a Store in memory, for the logic of Keys alone; afterInsert,
// if set, runs once, after the first insert and before it returns.
type memStore struct {
	mu          sync.Mutex
	keys        map[string]*store.IdempotencyKey
	afterInsert func()
	once        sync.Once
}

func memKey(scope, route, key string) string { return scope + "\x00" + route + "\x00" + key }

func (m *memStore) PutIdempotencyKey(_ context.Context, k *store.IdempotencyKey) (*store.IdempotencyKey, bool, error) {
	m.mu.Lock()
	id := memKey(k.Scope, k.Route, k.Key)
	if cur, ok := m.keys[id]; ok {
		c := *cur
		m.mu.Unlock()
		return &c, false, nil
	}
	c := *k
	m.keys[id] = &c
	m.mu.Unlock()
	if m.afterInsert != nil {
		m.once.Do(m.afterInsert)
	}
	return k, true, nil
}

func (m *memStore) UpdateIdempotencyKey(_ context.Context, k *store.IdempotencyKey, owner string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	id := memKey(k.Scope, k.Route, k.Key)
	cur, ok := m.keys[id]
	if !ok {
		return errdefs.NotFound("no key")
	}
	if cur.Owner != owner {
		return errdefs.Conflict("key owned by %s", cur.Owner)
	}
	c := *k
	m.keys[id] = &c
	return nil
}

func (m *memStore) DeleteIdempotencyKey(_ context.Context, scope, route, key, owner string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	id := memKey(scope, route, key)
	if cur, ok := m.keys[id]; ok && cur.Owner == owner {
		delete(m.keys, id)
	}
	return nil
}

// A retry that reads the key's row after the first attempt inserted it
// and before that attempt began to act waits for its answer: it must not
// take the attempt for a dead one of this process and act too. (Seen as
// a name conflict in internal/server's TestIdempotentInProgress: two of
// six requests with one key both created.)
func TestRetryBetweenInsertAndRunWaits(t *testing.T) {
	inserted, release := make(chan struct{}), make(chan struct{})
	st := &memStore{keys: map[string]*store.IdempotencyKey{}, afterInsert: func() { close(inserted); <-release }}
	k := &Keys{Config: Config{
		Backend: func() (Store, string) { return st, "node-a" },
		MaxBody: 1 << 20,
		NewID: func() string {
			var b [8]byte
			_, _ = rand.Read(b[:])
			return hex.EncodeToString(b[:])
		},
		WriteError: func(w http.ResponseWriter, err error) {
			code, status := errdefs.Code(err)
			w.WriteHeader(status)
			fmt.Fprint(w, code)
		},
		WriteJSON: func(w http.ResponseWriter, status int, v any) { w.WriteHeader(status); fmt.Fprint(w, v) },
		Log:       slog.Default,
	}}
	var calls atomic.Int32
	h := k.Wrap(Kind{IDs: func([]byte) int { return 1 }}, func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, "made %s", ID(r))
	})
	do := func(out chan<- *httptest.ResponseRecorder) {
		r := httptest.NewRequest("POST", "/v1/sandboxes", strings.NewReader(`{"name":"x"}`))
		r.Header.Set(Header, "same")
		w := httptest.NewRecorder()
		h(w, r)
		out <- w
	}
	first, second := make(chan *httptest.ResponseRecorder, 1), make(chan *httptest.ResponseRecorder, 1)
	go do(first)
	<-inserted
	go do(second)
	time.Sleep(5 * Poll) // the retry reads the pending row, more than once
	close(release)
	w1, w2 := <-first, <-second
	if n := calls.Load(); n != 1 {
		t.Fatalf("the handler ran %d times for one key", n)
	}
	if w1.Code != http.StatusCreated || w2.Code != http.StatusCreated || w1.Body.String() != w2.Body.String() {
		t.Fatalf("answers %d %q and %d %q; want the first's twice", w1.Code, w1.Body, w2.Code, w2.Body)
	}
}
