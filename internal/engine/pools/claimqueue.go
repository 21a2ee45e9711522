package pools

import (
	"context"
	"errors"
	"sync"

	"github.com/berth-sh/berth/internal/sandbox"
	"github.com/berth-sh/berth/internal/store"
)

// claimQueue hands the ready members of one pool out to claims, each to
// one claim: the ids of one listing of the pool, popped in order. A burst
// of claims reads the pool's members once, not once per claim (each of
// which read every member, n claims reading n members each), and no two
// claims try the same member, so they do not queue on each other's
// locks. Claims that find the queue empty while a listing is in flight
// wait for that listing instead of making their own.
//
// The queue is a hint, never the truth: a popped member is claimed only
// after its record, read again under its lock, still says it is a ready
// member of this pool (claimLocked), so a member claimed or removed since
// the listing is skipped. Members made after the listing are found by the
// next one, which the first claim to find the queue empty makes.
type claimQueue struct {
	mu      sync.Mutex
	ids     []string
	listing chan struct{} // closed when the listing in flight ends; nil when none
	waiting int           // claims waiting for the listing in flight
}

// queue returns pool k's claim queue.
func (m *Warm) queue(k store.PoolKey) *claimQueue {
	m.mu.Lock()
	defer m.mu.Unlock()
	q, ok := m.claimQueues[k]
	if !ok {
		q = &claimQueue{}
		m.claimQueues[k] = q
	}
	return q
}

// next pops the next member id. With the queue empty it lists the pool
// with list (a listing already in flight is waited for instead) and pops
// from what that found; ok is false when the pool has no member left.
// listed says whether this claim has already seen a listing made after it
// found the queue empty: a claim waits for at most one listing, so an
// empty pool is a miss, not a loop.
func (q *claimQueue) next(ctx context.Context, listed *bool, list func(context.Context) ([]string, error)) (id string, ok bool, err error) {
	for {
		q.mu.Lock()
		if len(q.ids) > 0 {
			id, q.ids = q.ids[0], q.ids[1:]
			q.mu.Unlock()
			return id, true, nil
		}
		if *listed {
			q.mu.Unlock()
			return "", false, nil
		}
		if wait := q.listing; wait != nil {
			q.waiting++
			q.mu.Unlock()
			select {
			case <-wait:
			case <-ctx.Done():
			}
			q.mu.Lock()
			q.waiting--
			q.mu.Unlock()
			if err := ctx.Err(); err != nil {
				return "", false, err
			}
			*listed = true // that listing began after this claim found the queue empty
			continue
		}
		done := make(chan struct{})
		q.listing = done
		q.mu.Unlock()

		ids, err := list(ctx)
		q.mu.Lock()
		if err == nil {
			q.ids = ids
		}
		q.listing = nil
		close(done)
		q.mu.Unlock()
		if err != nil {
			return "", false, err
		}
		*listed = true
	}
}

// readyIDs are the ids of the members of pool k among members that are
// ready to be claimed.
func (m *Warm) readyIDs(k store.PoolKey, members []*sandbox.Sandbox) []string {
	var ids []string
	for _, sb := range members {
		if sb.Tenant == k.Tenant && sb.Spec.Pool == k.Template && m.ready(sb) {
			ids = append(ids, sb.ID)
		}
	}
	return ids
}

// putBack returns id to the head of the queue: a claim refused for the
// claimant's own reason (its name taken, its tenant full) leaves the
// member for the next claim.
func (q *claimQueue) putBack(id string) {
	q.mu.Lock()
	q.ids = append([]string{id}, q.ids...)
	q.mu.Unlock()
}

// errNotClaimable: the popped member is no longer a ready member of the
// pool as the claim needs it (claimed, removed, or made under other
// defaults since the listing). The claim tries the next one.
var errNotClaimable = errors.New("pool member no longer claimable")
