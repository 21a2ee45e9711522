package storetest

import (
	"context"
	"testing"
	"time"

	"github.com/berth-sh/berth/internal/sandbox"
	"github.com/berth-sh/berth/internal/store"
)

func testFlows(t *testing.T, s store.Store) {
	ctx := context.Background()
	if err := s.CreateSandbox(ctx, newSandbox("fl", "t", "", sandbox.StateRunning, at(0))); err != nil {
		t.Fatal(err)
	}
	var batch []*store.Flow
	for i := 0; i < 7; i++ {
		batch = append(batch, &store.Flow{SandboxID: "fl", Time: at(time.Duration(i) * time.Second), Kind: "conn",
			Proto: "tcp", Src: "100.96.0.2:40000", Dst: "203.0.113.10:443", Decision: "deny", Rule: "default deny"})
	}
	batch[3].Decision, batch[3].Name = "allow", "pypi.org"
	if err := s.AppendFlows(ctx, batch[:4], 5); err != nil {
		t.Fatal(err)
	}
	if err := s.AppendFlows(ctx, batch[4:], 5); err != nil {
		t.Fatal(err)
	}
	got, err := s.ListFlows(ctx, store.AnyOwner, "fl", 0, 0)
	if err != nil || len(got) != 5 {
		t.Fatalf("kept %d flows (want the newest 5): %v", len(got), err)
	}
	if !got[4].Time.Equal(stored(at(6*time.Second))) || got[0].Time.Equal(stored(at(0))) {
		t.Fatalf("wrong flows kept: first %s last %s", got[0].Time, got[4].Time)
	}
	if got[1].Name != "pypi.org" || got[1].Decision != "allow" {
		t.Fatalf("flow fields: %+v", got[1])
	}
	after, _ := s.ListFlows(ctx, store.AnyOwner, "fl", got[2].ID, 0)
	if len(after) != 2 {
		t.Fatalf("after: %d", len(after))
	}
	if err := s.PurgeSandbox(ctx, "fl"); err != nil {
		t.Fatal(err)
	}
	if left, _ := s.ListFlows(ctx, store.AnyOwner, "fl", 0, 0); len(left) != 0 {
		t.Fatalf("purge left %d flows", len(left))
	}
}
