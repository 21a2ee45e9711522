package storetest

import (
	"context"
	"errors"
	"maps"
	"testing"
	"time"

	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/internal/sandbox"
	"github.com/berth-sh/berth/internal/store"
)

func testSnapshots(t *testing.T, s store.Store) {
	ctx := context.Background()
	sn := &store.Snapshot{ID: "sn1", Name: "before", Tenant: "t", SandboxID: "sb", Template: "base",
		Layers: []string{"sha256:aa"}, Spec: sandbox.Spec{PersistRoot: true, VolumeSize: 1 << 30},
		SizeBytes: 42, CreatedAt: at(0), ExpiresAt: at(time.Hour)}
	if err := s.CreateSnapshot(ctx, sn); err != nil {
		t.Fatal(err)
	}
	dup := *sn
	dup.ID = "sn2"
	if err := s.CreateSnapshot(ctx, &dup); !errors.Is(err, errdefs.ErrConflict) {
		t.Fatalf("duplicate name: %v", err)
	}
	got, err := s.GetSnapshotByName(ctx, store.OwnedBy("t"), "before")
	if err != nil || got.ID != "sn1" || !got.Spec.PersistRoot || got.Layers[0] != "sha256:aa" ||
		!got.ExpiresAt.Equal(stored(at(time.Hour))) {
		t.Fatalf("by name: %+v %v", got, err)
	}
	dup.Name, dup.SandboxID, dup.CreatedAt = "after", "other", at(time.Second)
	s.CreateSnapshot(ctx, &dup)
	if l, _, _ := s.ListSnapshots(ctx, store.SnapshotFilter{Owner: store.AnyOwner, SandboxID: "sb"}, store.Page{}); len(l) != 1 {
		t.Fatalf("list by sandbox: %d", len(l))
	}
	if l, _, _ := s.ListSnapshots(ctx, store.SnapshotFilter{Owner: store.AnyOwner}, store.Page{}); len(l) != 2 || l[0].ID != "sn1" {
		t.Fatalf("list all: %v", l)
	}
	if err := s.DeleteSnapshot(ctx, "sn1"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.GetSnapshot(ctx, store.AnyOwner, "sn1"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("after delete: %v", err)
	}
	if err := s.DeleteSnapshot(ctx, "sn1"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("second delete: %v", err)
	}
	// Build cache and pools.
	if _, err := s.GetBuildCache(ctx, "", "k"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("empty cache: %v", err)
	}
	must(t, s.PutBuildCache(ctx, "", "k", "sha256:1"))
	must(t, s.PutBuildCache(ctx, "", "k", "sha256:2"))
	if l, err := s.GetBuildCache(ctx, "", "k"); err != nil || l != "sha256:2" {
		t.Fatalf("cache: %q %v", l, err)
	}
	must(t, s.SetPool(ctx, "", "py", 3))
	must(t, s.SetPool(ctx, "", "go", 1))
	must(t, s.SetPool(ctx, "", "go", 0)) // kept: a size of none
	must(t, s.SetPool(ctx, "", "js", 2))
	must(t, s.ClearPool(ctx, "", "js")) // forgotten
	// Pools are keyed per tenant: a's py is not the host's py, and
	// removing one leaves the other.
	must(t, s.SetPool(ctx, "a", "py", 1))
	must(t, s.SetPool(ctx, "b", "go", 2))
	want := map[store.PoolKey]int{{Template: "py"}: 3, {Template: "go"}: 0, {Tenant: "a", Template: "py"}: 1, {Tenant: "b", Template: "go"}: 2}
	if p, err := s.ListPools(ctx); err != nil || !maps.Equal(p, want) {
		t.Fatalf("pools: %v %v, want %v", p, err, want)
	}
	must(t, s.ClearPool(ctx, "a", "py"))
	delete(want, store.PoolKey{Tenant: "a", Template: "py"})
	if p, err := s.ListPools(ctx); err != nil || !maps.Equal(p, want) {
		t.Fatalf("pools after a's removal: %v %v, want %v", p, err, want)
	}
}

// testPoolResizeAtomic: a pool being resized always has a size to a
// reader. A refill that read "no pool" between a delete and an insert
// retired every member of a pool only being made smaller.
func testPoolResizeAtomic(t *testing.T, s store.Store) {
	ctx := context.Background()
	must(t, s.SetPool(ctx, "", "base", 3))
	stop := make(chan struct{})
	errc := make(chan error, 1)
	go func() {
		defer close(errc)
		for n := 0; ; n++ {
			select {
			case <-stop:
				return
			default:
			}
			if err := s.SetPool(ctx, "", "base", 1+n%3); err != nil {
				errc <- err
				return
			}
		}
	}()
	for range 3000 {
		p, err := s.ListPools(ctx)
		if err != nil {
			close(stop)
			t.Fatal(err)
		}
		if _, ok := p[store.PoolKey{Template: "base"}]; !ok {
			close(stop)
			t.Fatalf("a pool being resized read as no pool: %v", p)
		}
	}
	close(stop)
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
}

// testPeers: a node's peer address, replaced by its next start.
func testPeers(t *testing.T, s store.Store) {
	ctx := context.Background()
	if _, err := s.GetPeer(ctx, "node-a"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("no address yet: %v", err)
	}
	must(t, s.PutPeer(ctx, "node-a", "10.0.0.1:7443"))
	must(t, s.PutPeer(ctx, "node-b", "10.0.0.2:7443"))
	must(t, s.PutPeer(ctx, "node-a", "10.0.0.9:7443"))
	for node, want := range map[string]string{"node-a": "10.0.0.9:7443", "node-b": "10.0.0.2:7443"} {
		if got, err := s.GetPeer(ctx, node); err != nil || got != want {
			t.Fatalf("%s: %q %v, want %q", node, got, err, want)
		}
	}
	if err := s.PutPeer(ctx, "", "x:1"); !errors.Is(err, errdefs.ErrInvalid) {
		t.Fatalf("no node: %v", err)
	}
}
