// Package assemble makes the engine: the core with every feature, each
// given the core's Host and registering its hooks as it is made. The
// daemon (internal/daemon) and the tests' harness
// (internal/engine/enginetest) both call New, so a new feature is added
// here once.
package assemble

import (
	"context"

	"github.com/berth-sh/berth/internal/engine"
	"github.com/berth-sh/berth/internal/engine/files"
	"github.com/berth-sh/berth/internal/engine/hibernate"
	"github.com/berth-sh/berth/internal/engine/netrules"
	"github.com/berth-sh/berth/internal/engine/pools"
	"github.com/berth-sh/berth/internal/engine/procs"
	"github.com/berth-sh/berth/internal/engine/reconcile"
	"github.com/berth-sh/berth/internal/engine/snapshots"
	"github.com/berth-sh/berth/internal/engine/templates"
	"github.com/berth-sh/berth/internal/engine/volumes"
	"github.com/berth-sh/berth/internal/image"
	"github.com/berth-sh/berth/internal/node"
	"github.com/berth-sh/berth/internal/store"
)

// Engine is the engine's core with its features: what the doors drive
// (each through the small interface it declares: server.Engine,
// e2b.Engine, agentsandbox.Engine) and what the daemon starts and stops.
// It holds no logic of its own.
type Engine struct {
	*engine.Engine
	*pools.Warm
	*snapshots.Snapshots
	*templates.Builder
	*reconcile.Reconciler
	*volumes.Volumes
	*netrules.Rules
	*hibernate.Hibernation
	*files.Access
	*procs.Procs
}

// New makes the core over backend and gives each feature its Host; each
// registers its hooks as it is made (netrules before templates, so the
// flow log records a flow before a build sees it). Call Recover to
// reconcile and run background work, Close to stop it.
func New(cfg engine.Config, st store.Store, images *image.Store, backend node.Backend) (*Engine, error) {
	e, err := engine.New(cfg, st, images, backend)
	if err != nil {
		return nil, err
	}
	h := e.Host()
	w := pools.New(h)
	fa := files.New(h)
	sn := snapshots.New(h, fa)
	hb := hibernate.New(h)
	nr := netrules.New(h)
	pr := procs.New(h)
	setPool := func(ctx context.Context, name string, min int) error {
		_, err := w.SetPool(ctx, name, min)
		return err
	}
	tb := templates.New(h, fa, setPool)
	return &Engine{
		Engine: e, Warm: w, Snapshots: sn, Builder: tb, Reconciler: reconcile.New(h, w, sn),
		Volumes: volumes.New(h), Rules: nr, Hibernation: hb, Access: fa, Procs: pr,
	}, nil
}

// Recover starts the engine's background work, then reconciles the
// records with the host and runs the reconciler until Close.
func (m *Engine) Recover(ctx context.Context) error {
	m.Engine.Run()
	return m.Reconciler.Recover(ctx)
}

// Close stops background work (the backend's too); sandboxes keep
// running.
func (m *Engine) Close() { m.Engine.Close() }
