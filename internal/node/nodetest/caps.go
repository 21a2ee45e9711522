package nodetest

import (
	"context"

	"github.com/berth-sh/berth/internal/node"
	"github.com/berth-sh/berth/internal/sandbox"
)

// The suite asks for a capability as the engine does (node.Need): a
// backend that lacks the interface answers with its refusal, one that has
// it with what the class can do. These helpers are that question and the
// call in one, so a case reads the same on every backend.

func (s *suite) freeze(ctx context.Context, sb *sandbox.Sandbox) error {
	f, err := node.Need[node.Freezer](s.b, node.OpPause)
	if err != nil {
		return err
	}
	return f.Freeze(ctx, sb)
}

func (s *suite) thaw(ctx context.Context, sb *sandbox.Sandbox) error {
	f, err := node.Need[node.Freezer](s.b, node.OpResume)
	if err != nil {
		return err
	}
	return f.Thaw(ctx, sb)
}

func (s *suite) checkpoint(ctx context.Context, sb *sandbox.Sandbox) (node.Checkpoint, bool, error) {
	h, err := node.Need[node.Hibernator](s.b, node.OpHibernate)
	if err != nil {
		return node.Checkpoint{}, true, err // refused: sb runs on
	}
	return h.Checkpoint(ctx, sb)
}

func (s *suite) restore(ctx context.Context, sb *sandbox.Sandbox) error {
	h, err := node.Need[node.Hibernator](s.b, node.OpWake)
	if err != nil {
		return err
	}
	return h.Restore(ctx, sb)
}

func (s *suite) capture(ctx context.Context, sb *sandbox.Sandbox, name string) (node.Capture, func(), error) {
	c, err := node.Need[node.Capturer](s.b, node.OpCapture)
	if err != nil {
		return node.Capture{}, nil, err
	}
	return c.Capture(ctx, sb, name)
}

func (s *suite) materialize(ctx context.Context, sb *sandbox.Sandbox, name string) error {
	c, err := node.Need[node.Capturer](s.b, node.OpCapture)
	if err != nil {
		return err
	}
	return c.Materialize(ctx, sb, name)
}

func (s *suite) revert(ctx context.Context, sb *sandbox.Sandbox, name string) error {
	c, err := node.Need[node.Capturer](s.b, node.OpCapture)
	if err != nil {
		return err
	}
	return c.Revert(ctx, sb, name)
}

func (s *suite) dropCapture(name string) error {
	c, err := node.Need[node.Capturer](s.b, node.OpCapture)
	if err != nil {
		return err
	}
	return c.DropCapture(name)
}

// newCaptureName is the backend's name for a new capture of parent; one
// without captures gets a name of the suite's, for its refusals.
func (s *suite) newCaptureName(parent string) string {
	if c, ok := s.b.(node.Capturer); ok {
		return c.CaptureName(parent)
	}
	return "nodetest-" + parent + "-" + newID()[:6]
}

func (s *suite) setRules(ctx context.Context, sb *sandbox.Sandbox, cut bool) error {
	e, err := node.Need[node.Egress](s.b, node.OpQuarantine)
	if err != nil {
		return err
	}
	return e.SetRules(ctx, sb, cut)
}

func (s *suite) setHostname(ctx context.Context, sb *sandbox.Sandbox, name string) error {
	r, err := node.Need[node.Renamer](s.b, node.OpRename)
	if err != nil {
		return err
	}
	return r.SetHostname(ctx, sb, name)
}

func (s *suite) diff(ctx context.Context, sb *sandbox.Sandbox) ([]node.Change, error) {
	r, err := node.Need[node.RootLayer](s.b, node.OpDiff)
	if err != nil {
		return nil, err
	}
	return r.Diff(ctx, sb)
}

func (s *suite) quarantineFiles(ctx context.Context, sb *sandbox.Sandbox) (node.FileSource, error) {
	r, err := node.Need[node.RootLayer](s.b, node.OpQuarantine)
	if err != nil {
		return nil, err
	}
	return r.QuarantineFiles(ctx, sb)
}

func (s *suite) commitLayer(ctx context.Context, sb *sandbox.Sandbox) (string, error) {
	r, err := node.Need[node.RootLayer](s.b, node.OpTemplateBuilds)
	if err != nil {
		return "", err
	}
	return r.CommitLayer(ctx, sb)
}
