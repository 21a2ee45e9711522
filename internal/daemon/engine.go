package daemon

import (
	"github.com/berth-sh/berth/internal/engine"
	"github.com/berth-sh/berth/internal/engine/assemble"
	"github.com/berth-sh/berth/internal/image"
	"github.com/berth-sh/berth/internal/node"
	"github.com/berth-sh/berth/internal/store"
)

// engineSet is the engine's core with its features, as internal/engine/assemble
// makes them (the tests' harness makes them the same way), plus what the
// daemon adds on top (enginemetrics.go).
type engineSet struct {
	*assemble.Engine
}

// assembleEngine makes the engine over backend. Call Recover to
// reconcile and run background work, Close to stop it.
func assembleEngine(cfg engine.Config, st store.Store, images *image.Store, backend node.Backend) (*engineSet, error) {
	e, err := assemble.New(cfg, st, images, backend)
	if err != nil {
		return nil, err
	}
	return &engineSet{Engine: e}, nil
}
