package kube

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/internal/sandbox"
)

// Only the gVisor class on a RuntimeClass, with a node agent, freezes;
// Freeze and Thaw of any other sandbox refuse with the reason before any
// request, as do a quarantine's cut.
func TestFreezeOnlyGVisorWithNodeAgent(t *testing.T) {
	ctx := context.Background()
	b := egressBackend()
	if b.freezes(GVisorClass) {
		t.Fatal("the gVisor class freezes without a node agent")
	}
	b.cfg.NodeAgent.Port = 7071
	if !b.freezes(GVisorClass) || b.freezes("runc") {
		t.Fatalf("freezes: runsc %v runc %v", b.freezes(GVisorClass), b.freezes("runc"))
	}
	b.rcOf[GVisorClass] = ""
	if b.freezes(GVisorClass) {
		t.Fatal("a runsc class on the cluster's default handler freezes")
	}
	b.rcOf[GVisorClass] = "gvisor"
	runc := &sandbox.Sandbox{ID: "abc", Spec: sandbox.Spec{Runtime: "runc", Network: "egress"}}
	for what, err := range map[string]error{
		"freeze": b.Freeze(ctx, runc), "thaw": b.Thaw(ctx, runc), "cut": b.SetRules(ctx, runc, true),
	} {
		if !errors.Is(err, errdefs.ErrNotSupported) || !strings.Contains(err.Error(), "gVisor") {
			t.Errorf("%s of a runc sandbox: %v", what, err)
		}
	}
}
