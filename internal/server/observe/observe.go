// Package observe serves the read-only views the web console charts: a
// sandbox's resource use now (sampled while its page is open: the daemon
// keeps no per-sandbox history) and the webhook's delivery state.
package observe

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/internal/engine"
	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/internal/sandbox"
	"github.com/berth-sh/berth/internal/server/rest"
)

// Engine is what these views read of the engine.
type Engine interface {
	Get(ctx context.Context, ref string) (*sandbox.Sandbox, error)
	ResourceUse(ctx context.Context, ref string) (engine.ResourceUse, error)
}

// WebhookSource is a configured webhook endpoint: internal/webhook's
// Deliverer (which cannot be imported here: its tests use the server).
type WebhookSource interface {
	Status(ctx context.Context) (api.Webhook, error)
}

// Handlers serves the views.
type Handlers struct {
	E Engine
	// Webhooks returns the configured endpoints (the daemon sets them
	// after the server is made).
	Webhooks func() []WebhookSource
}

// Usage serves GET /v1/sandboxes/{id}/usage: the engine's ResourceUse
// (CPU over its 200 ms window, memory, writable layer). A sandbox that is
// not running (or stopped running meanwhile) has no use to measure: its
// state and zeros, not an error, so a page sampling it while it is paused
// sees a gap, not a failure.
func (h *Handlers) Usage(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	u, err := h.E.ResourceUse(ctx, r.PathValue("id"))
	if errors.Is(err, errdefs.ErrConflict) {
		if sb, gerr := h.E.Get(ctx, r.PathValue("id")); gerr == nil && sb.State != sandbox.StateRunning {
			rest.JSON(w, http.StatusOK, api.SandboxUsage{Time: time.Now().UTC(), State: string(sb.State)})
			return
		}
	}
	if err != nil {
		rest.Error(w, err)
		return
	}
	rest.JSON(w, http.StatusOK, api.SandboxUsage{Time: u.At.UTC(), State: string(sandbox.StateRunning), CPUPercent: u.CPUPercent,
		CPUs: u.CPUs, MemoryBytes: u.MemoryBytes, MemoryLimitBytes: u.MemoryLimit, DiskBytes: u.DiskBytes, DiskLimitBytes: u.DiskLimit})
}

// WebhookList serves GET /v1/webhooks (the host's alone): each configured
// endpoint, its URL redacted, never its secret.
func (h *Handlers) WebhookList(w http.ResponseWriter, r *http.Request) {
	out := []api.Webhook{}
	var srcs []WebhookSource
	if h.Webhooks != nil {
		srcs = h.Webhooks()
	}
	for _, src := range srcs {
		st, err := src.Status(r.Context())
		if err != nil {
			rest.Error(w, err)
			return
		}
		out = append(out, st)
	}
	rest.JSON(w, http.StatusOK, out)
}
