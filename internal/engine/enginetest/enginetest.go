// Package enginetest is the engine's test harness: New assembles the
// engine as the daemon does (internal/engine/assemble) over the store and
// node backend a test gives it (the server's and the Kubernetes suite's
// tests), and Env (env.go) runs it over SQLite in a temp dir and
// internal/node/memnode for the engine's unit tests, which live beside
// the packages they exercise as external test packages (engine_test,
// pools_test, procs_test, templates_test: this package imports every
// feature).
package enginetest

import (
	"github.com/berth-sh/berth/internal/engine"
	"github.com/berth-sh/berth/internal/engine/assemble"
	"github.com/berth-sh/berth/internal/image"
	"github.com/berth-sh/berth/internal/node"
	"github.com/berth-sh/berth/internal/store"
)

// Engine is the engine's core with its features, as the daemon
// assembles them: a test drives it as the doors do.
type Engine = assemble.Engine

// New makes the engine over backend, as the daemon does. Call Recover
// to reconcile and run background work, Close to stop it.
func New(cfg engine.Config, st store.Store, images *image.Store, backend node.Backend) (*Engine, error) {
	return assemble.New(cfg, st, images, backend)
}
