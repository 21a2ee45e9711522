// Package manager assembles berth's engine: the core (package engine:
// records, states, lifecycle operations, exec and files, policies'
// inputs) and the feature packages over it — warm pools, snapshots and
// fork, templates and apply, named volumes, network rules, hibernation,
// the reconciler with doctor — into the one
// Manager the API server and the daemon use. It holds no logic of its
// own: every method is the core's or a feature's.
package manager

import (
	"context"
	"log/slog"

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

// Manager is the engine with its features.
type Manager struct {
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

// The engine's types and constants, as the API server names them.
type (
	Config        = engine.Config
	CreateOptions = engine.CreateOptions
	ExecIO        = engine.ExecIO
	Files         = files.Files
	WatchEvent    = files.WatchEvent

	CreateRequest   = engine.CreateRequest
	VolumeRequest   = engine.VolumeRequest
	ExecRequest     = engine.ExecRequest
	Exit            = engine.Exit
	Resize          = engine.Resize
	TermInput       = engine.TermInput
	FileInfo        = engine.FileInfo
	DiffEntry       = engine.DiffEntry
	Isolation       = engine.Isolation
	Disk            = engine.Disk
	ForkRequest     = snapshots.ForkRequest
	SnapshotRequest = snapshots.SnapshotRequest
	CopyRequest     = snapshots.CopyRequest
	VolumeCreate    = volumes.CreateRequest
	RulesRequest    = netrules.Request
	NetworkRules    = netrules.NetworkRules
	Flow            = netrules.Flow
	Pool            = pools.Pool
	ImportRequest   = templates.ImportRequest
	PushRequest     = templates.PushRequest
	RequestAuth     = image.RequestAuth
	Pushed          = templates.Pushed
	ServiceRequest  = templates.ServiceRequest
	BuildRequest    = templates.BuildRequest
	ApplyRequest    = templates.ApplyRequest
	// DockerfileRequest and BuildNetwork are a Dockerfile build's.
	DockerfileRequest = templates.DockerfileRequest
	BuildNetwork      = templates.BuildNetwork
	BuildEvent        = templates.Event
	ImportProgress    = templates.ImportProgress
	DoctorReport      = reconcile.Report
	DoctorFinding     = reconcile.Finding
	Process           = procs.Process
	StartRequest      = procs.StartRequest
	AttachIO          = procs.AttachIO
	// Ownership says who owns what a file write creates.
	Ownership = files.Ownership
)

// RuntimeClass is a runtime class and what it can do (node.Caps).
type RuntimeClass = node.Class

// WithImportProgress returns a context under which template imports and
// uploads report their progress to fn.
var WithImportProgress = templates.WithImportProgress

// NewTermInput returns an empty terminal input (engine.TermInput).
var NewTermInput = engine.NewTermInput

const (
	DefaultDiskBytes = engine.DefaultDiskBytes
	BuiltinTemplate  = templates.BuiltinTemplate
	MaxForkCount     = snapshots.MaxForkCount
	// MaxConcurrentUploads is how many template archives are received at once.
	MaxConcurrentUploads = templates.MaxConcurrentUploads
	ReasonHibernated     = engine.ReasonHibernated
	// DefaultRecordRetention is how long tombstones and their records are kept.
	DefaultRecordRetention = engine.DefaultRecordRetention
)

// NewID returns a new random sandbox or snapshot id.
func NewID() string { return engine.NewID() }

// New assembles a Manager over backend. Call Recover to reconcile and run
// background work, Close to stop it.
func New(cfg Config, st store.Store, images *image.Store, backend node.Backend) (*Manager, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	e, err := engine.New(cfg, st, images, backend)
	if err != nil {
		return nil, err
	}
	// Each feature registers its hooks as it is made: netrules before
	// templates, so the flow log records a flow before a build sees it.
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
	return &Manager{
		Engine:      e,
		Warm:        w,
		Snapshots:   sn,
		Builder:     tb,
		Reconciler:  reconcile.New(h, w, sn),
		Volumes:     volumes.New(h),
		Rules:       nr,
		Hibernation: hb,
		Access:      fa,
		Procs:       pr,
	}, nil
}

// Recover starts the engine's background work, then reconciles the
// records with the host and runs the reconciler until Close.
func (m *Manager) Recover(ctx context.Context) error {
	m.Engine.Run()
	return m.Reconciler.Recover(ctx)
}

// Close stops background work; sandboxes keep running.
func (m *Manager) Close() { m.Engine.Close() }

// SpecFromRequest validates a create request against a template's
// defaults and returns the sandbox spec.
var SpecFromRequest = engine.SpecFromRequest
