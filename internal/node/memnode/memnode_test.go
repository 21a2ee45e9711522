package memnode_test

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/internal/node"
	"github.com/berth-sh/berth/internal/node/memnode"
	"github.com/berth-sh/berth/internal/sandbox"
)

func TestNodeDouble(t *testing.T) {
	ctx := context.Background()
	n := memnode.New(t)
	sb := &sandbox.Sandbox{ID: "aaaaaaaaaaaaaaaa", Spec: sandbox.Spec{Layers: []string{"l"}}}
	boom := errors.New("boom")
	n.FailNextFor("Provision", "other", boom) // not this sandbox's
	n.FailNext("Provision", boom)
	if err := n.Provision(ctx, sb); !errors.Is(err, boom) {
		t.Fatalf("first provision: %v", err)
	}
	if err := n.Provision(ctx, sb); err != nil {
		t.Fatalf("second provision: %v", err)
	}
	if err := n.Provision(ctx, &sandbox.Sandbox{ID: "other", Spec: sb.Spec}); !errors.Is(err, boom) {
		t.Fatalf("provision of other: %v", err)
	}
	if _, err := n.Agent(sb).Ping(ctx); err != nil {
		t.Fatalf("agent of a running sandbox: %v", err)
	}
	if err := n.Freeze(ctx, sb); err != nil {
		t.Fatal(err)
	}
	if _, err := n.Agent(sb).Ping(ctx); !errors.Is(err, errdefs.ErrUnavailable) {
		t.Fatalf("agent of a frozen sandbox: %v", err)
	}
	if st, _ := n.Status(ctx, sb); st != node.StatusPaused {
		t.Fatalf("status %s", st)
	}
	if err := n.Thaw(ctx, sb); err != nil {
		t.Fatal(err)
	}
	if err := n.Remove(ctx, sb); err != nil {
		t.Fatal(err)
	}
	if _, ok := n.Get(sb.ID); ok {
		t.Fatal("removed sandbox still held")
	}
	want := []string{"Provision", "Provision", "Freeze", "Status", "Thaw", "Remove"}
	if got := n.Methods(sb.ID); !slices.Equal(got, want) {
		t.Fatalf("calls %v, want %v", got, want)
	}
}
