package storetest

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/internal/sandbox"
	"github.com/berth-sh/berth/internal/store"
)

// tombstone stores a sandbox deleted at deleted, with n ≥ 2 events, a flow and
// a webhook delivery of its last event, and returns its last event's id.
func tombstone(t *testing.T, s store.Store, id string, deleted time.Time, n int) int64 {
	t.Helper()
	ctx := context.Background()
	sb := newSandbox(id, "t", id, sandbox.StateCreating, deleted.Add(-time.Hour))
	must(t, s.CreateSandbox(ctx, sb, &sandbox.Event{Type: "state", To: sandbox.StateCreating, Time: sb.CreatedAt}))
	for i := 1; i < n-1; i++ {
		must(t, s.AppendEvent(ctx, newEvent(id, i)))
	}
	must(t, s.AppendFlows(ctx, []*store.Flow{{SandboxID: id, ID: 1, Time: deleted, Kind: "conn", Decision: "allow"}}, 0))
	sb.State, sb.DeletedAt = sandbox.StateDeleted, deleted
	end := &sandbox.Event{Type: "state", From: sandbox.StateCreating, To: sandbox.StateDeleted, Time: deleted}
	must(t, s.UpdateSandbox(ctx, sb, end))
	must(t, s.RecordWebhookDelivery(ctx, &store.WebhookDelivery{EventID: end.ID, URL: "http://hook", Attempt: 1, Status: 200, Time: deleted}))
	return end.ID
}

func gone(t *testing.T, s store.Store, id string) bool {
	t.Helper()
	_, err := s.GetSandbox(context.Background(), store.AnyOwner, id)
	if err != nil && !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatal(err)
	}
	return err != nil
}

// testRetention: the sweep purges old tombstones with their events, flows
// and deliveries, in bounded batches, keeps live records and recent
// tombstones, and never an event a webhook has not handled.
func testRetention(t *testing.T, s store.Store) {
	ctx := context.Background()
	now := at(30 * 24 * time.Hour)
	cutoff := now.Add(-7 * 24 * time.Hour)

	oldA := tombstone(t, s, "old-a", cutoff.Add(-48*time.Hour), 4)
	oldB := tombstone(t, s, "old-b", cutoff.Add(-24*time.Hour), 3)
	tombstone(t, s, "recent", cutoff.Add(time.Hour), 3)
	live := newSandbox("live", "t", "live", sandbox.StateRunning, cutoff.Add(-90*24*time.Hour))
	must(t, s.CreateSandbox(ctx, live, &sandbox.Event{Type: "state", To: sandbox.StateRunning}))
	must(t, s.CreateVolume(ctx, &store.Volume{ID: "vold", Name: "vold", Tenant: "t", State: store.VolumeDeleted, DeletedAt: cutoff.Add(-time.Hour)}))
	must(t, s.CreateVolume(ctx, &store.Volume{ID: "vnew", Name: "vnew", Tenant: "t", State: store.VolumeDeleted, DeletedAt: cutoff.Add(time.Hour)}))
	must(t, s.CreateVolume(ctx, &store.Volume{ID: "vlive", Name: "vlive", Tenant: "t", State: store.VolumeAvailable, CreatedAt: cutoff.Add(-90 * 24 * time.Hour)}))

	// No cutoff: nothing to do.
	if r, err := s.Purge(ctx, store.PurgeRequest{}); err != nil || r != (store.PurgeResult{}) {
		t.Fatalf("purge without a cutoff: %+v %v", r, err)
	}

	// A configured webhook with no cursor yet holds back every event.
	r, err := s.Purge(ctx, store.PurgeRequest{Before: cutoff, Webhooks: []string{"http://hook"}})
	must(t, err)
	if r.Sandboxes != 0 || gone(t, s, "old-a") {
		t.Fatalf("purged with a webhook that handled nothing: %+v", r)
	}
	if r.Volumes != 1 {
		t.Errorf("volume tombstones purged: %d, want 1", r.Volumes)
	}

	// Its cursor below old-a's last event: old-a stays; the lowest of two
	// webhooks' cursors counts.
	must(t, s.SetWebhookCursor(ctx, "http://hook", oldB))
	must(t, s.SetWebhookCursor(ctx, "http://slow", oldA-1))
	r, err = s.Purge(ctx, store.PurgeRequest{Before: cutoff, Webhooks: []string{"http://hook", "http://slow"}})
	must(t, err)
	if r.Sandboxes != 0 || gone(t, s, "old-a") || gone(t, s, "old-b") {
		t.Fatalf("purged past the slowest webhook's cursor: %+v", r)
	}
	// Once the slow one is past old-a but not old-b, old-a goes, with its
	// events, flows and delivery records, in a batch of one.
	must(t, s.SetWebhookCursor(ctx, "http://slow", oldA))
	r, err = s.Purge(ctx, store.PurgeRequest{Before: cutoff, Webhooks: []string{"http://hook", "http://slow"}, Limit: 1})
	must(t, err)
	if r.Sandboxes != 1 || r.Events != 4 || r.Flows != 1 || !gone(t, s, "old-a") || gone(t, s, "old-b") {
		t.Fatalf("purge: %+v (old-a gone %v, old-b gone %v)", r, gone(t, s, "old-a"), gone(t, s, "old-b"))
	}
	if !r.Full(1) {
		t.Errorf("a batch that hit its limit is not Full")
	}
	if evs, _ := listEvents(ctx, s, "old-a", 0, 0); len(evs) != 0 {
		t.Errorf("purged tombstone kept %d events", len(evs))
	}
	if fs, _ := s.ListFlows(ctx, store.AnyOwner, "old-a", 0, 0); len(fs) != 0 {
		t.Errorf("purged tombstone kept %d flows", len(fs))
	}
	if ds, _ := s.ListWebhookDeliveries(ctx, oldA); len(ds) != 0 {
		t.Errorf("purged tombstone kept %d delivery records", len(ds))
	}

	// Without webhooks everything old goes; recent tombstones, live
	// records and live volumes stay.
	r, err = s.Purge(ctx, store.PurgeRequest{Before: cutoff})
	must(t, err)
	if r.Sandboxes != 1 || !gone(t, s, "old-b") {
		t.Fatalf("purge without webhooks: %+v", r)
	}
	for _, id := range []string{"recent", "live"} {
		if gone(t, s, id) {
			t.Errorf("%s was purged", id)
		}
	}
	if evs, _ := listEvents(ctx, s, "live", 0, 0); len(evs) != 1 {
		t.Errorf("live sandbox has %d events after purge, want 1", len(evs))
	}
	for _, id := range []string{"vnew", "vlive"} {
		if _, err := s.GetVolume(ctx, store.AnyOwner, id); err != nil {
			t.Errorf("volume %s: %v", id, err)
		}
	}
	if _, err := s.GetVolume(ctx, store.AnyOwner, "vold"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("old volume tombstone: %v", err)
	}
	// Nothing left to do.
	if r, err := s.Purge(ctx, store.PurgeRequest{Before: cutoff}); err != nil || r != (store.PurgeResult{}) {
		t.Errorf("second purge: %+v %v", r, err)
	}

	// Batches are bounded and add up.
	for i := range 5 {
		tombstone(t, s, fmt.Sprintf("batch-%d", i), cutoff.Add(-time.Duration(i+1)*time.Minute), 2)
	}
	total := int64(0)
	for range 10 {
		r, err := s.Purge(ctx, store.PurgeRequest{Before: cutoff, Limit: 2})
		must(t, err)
		if r.Sandboxes > 2 {
			t.Fatalf("batch of %d over its limit 2", r.Sandboxes)
		}
		total += r.Sandboxes
		if !r.Full(2) {
			break
		}
	}
	if total != 5 {
		t.Errorf("batches purged %d tombstones, want 5", total)
	}
}
