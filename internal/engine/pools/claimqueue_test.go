package pools

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestClaimQueueOneListingPerBurst: 100 claims at once against a pool of
// 60 list it once, get 60 distinct members, and 40 misses; no claim loops
// on an empty pool.
func TestClaimQueueOneListingPerBurst(t *testing.T) {
	var q claimQueue
	var lists atomic.Int32
	release := make(chan struct{})
	list := func(context.Context) ([]string, error) {
		lists.Add(1)
		<-release // every claim arrives while the listing is in flight
		ids := make([]string, 60)
		for i := range ids {
			ids[i] = fmt.Sprintf("m%d", i)
		}
		return ids, nil
	}
	var (
		wg     sync.WaitGroup
		mu     sync.Mutex
		got    = map[string]int{}
		misses int
		ready  sync.WaitGroup
	)
	ready.Add(100)
	for range 100 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			listed := false
			ready.Done()
			id, ok, err := q.next(context.Background(), &listed, list)
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			defer mu.Unlock()
			if !ok {
				misses++
				return
			}
			got[id]++
		}()
	}
	ready.Wait()
	// Release the listing only once the other 99 claims wait for it: a
	// claim scheduled after the queue was drained would list again, and
	// this fake store, unlike the real one, would list the claimed
	// members once more.
	for {
		q.mu.Lock()
		waiting := q.waiting
		q.mu.Unlock()
		if lists.Load() == 1 && waiting == 99 {
			break
		}
		time.Sleep(time.Millisecond)
	}
	close(release)
	wg.Wait()
	if n := lists.Load(); n != 1 {
		t.Errorf("%d listings for one burst, want 1", n)
	}
	if len(got) != 60 || misses != 40 {
		t.Errorf("%d members handed out, %d misses; want 60 and 40", len(got), misses)
	}
	for id, n := range got {
		if n != 1 {
			t.Errorf("member %s handed to %d claims", id, n)
		}
	}
}

// TestClaimQueueListingError: a failed listing is the claim's error and
// leaves no listing in flight, so the next claim lists again.
func TestClaimQueueListingError(t *testing.T) {
	var q claimQueue
	boom := errors.New("store down")
	listed := false
	if _, _, err := q.next(context.Background(), &listed, func(context.Context) ([]string, error) { return nil, boom }); !errors.Is(err, boom) {
		t.Fatalf("err = %v, want %v", err, boom)
	}
	listed = false
	id, ok, err := q.next(context.Background(), &listed, func(context.Context) ([]string, error) { return []string{"a", "b"}, nil })
	if err != nil || !ok || id != "a" {
		t.Fatalf("next = %q %v %v; want a", id, ok, err)
	}
	q.putBack("a")
	listed = false
	if id, ok, _ := q.next(context.Background(), &listed, nil); !ok || id != "a" {
		t.Fatalf("after putBack next = %q %v; want a first", id, ok)
	}
}
