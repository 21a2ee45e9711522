package storetest

import (
	"errors"
	"fmt"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/internal/store"
)

func idemKey(key, owner string) *store.IdempotencyKey {
	return &store.IdempotencyKey{Scope: "t|key:ab", Route: "POST /v1/sandboxes", Key: key, RequestHash: "h1",
		IDs: []string{"sb1"}, Owner: owner, CreatedAt: at(0), ExpiresAt: at(24 * time.Hour)}
}

// testIdempotencyKeys: put-if-absent, compare-and-swap on the owner for
// completion and take-over, delete by owner only, expiry and purge, and
// keys scoped per caller and route.
func testIdempotencyKeys(t *testing.T, s store.Store) {
	ctx := t.Context()
	k := idemKey("k1", "node/a/1")
	got, ok, err := s.PutIdempotencyKey(ctx, k)
	must(t, err)
	if !ok || got != k {
		t.Fatalf("first put: inserted=%v", ok)
	}
	again := idemKey("k1", "node/a/2")
	again.RequestHash, again.IDs = "h2", []string{"other"}
	got, ok, err = s.PutIdempotencyKey(ctx, again)
	must(t, err)
	if ok {
		t.Fatal("second put of one key inserted")
	}
	want := *k
	want.CreatedAt, want.ExpiresAt = stored(k.CreatedAt), stored(k.ExpiresAt)
	if !reflect.DeepEqual(*got, want) {
		t.Fatalf("stored key\n got %+v\nwant %+v", *got, want)
	}
	// Other callers and routes have their own key spaces.
	other := idemKey("k1", "x")
	other.Scope = "t|key:cd"
	if _, ok, err := s.PutIdempotencyKey(ctx, other); err != nil || !ok {
		t.Fatalf("same key, other scope: inserted=%v err=%v", ok, err)
	}
	other = idemKey("k1", "x")
	other.Route = "POST /v1/volumes"
	if _, ok, err := s.PutIdempotencyKey(ctx, other); err != nil || !ok {
		t.Fatalf("same key, other route: inserted=%v err=%v", ok, err)
	}

	// Only the owner updates; a take-over is an update naming the old owner.
	upd := *got
	upd.Owner, upd.IDs = "node/b/1", []string{"sb1", "sb2"}
	if err := s.UpdateIdempotencyKey(ctx, &upd, "node/wrong"); !errors.Is(err, errdefs.ErrConflict) {
		t.Fatalf("update by a non-owner: %v, want ErrConflict", err)
	}
	must(t, s.UpdateIdempotencyKey(ctx, &upd, "node/a/1"))
	if err := s.DeleteIdempotencyKey(ctx, k.Scope, k.Route, k.Key, "node/a/1"); err != nil {
		t.Fatal(err)
	}
	cur, err := s.GetIdempotencyKey(ctx, k.Scope, k.Route, k.Key)
	must(t, err)
	if cur.Owner != "node/b/1" || !reflect.DeepEqual(cur.IDs, []string{"sb1", "sb2"}) || cur.Done {
		t.Fatalf("after take-over (and a stale owner's delete): %+v", cur)
	}
	// Completion stores the answer byte for byte; then it is final.
	body := []byte("{\n  \"id\": \"sb1\"\n}\n")
	done := *cur
	done.Done, done.Status, done.ContentType, done.Body = true, 201, "application/json", body
	must(t, s.UpdateIdempotencyKey(ctx, &done, "node/b/1"))
	cur, err = s.GetIdempotencyKey(ctx, k.Scope, k.Route, k.Key)
	must(t, err)
	if !cur.Done || cur.Status != 201 || cur.ContentType != "application/json" || string(cur.Body) != string(body) {
		t.Fatalf("completed key: %+v body %q", cur, cur.Body)
	}
	if err := s.UpdateIdempotencyKey(ctx, &done, "node/b/1"); !errors.Is(err, errdefs.ErrConflict) {
		t.Fatalf("update of a done key: %v, want ErrConflict", err)
	}
	must(t, s.DeleteIdempotencyKey(ctx, k.Scope, k.Route, k.Key, "node/b/1"))
	if _, err := s.GetIdempotencyKey(ctx, k.Scope, k.Route, k.Key); err != nil {
		t.Fatalf("a done key was deleted: %v", err)
	}

	// A pending key deleted by its owner is free again.
	p := idemKey("k2", "o")
	_, _, err = s.PutIdempotencyKey(ctx, p)
	must(t, err)
	must(t, s.DeleteIdempotencyKey(ctx, p.Scope, p.Route, p.Key, "o"))
	if _, err := s.GetIdempotencyKey(ctx, p.Scope, p.Route, p.Key); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("deleted key: %v", err)
	}
	if err := s.UpdateIdempotencyKey(ctx, p, "o"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("update of a missing key: %v, want ErrNotFound", err)
	}

	// Expired keys are absent to a put and purged.
	late := idemKey("k1", "late")
	late.CreatedAt, late.ExpiresAt = at(25*time.Hour), at(49*time.Hour)
	if _, ok, err := s.PutIdempotencyKey(ctx, late); err != nil || !ok {
		t.Fatalf("put over an expired key: inserted=%v err=%v", ok, err)
	}
	n, err := s.PurgeIdempotencyKeys(ctx, at(24*time.Hour))
	must(t, err)
	if n != 2 { // the two other-scope/route keys of at(0)
		t.Fatalf("purged %d, want 2", n)
	}
	if _, err := s.GetIdempotencyKey(ctx, late.Scope, late.Route, late.Key); err != nil {
		t.Fatalf("unexpired key purged: %v", err)
	}
}

// testIdempotencyConcurrent: of many concurrent puts of one key exactly one
// inserts, and every other sees the winner's record.
func testIdempotencyConcurrent(t *testing.T, s store.Store) {
	ctx := t.Context()
	const n = 32
	var wg sync.WaitGroup
	wins := make([]bool, n)
	owners := make([]string, n)
	errs := make([]error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got, ok, err := s.PutIdempotencyKey(ctx, idemKey("race", fmt.Sprint("owner-", i)))
			wins[i], errs[i] = ok, err
			if got != nil {
				owners[i] = got.Owner
			}
		}()
	}
	wg.Wait()
	winner := ""
	for i := range n {
		if errs[i] != nil {
			t.Fatalf("put %d: %v", i, errs[i])
		}
		if wins[i] {
			if winner != "" {
				t.Fatalf("two puts inserted: %s and owner-%d", winner, i)
			}
			winner = fmt.Sprint("owner-", i)
		}
	}
	if winner == "" {
		t.Fatal("no put inserted")
	}
	for i := range n {
		if owners[i] != winner {
			t.Fatalf("put %d saw owner %q, the winner is %q", i, owners[i], winner)
		}
	}
}
