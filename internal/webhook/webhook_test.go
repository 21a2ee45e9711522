package webhook

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/internal/sandbox"
	"github.com/berth-sh/berth/internal/server"
	"github.com/berth-sh/berth/internal/store"
	"github.com/berth-sh/berth/internal/store/sqlite"
)

func TestDeliverSignedRetriedRecorded(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	sb := &sandbox.Sandbox{ID: "s1", State: sandbox.StateCreating, Spec: sandbox.Spec{Resources: sandbox.DefaultResources}}
	if err := st.CreateSandbox(ctx, sb); err != nil {
		t.Fatal(err)
	}
	// History before the webhook existed is not replayed.
	st.AppendEvent(ctx, &sandbox.Event{SandboxID: "s1", Type: "state", To: sandbox.StateCreating, Time: time.Now()})

	var mu sync.Mutex
	var got []api.Event
	calls := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		mu.Lock()
		defer mu.Unlock()
		calls++
		if !Verify("s3cret", body, r.Header.Get(SignatureHeader)) {
			t.Errorf("bad signature %q", r.Header.Get(SignatureHeader))
		}
		if calls == 1 {
			w.WriteHeader(http.StatusServiceUnavailable) // first attempt fails
			return
		}
		var ev api.Event
		json.Unmarshal(body, &ev)
		got = append(got, ev)
	}))
	defer srv.Close()
	var okN, failedN atomic.Int32 // the OnDelivery hook (the daemon's metrics)
	onDelivery := func(ok bool) {
		if ok {
			okN.Add(1)
		} else {
			failedN.Add(1)
		}
	}
	d := New(Config{URL: srv.URL, Secret: "s3cret", Backoff: 20 * time.Millisecond, Poll: 20 * time.Millisecond,
		OnDelivery: onDelivery, Encode: server.EventJSON}, st)
	done := make(chan struct{})
	go func() { d.Run(ctx); close(done) }()
	time.Sleep(100 * time.Millisecond) // let it take its starting cursor
	var ids []int64
	for _, to := range []sandbox.State{sandbox.StateRunning, sandbox.StatePaused} {
		ev := &sandbox.Event{SandboxID: "s1", Type: "state", From: "x", To: to, Time: time.Now()}
		st.AppendEvent(ctx, ev)
		ids = append(ids, ev.ID)
		st.AppendEvent(ctx, &sandbox.Event{SandboxID: "s1", Type: "exec", Time: time.Now()}) // not a lifecycle event
	}
	d.Kick()
	deadline := time.Now().Add(5 * time.Second)
	for {
		mu.Lock()
		n := len(got)
		mu.Unlock()
		if n == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("delivered %d of 2", n)
		}
		time.Sleep(10 * time.Millisecond)
	}
	// The cursor moves past what was delivered (and past non-lifecycle events).
	for deadline := time.Now().Add(5 * time.Second); ; {
		if c, _, _ := st.WebhookCursor(context.Background(), srv.URL); c >= ids[1] {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("cursor did not pass the delivered events")
		}
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	<-done
	if got[0].ID != ids[0] || got[0].To != "running" || got[1].To != "paused" {
		t.Fatalf("delivered %+v", got)
	}
	ds, _ := st.ListWebhookDeliveries(context.Background(), ids[0])
	if len(ds) != 2 || ds[0].Status != 503 || ds[1].Status != 200 || ds[1].Attempt != 2 {
		t.Fatalf("deliveries of first event: %+v", ds)
	}
	if okN.Load() != 2 || failedN.Load() != 1 {
		t.Fatalf("OnDelivery saw %d ok and %d failed, want 2 and 1", okN.Load(), failedN.Load())
	}
}

func TestSignature(t *testing.T) {
	body := []byte(`{"a":1}`)
	sig := Sign("k", body)
	if !Verify("k", body, sig) || Verify("other", body, sig) || Verify("k", []byte(`{"a":2}`), sig) {
		t.Fatal("signature check is wrong")
	}
}

// Every attempt at one event carries one delivery id, and so does the
// attempt a restarted deliverer makes when its cursor did not record the
// first (at least once: the receiver deduplicates on the id); another
// event's id differs.
func TestDeliveryIDStableAcrossRetriesAndRestarts(t *testing.T) {
	ctx := context.Background()
	st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if err := st.CreateSandbox(ctx, &sandbox.Sandbox{ID: "s1", State: sandbox.StateCreating, Spec: sandbox.Spec{Resources: sandbox.DefaultResources}}); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	seen := map[int64][]string{} // event id -> delivery ids of its attempts
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var ev api.Event
		body, _ := io.ReadAll(r.Body)
		json.Unmarshal(body, &ev)
		mu.Lock()
		seen[ev.ID] = append(seen[ev.ID], r.Header.Get(DeliveryIDHeader))
		n := len(seen[ev.ID])
		mu.Unlock()
		if n == 1 {
			w.WriteHeader(http.StatusBadGateway) // the first attempt fails: a retry follows
		}
	}))
	defer srv.Close()
	if err := st.SetWebhookCursor(ctx, srv.URL, 0); err != nil { // deliver from the start
		t.Fatal(err)
	}
	var evs []*sandbox.Event
	for _, to := range []sandbox.State{sandbox.StateRunning, sandbox.StateStopped} {
		// Milliseconds: the store keeps microseconds.
		ev := &sandbox.Event{SandboxID: "s1", Type: "state", To: to, Time: time.Now().Truncate(time.Millisecond)}
		if err := st.AppendEvent(ctx, ev); err != nil {
			t.Fatal(err)
		}
		evs = append(evs, ev)
	}
	// The first deliverer's cursor writes are lost, as a crash right
	// after each receiver's 2xx would lose them.
	lossy := &lossyCursor{Webhooks: st}
	lossy.drop.Store(true)
	run := func(done func() bool) {
		t.Helper()
		rctx, cancel := context.WithCancel(ctx)
		d := New(Config{URL: srv.URL, Backoff: time.Millisecond, Poll: 10 * time.Millisecond, Encode: server.EventJSON}, lossy)
		stopped := make(chan struct{})
		go func() { d.Run(rctx); close(stopped) }()
		for deadline := time.Now().Add(10 * time.Second); !done(); time.Sleep(5 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatal("events not delivered")
			}
		}
		cancel()
		<-stopped
	}
	run(func() bool { mu.Lock(); defer mu.Unlock(); return len(seen[evs[1].ID]) >= 2 })
	lossy.drop.Store(false)
	run(func() bool { c, _, _ := st.WebhookCursor(ctx, srv.URL); return c >= evs[1].ID })
	mu.Lock()
	defer mu.Unlock()
	first := seen[evs[0].ID]
	if len(first) != 3 {
		t.Fatalf("attempts at the first event: %v, want 3 (failed, accepted, again after the restart)", first)
	}
	for _, id := range first {
		if id == "" || id != first[0] || id != DeliveryID(srv.URL, evs[0]) {
			t.Fatalf("delivery ids of one event differ: %v", first)
		}
	}
	if second := seen[evs[1].ID]; len(second) == 0 || second[0] == first[0] {
		t.Fatalf("two events share a delivery id: %v %v", first, second)
	}
}

type lossyCursor struct {
	store.Webhooks
	drop atomic.Bool
}

func (l *lossyCursor) SetWebhookCursor(ctx context.Context, url string, id int64) error {
	if l.drop.Load() {
		return nil
	}
	return l.Webhooks.SetWebhookCursor(ctx, url, id)
}
