package node_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/internal/node"
	"github.com/berth-sh/berth/internal/sandbox"
)

// bare is a backend with the core only (its methods are never called
// here), classes as given, and optionally a reason for what it lacks.
type bare struct {
	node.Backend
	classes []node.Class
}

func (b bare) Classes() []node.Class { return b.classes }

type refusing struct{ bare }

func (refusing) Refuse(op string) error {
	if op == node.OpPause {
		return errdefs.NotSupported("%s: this node has no freezer", op)
	}
	return nil
}

// freezing has the Freezer capability.
type freezing struct{ bare }

func (freezing) Freeze(context.Context, *sandbox.Sandbox) error { return nil }
func (freezing) Thaw(context.Context, *sandbox.Sandbox) error   { return nil }

func TestNeed(t *testing.T) {
	if _, err := node.Need[node.Freezer](freezing{}, node.OpPause); err != nil {
		t.Errorf("Need of a capability the backend has: %v", err)
	}
	_, err := node.Need[node.Freezer](bare{}, node.OpPause)
	if !errors.Is(err, errdefs.ErrNotSupported) || !strings.Contains(err.Error(), node.OpPause) {
		t.Errorf("Need of a missing capability = %v, want not supported naming the operation", err)
	}
	_, err = node.Need[node.Freezer](refusing{}, node.OpPause)
	if !errors.Is(err, errdefs.ErrNotSupported) || !strings.Contains(err.Error(), "no freezer") {
		t.Errorf("Need with the backend's reason = %v", err)
	}
	// A Refuser with nothing to say about an operation leaves the refusal
	// to Need.
	_, err = node.Need[node.Hibernator](refusing{}, node.OpHibernate)
	if !errors.Is(err, errdefs.ErrNotSupported) {
		t.Errorf("Need where the Refuser says nothing = %v", err)
	}
	if node.Hibernated(bare{}, &sandbox.Sandbox{ID: "x"}) {
		t.Error("Hibernated on a backend that cannot checkpoint")
	}
}

func TestCheckCaps(t *testing.T) {
	claims := []node.Class{{Name: "plain", Caps: node.Caps{Pool: true}}, {Name: "freezes", Caps: node.Caps{Freeze: true}}}
	if err := node.CheckCaps(freezing{bare{classes: claims}}); err != nil {
		t.Errorf("CheckCaps of a backend with what its classes claim: %v", err)
	}
	err := node.CheckCaps(bare{classes: claims})
	if err == nil || !strings.Contains(err.Error(), "freezes") || !strings.Contains(err.Error(), "node.Freezer") {
		t.Errorf("CheckCaps of a class claiming freeze on a backend without it = %v", err)
	}
	for _, caps := range []node.Caps{{Checkpoint: true}, {Capture: true}, {Egress: true}, {RootLayer: true}, {Rename: true}} {
		if err := node.CheckCaps(bare{classes: []node.Class{{Name: "c", Caps: caps}}}); err == nil {
			t.Errorf("CheckCaps accepts %+v on a backend with no capability", caps)
		}
	}
}
