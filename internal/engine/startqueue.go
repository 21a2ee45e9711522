package engine

import (
	"context"
	"sync"
	"time"

	"github.com/berth-sh/berth/internal/errdefs"
)

// startQueue bounds how many sandboxes this node starts at once, and
// makes the starts past that wait their turn instead of failing: a burst
// of a hundred creates on a two-core host does not start a hundred
// runtimes together (each then takes as long as all of them: the first
// answers when the last does), it starts a few at a time, first come
// first served within a tenant and in turn between tenants, so one
// tenant's fan-out cannot hold another's single create behind it. Warm
// pool refills wait behind every request from a caller: the capacity
// they make is for later, the caller waits now.
//
// A start enters (enter) before anything of it is written, where the
// tenant's bound on waiting starts may refuse it (429 limit_exceeded with
// a Retry-After, nothing written); it waits for its turn (wait) once its
// record is stored, so a queued create is visible as creating and holds
// its place in the tenant's quota; it leaves (leave) when it is running or
// has failed.
type startQueue struct {
	mu sync.Mutex
	// limit is the starts at once; 0: no limit (every start runs at once).
	limit int
	// bound is the starts of one tenant that may wait; 0: no bound.
	bound   int
	running int
	// waiting holds each class's tickets in arrival order; turn the
	// classes with waiters, in the order they are served from.
	waiting map[queueClass][]*startTicket
	turn    []queueClass
	// held counts each tenant's tickets not yet running (waiting, or
	// entered and not waiting yet): the bound's measure.
	held map[string]int
	// avg is a moving average of how long a start held its slot, for the
	// Retry-After of a refusal.
	avg time.Duration
	// waiters cancel the wait of a recorded start by its sandbox id: a
	// delete of a sandbox still waiting its turn ends the wait at once
	// instead of waiting behind it (abandon).
	waiters map[string]context.CancelCauseFunc
}

// queueClass is a queue of its own in the turn: a tenant's requests, or
// its pool's refills (served only when no request waits).
type queueClass struct {
	tenant string
	pool   bool
}

// startTicket is one start's place.
type startTicket struct {
	q       *startQueue
	class   queueClass
	ready   chan struct{} // closed when the ticket is granted its slot
	granted bool
	queued  bool // in waiting
	done    bool
	since   time.Time
}

func newStartQueue(limit, bound int) *startQueue {
	return &startQueue{limit: max(limit, 0), bound: max(bound, 0),
		waiting: map[queueClass][]*startTicket{}, held: map[string]int{}, avg: 500 * time.Millisecond,
		waiters: map[string]context.CancelCauseFunc{}}
}

// enter takes a ticket for a start of tenant (pool: a warm-pool refill,
// never refused). It is refused when tenant already has bound starts
// entered and not running.
func (q *startQueue) enter(tenant string, pool bool) (*startTicket, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if !pool && q.bound > 0 && q.held[tenant] >= q.bound {
		name := tenant
		if name == "" {
			name = "(host admin)"
		}
		// The queue ahead of a newcomer drains at limit starts per
		// average start time.
		d := q.avg * time.Duration(q.bound) / time.Duration(max(q.limit, 1))
		return nil, errdefs.LimitBusy("start_queue", int64(q.bound), max(d, time.Second),
			"tenant %s: %d sandbox starts already wait their turn on this node", name, q.bound)
	}
	if !pool {
		q.held[tenant]++
	}
	return &startTicket{q: q, class: queueClass{tenant, pool}, ready: make(chan struct{})}, nil
}

// wait blocks until t may start, or ctx ends (then t is no longer
// queued, and the error is ctx's).
func (t *startTicket) wait(ctx context.Context) error {
	q := t.q
	q.mu.Lock()
	if t.granted || t.done {
		q.mu.Unlock()
		return nil
	}
	if q.limit == 0 || (q.running < q.limit && q.empty()) {
		q.grant(t)
		q.mu.Unlock()
		return nil
	}
	if len(q.waiting[t.class]) == 0 {
		q.turn = append(q.turn, t.class)
	}
	q.waiting[t.class] = append(q.waiting[t.class], t)
	t.queued = true
	q.mu.Unlock()
	select {
	case <-t.ready:
		return nil
	case <-ctx.Done():
		q.mu.Lock()
		defer q.mu.Unlock()
		if t.granted { // granted as ctx ended: the slot is ours, keep it
			return nil
		}
		q.unqueue(t)
		return ctx.Err()
	}
}

// waitFor is wait for the start of sandbox id, which abandon(id) ends
// with its cause.
func (t *startTicket) waitFor(ctx context.Context, id string) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	t.q.mu.Lock()
	t.q.waiters[id] = cancel
	t.q.mu.Unlock()
	defer func() {
		t.q.mu.Lock()
		delete(t.q.waiters, id)
		t.q.mu.Unlock()
	}()
	if err := t.wait(ctx); err != nil {
		return context.Cause(ctx)
	}
	return nil
}

// abandon ends the wait of sandbox id's start, if it is waiting, with
// cause; it reports whether one was.
func (q *startQueue) abandon(id string, cause error) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	cancel, ok := q.waiters[id]
	if ok {
		cancel(cause)
	}
	return ok
}

// leave gives t's slot (or its place) back and starts the next waiter.
// It may be called more than once, and without wait.
func (t *startTicket) leave() {
	q := t.q
	q.mu.Lock()
	defer q.mu.Unlock()
	if t.done {
		return
	}
	t.done = true
	if t.queued {
		q.unqueue(t)
	}
	if t.granted {
		q.running--
		held := time.Since(t.since)
		q.avg += (held - q.avg) / 8
	} else if !t.class.pool {
		q.release(t.class.tenant)
	}
	q.dispatch()
}

// empty reports whether nothing waits. q.mu held.
func (q *startQueue) empty() bool { return len(q.turn) == 0 }

// grant gives t a slot. q.mu held.
func (q *startQueue) grant(t *startTicket) {
	t.granted, t.since = true, time.Now()
	q.running++
	if !t.class.pool {
		q.release(t.class.tenant)
	}
	close(t.ready)
}

func (q *startQueue) release(tenant string) {
	if q.held[tenant]--; q.held[tenant] <= 0 {
		delete(q.held, tenant)
	}
}

// dispatch grants free slots to waiters: the classes in turn, a
// request class before any pool class, one ticket each before the
// next class. q.mu held.
func (q *startQueue) dispatch() {
	for (q.limit == 0 || q.running < q.limit) && !q.empty() {
		i := 0
		for j, c := range q.turn {
			if !c.pool {
				i = j
				break
			}
		}
		c := q.turn[i]
		w := q.waiting[c]
		t := w[0]
		t.queued = false
		q.turn = append(q.turn[:i:i], q.turn[i+1:]...)
		if len(w) > 1 {
			q.waiting[c] = w[1:]
			q.turn = append(q.turn, c) // to the back of the turn
		} else {
			delete(q.waiting, c)
		}
		q.grant(t)
	}
}

// unqueue takes t out of waiting. q.mu held.
func (q *startQueue) unqueue(t *startTicket) {
	t.queued = false
	w := q.waiting[t.class]
	for i, x := range w {
		if x == t {
			w = append(w[:i:i], w[i+1:]...)
			break
		}
	}
	if len(w) > 0 {
		q.waiting[t.class] = w
		return
	}
	delete(q.waiting, t.class)
	for i, c := range q.turn {
		if c == t.class {
			q.turn = append(q.turn[:i:i], q.turn[i+1:]...)
			break
		}
	}
}

// depth reports the starts running and waiting.
func (q *startQueue) depth() (running, waiting int) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for _, w := range q.waiting {
		waiting += len(w)
	}
	return q.running, waiting
}
