package storetest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/internal/sandbox"
	"github.com/berth-sh/berth/internal/store"
)

func testVolumes(t *testing.T, s store.Store) {
	ctx := context.Background()
	v := &store.Volume{ID: "v1", Name: "data", Tenant: "t", State: store.VolumeAvailable,
		SizeBytes: 1 << 30, Inodes: 65536, Keep: true, CreatedAt: at(0), UpdatedAt: at(time.Second)}
	if err := s.CreateVolume(ctx, v); err != nil {
		t.Fatal(err)
	}
	if v.Generation != 1 {
		t.Fatalf("generation %d", v.Generation)
	}
	got, err := s.GetVolume(ctx, store.AnyOwner, "v1")
	if err != nil || got.Name != "data" || got.SizeBytes != 1<<30 || !got.Keep || !got.CreatedAt.Equal(stored(at(0))) {
		t.Fatalf("get: %+v %v", got, err)
	}
	// A live name is unique per tenant.
	dup := *v
	dup.ID = "v2"
	if err := s.CreateVolume(ctx, &dup); !errors.Is(err, errdefs.ErrConflict) {
		t.Fatalf("duplicate live name: %v", err)
	}
	other := dup
	other.ID, other.Tenant = "v3", "u"
	if err := s.CreateVolume(ctx, &other); err != nil {
		t.Fatalf("same name, other tenant: %v", err)
	}
	// Compare-and-swap: attach, then a stale copy fails.
	stale := *got
	got.State, got.SandboxID = store.VolumeAttached, "sb1"
	if err := s.UpdateVolume(ctx, got); err != nil {
		t.Fatal(err)
	}
	stale.State, stale.SandboxID = store.VolumeAttached, "sb2"
	if err := s.UpdateVolume(ctx, &stale); !errors.Is(err, errdefs.ErrConflict) {
		t.Fatalf("stale attach: %v", err)
	}
	byName, err := s.GetVolumeByName(ctx, store.OwnedBy("t"), "data")
	if err != nil || byName.SandboxID != "sb1" {
		t.Fatalf("by name: %+v %v", byName, err)
	}
	// A deleted volume frees its name and leaves the live list.
	byName.State, byName.DeletedAt = store.VolumeDeleted, at(time.Hour)
	if err := s.UpdateVolume(ctx, byName); err != nil {
		t.Fatal(err)
	}
	if _, err := s.GetVolumeByName(ctx, store.OwnedBy("t"), "data"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("deleted volume still found by name: %v", err)
	}
	if err := s.CreateVolume(ctx, &dup); err != nil {
		t.Fatalf("name reuse after delete: %v", err)
	}
	live, _, _ := s.ListVolumes(ctx, store.VolumeFilter{Owner: store.OwnedBy("t")}, store.Page{})
	all, _, _ := s.ListVolumes(ctx, store.VolumeFilter{Owner: store.AnyOwner, IncludeDeleted: true}, store.Page{})
	if len(live) != 1 || live[0].ID != "v2" || len(all) != 3 {
		t.Fatalf("list: live %d all %d", len(live), len(all))
	}
	if err := s.UpdateVolume(ctx, &store.Volume{ID: "nope", Name: "x"}); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("update of unknown volume: %v", err)
	}
}

func testSandboxLifecycleTimes(t *testing.T, s store.Store) {
	ctx := context.Background()
	sb := newSandbox("lt", "t", "lt", sandbox.StateRunning, at(0))
	sb.LastActivityAt = at(3 * time.Second)
	sb.Node = "node-a"
	if err := s.CreateSandbox(ctx, sb); err != nil {
		t.Fatal(err)
	}
	other := newSandbox("lt2", "t", "lt2", sandbox.StateRunning, at(time.Second))
	other.Node = "node-b"
	if err := s.CreateSandbox(ctx, other); err != nil {
		t.Fatal(err)
	}
	if mine, err := listSandboxes(ctx, s, store.SandboxFilter{Owner: store.AnyOwner, Node: "node-a"}); err != nil || len(mine) != 1 || mine[0].ID != "lt" {
		t.Fatalf("node filter: %v %v", mine, err)
	}
	sb.State, sb.PausedAt, sb.StoppedAt, sb.PrevState = sandbox.StateQuarantined, at(4*time.Second), at(5*time.Second), sandbox.StatePaused
	if err := s.UpdateSandbox(ctx, sb); err != nil {
		t.Fatal(err)
	}
	got, err := s.GetSandbox(ctx, store.AnyOwner, "lt")
	if err != nil {
		t.Fatal(err)
	}
	checkSandbox(t, got, sb)
}
