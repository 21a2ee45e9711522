package storetest

import (
	"context"
	"testing"
	"time"

	"github.com/berth-sh/berth/internal/sandbox"
	"github.com/berth-sh/berth/internal/store"
)

func testWebhookOutbox(t *testing.T, s store.Store) {
	ctx := context.Background()
	for _, id := range []string{"a", "b"} {
		if err := s.CreateSandbox(ctx, newSandbox(id, "t", "", sandbox.StateRunning, at(0))); err != nil {
			t.Fatal(err)
		}
	}
	var ids []int64
	for i, sbid := range []string{"a", "b", "a"} {
		ev := &sandbox.Event{SandboxID: sbid, Time: at(time.Duration(i) * time.Second), Type: "state", To: sandbox.StateRunning}
		if err := s.AppendEvent(ctx, ev); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, ev.ID)
	}
	evs, err := s.ListEventsSince(ctx, ids[0], 10)
	if err != nil || len(evs) != 2 || evs[0].ID != ids[1] || evs[1].SandboxID != "a" {
		t.Fatalf("events since: %+v %v", evs, err)
	}
	if _, ok, err := s.WebhookCursor(ctx, "http://x"); ok || err != nil {
		t.Fatalf("cursor before set: %v %v", ok, err)
	}
	for _, v := range []int64{ids[1], ids[2]} {
		if err := s.SetWebhookCursor(ctx, "http://x", v); err != nil {
			t.Fatal(err)
		}
	}
	if c, ok, err := s.WebhookCursor(ctx, "http://x"); !ok || err != nil || c != ids[2] {
		t.Fatalf("cursor %d %v %v", c, ok, err)
	}
	// Never back: a stalled deliverer waking late does not rewind it.
	if err := s.SetWebhookCursor(ctx, "http://x", ids[0]); err != nil {
		t.Fatal(err)
	}
	if c, _, _ := s.WebhookCursor(ctx, "http://x"); c != ids[2] {
		t.Fatalf("cursor moved back to %d", c)
	}
	d := &store.WebhookDelivery{EventID: ids[2], URL: "http://x", Attempt: 1, Status: 503, Error: "unavailable", Time: at(time.Minute)}
	if err := s.RecordWebhookDelivery(ctx, d); err != nil || d.ID == 0 {
		t.Fatalf("record: %v", err)
	}
	ds, err := s.ListWebhookDeliveries(ctx, ids[2])
	if err != nil || len(ds) != 1 || ds[0].Status != 503 || !ds[0].Time.Equal(stored(at(time.Minute))) {
		t.Fatalf("deliveries: %+v %v", ds, err)
	}
}
