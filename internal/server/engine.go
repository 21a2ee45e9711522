package server

import (
	"context"
	"net"

	"github.com/berth-sh/berth/internal/engine"
	"github.com/berth-sh/berth/internal/engine/reconcile"
	"github.com/berth-sh/berth/internal/node"
	"github.com/berth-sh/berth/internal/sandbox"
	"github.com/berth-sh/berth/internal/server/admin"
	"github.com/berth-sh/berth/internal/server/events"
	"github.com/berth-sh/berth/internal/server/exec"
	"github.com/berth-sh/berth/internal/server/files"
	"github.com/berth-sh/berth/internal/server/observe"
	"github.com/berth-sh/berth/internal/server/sandboxes"
	"github.com/berth-sh/berth/internal/server/templates"
)

// Engine is what the API server drives: what each route package declares
// it consumes (sandboxes.Engine, exec.Engine, ...), and what the server's
// own routes and guard read. The daemon assembles it from the engine's
// core and its features.
type Engine interface {
	events.Engine
	admin.Engine
	templates.Engine
	sandboxes.Engine
	files.Engine
	exec.Engine
	observe.Engine

	Config() engine.Config
	Node() string
	RuntimeNames() []string
	Classes() []node.Class
	AgentRefusals() uint64
	DialPort(ctx context.Context, ref string, port int) (net.Conn, *sandbox.Sandbox, error)
	Doctor(ctx context.Context, fix bool) (*reconcile.Report, error)
}
