package engine

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/berth-sh/berth/internal/errdefs"
)

// enterWait enters and, in the background, waits; the returned channel
// receives the wait's result.
func enterWait(t *testing.T, q *startQueue, tenant string, pool bool) (*startTicket, chan error) {
	t.Helper()
	tk, err := q.enter(tenant, pool)
	if err != nil {
		t.Fatal(err)
	}
	ch := make(chan error, 1)
	go func() { ch <- tk.wait(context.Background()) }()
	// wait queues (or is granted) before the next ticket enters, so the
	// arrival order is the call order.
	deadline := time.Now().Add(5 * time.Second)
	for {
		q.mu.Lock()
		settled := tk.queued || tk.granted
		q.mu.Unlock()
		if settled {
			return tk, ch
		}
		if time.Now().After(deadline) {
			t.Fatal("wait neither queued nor granted")
		}
		time.Sleep(time.Millisecond)
	}
}

func granted(tk *startTicket) bool {
	select {
	case <-tk.ready:
		return true
	default:
		return false
	}
}

// TestStartQueueLimit: no more than limit tickets hold a slot; the
// others wait and are granted as slots free.
func TestStartQueueLimit(t *testing.T) {
	q := newStartQueue(2, 0)
	a, _ := enterWait(t, q, "t", false)
	b, _ := enterWait(t, q, "t", false)
	c, cw := enterWait(t, q, "t", false)
	if !granted(a) || !granted(b) || granted(c) {
		t.Fatalf("granted a=%v b=%v c=%v, want the first two", granted(a), granted(b), granted(c))
	}
	if r, w := q.depth(); r != 2 || w != 1 {
		t.Fatalf("depth %d running %d waiting, want 2 and 1", r, w)
	}
	a.leave()
	if err := <-cw; err != nil || !granted(c) {
		t.Fatalf("c after a left: %v granted=%v", err, granted(c))
	}
	a.leave() // twice is harmless
	b.leave()
	c.leave()
	if r, w := q.depth(); r != 0 || w != 0 || len(q.held) != 0 {
		t.Fatalf("after all left: %d running, %d waiting, held %v", r, w, q.held)
	}
}

// TestStartQueueFairBetweenTenants: a tenant's burst does not hold
// another tenant's single start behind all of it.
func TestStartQueueFairBetweenTenants(t *testing.T) {
	q := newStartQueue(1, 0)
	first, _ := enterWait(t, q, "burst", false)
	var burst []*startTicket
	for range 5 {
		tk, _ := enterWait(t, q, "burst", false)
		burst = append(burst, tk)
	}
	single, _ := enterWait(t, q, "single", false)
	first.leave()
	// The next turn is burst's second ticket (it was waiting first), then
	// single's, not burst's other four.
	if !granted(burst[0]) || granted(single) {
		t.Fatalf("after the first left: burst[0]=%v single=%v", granted(burst[0]), granted(single))
	}
	burst[0].leave()
	if !granted(single) || granted(burst[1]) {
		t.Fatalf("after burst[0] left: single=%v burst[1]=%v, want single's turn", granted(single), granted(burst[1]))
	}
	single.leave()
	for _, tk := range burst[1:] {
		if !granted(tk) {
			t.Fatal("burst ticket not granted in its turn")
		}
		tk.leave()
	}
}

// TestStartQueuePoolWaitsBehindRequests: a refill is granted only when
// no request waits, whichever came first.
func TestStartQueuePoolWaitsBehindRequests(t *testing.T) {
	q := newStartQueue(1, 0)
	first, _ := enterWait(t, q, "", false)
	refill, _ := enterWait(t, q, "", true)
	req, _ := enterWait(t, q, "acme", false)
	first.leave()
	if !granted(req) || granted(refill) {
		t.Fatalf("request %v refill %v, want the request first", granted(req), granted(refill))
	}
	req.leave()
	if !granted(refill) {
		t.Fatal("the refill is not granted once no request waits")
	}
	refill.leave()
}

// TestStartQueueBound: past bound tickets of one tenant not yet running,
// enter refuses with 429 limit_exceeded and a Retry-After; other
// tenants and refills are not refused; a granted ticket frees its place.
func TestStartQueueBound(t *testing.T) {
	q := newStartQueue(1, 2)
	run, _ := enterWait(t, q, "a", false) // granted: holds a slot, not a place
	w1, _ := enterWait(t, q, "a", false)
	w2, _ := enterWait(t, q, "a", false)
	_, err := q.enter("a", false)
	var e *errdefs.Error
	if !errors.As(err, &e) || errdefs.LimitName(err) != "start_queue" {
		t.Fatalf("third waiting start of a: %v, want limit start_queue", err)
	}
	if code, status := errdefs.Code(err); code != "limit_exceeded" || status != 429 {
		t.Fatalf("refusal %s %d, want limit_exceeded 429", code, status)
	}
	if d, ok := errdefs.RetryAfter(err); !ok || d < time.Second {
		t.Fatalf("Retry-After %s %v", d, ok)
	}
	other, err := q.enter("b", false)
	if err != nil {
		t.Fatalf("another tenant refused: %v", err)
	}
	other.leave() // entered, never waited: its place is given back
	if _, err := q.enter("", true); err != nil {
		t.Fatalf("a refill refused: %v", err)
	}
	run.leave() // w1 runs: a place frees
	tk, err := q.enter("a", false)
	if err != nil {
		t.Fatalf("after one of a's starts ran: %v", err)
	}
	for _, x := range []*startTicket{tk, w1, w2} {
		x.leave()
	}
}

// TestStartQueueCancel: a waiter whose context ends leaves the queue
// with the context's error, and the ones behind it move up.
func TestStartQueueCancel(t *testing.T) {
	q := newStartQueue(1, 0)
	run, _ := enterWait(t, q, "t", false)
	gone, err := q.enter("t", false)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	res := make(chan error, 1)
	go func() { res <- gone.wait(ctx) }()
	for {
		q.mu.Lock()
		queued := gone.queued
		q.mu.Unlock()
		if queued {
			break
		}
		time.Sleep(time.Millisecond)
	}
	next, _ := enterWait(t, q, "t", false)
	cancel()
	if err := <-res; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled wait: %v", err)
	}
	gone.leave()
	run.leave()
	if !granted(next) {
		t.Fatal("the waiter behind a cancelled one is not granted")
	}
	next.leave()
	if r, w := q.depth(); r != 0 || w != 0 || len(q.held) != 0 {
		t.Fatalf("after all left: %d running, %d waiting, held %v", r, w, q.held)
	}
}

// TestStartQueueUnlimited: limit 0 grants every ticket at once.
func TestStartQueueUnlimited(t *testing.T) {
	q := newStartQueue(0, 0)
	var tks []*startTicket
	for range 50 {
		tk, _ := enterWait(t, q, "t", false)
		if !granted(tk) {
			t.Fatal("a ticket waits with no limit")
		}
		tks = append(tks, tk)
	}
	for _, tk := range tks {
		tk.leave()
	}
}

// TestStartQueueAbandon: abandon ends the wait of a recorded start with
// its cause, and reports false for a start not waiting.
func TestStartQueueAbandon(t *testing.T) {
	q := newStartQueue(1, 0)
	run, _ := enterWait(t, q, "t", false)
	tk, err := q.enter("t", false)
	if err != nil {
		t.Fatal(err)
	}
	res := make(chan error, 1)
	go func() { res <- tk.waitFor(context.Background(), "sb1") }()
	for {
		q.mu.Lock()
		_, watched := q.waiters["sb1"]
		queued := tk.queued
		q.mu.Unlock()
		if watched && queued {
			break
		}
		time.Sleep(time.Millisecond)
	}
	cause := errors.New("deleted")
	if !q.abandon("sb1", cause) {
		t.Fatal("abandon found no waiting start")
	}
	if err := <-res; !errors.Is(err, cause) {
		t.Fatalf("abandoned wait: %v, want its cause", err)
	}
	tk.leave()
	if q.abandon("sb1", cause) {
		t.Fatal("abandon found a start that no longer waits")
	}
	run.leave()
	if r, w := q.depth(); r != 0 || w != 0 || len(q.held) != 0 || len(q.waiters) != 0 {
		t.Fatalf("after all left: %d running, %d waiting, held %v, waiters %d", r, w, q.held, len(q.waiters))
	}
}
