// Package enginetest assembles the engine for tests: the core with every
// feature over the store and node backend a test gives it (the engine's
// unit tests: SQLite in a temp dir and internal/node/memnode; the server's
// and the Kubernetes suite's: theirs). It wires the features exactly as
// the daemon does (internal/daemon, engine.go): each gets the core's
// Host and registers its hooks as it is made. The engine's own unit
// tests, over the whole of it, live here too.
package enginetest

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

// Engine is the engine's core with its features, as the daemon
// assembles them: a test drives it as the doors do.
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

// New makes the core over backend and gives each feature its Host, in
// the daemon's order. Call Recover to reconcile and run background work,
// Close to stop it.
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
