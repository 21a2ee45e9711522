package server

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/internal/sandbox"
	"github.com/berth-sh/berth/internal/server/rest"
)

// Read-only views the web console charts: a sandbox's resource use now
// (sampled while its page is open: the daemon keeps no per-sandbox
// history) and the webhook's delivery state.

// WebhookSource is a configured webhook endpoint: internal/webhook's
// Deliverer (which cannot be imported here: its tests use this package).
type WebhookSource interface {
	Status(ctx context.Context) (api.Webhook, error)
}

// sandboxUsage serves GET /v1/sandboxes/{id}/usage: the engine's
// ResourceUse (CPU over its 200 ms window, memory, writable layer). A
// sandbox that is not running (or stopped running meanwhile) has no use
// to measure: its state and zeros, not an error, so a page sampling it
// while it is paused sees a gap, not a failure.
func (s *Server) sandboxUsage(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	u, err := s.m.ResourceUse(ctx, r.PathValue("id"))
	if errors.Is(err, errdefs.ErrConflict) {
		if sb, gerr := s.m.Get(ctx, r.PathValue("id")); gerr == nil && sb.State != sandbox.StateRunning {
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

// webhooks serves GET /v1/webhooks (the host's alone): each configured
// endpoint, its URL redacted, never its secret.
func (s *Server) webhooks(w http.ResponseWriter, r *http.Request) {
	out := []api.Webhook{}
	for _, src := range s.Webhooks {
		st, err := src.Status(r.Context())
		if err != nil {
			rest.Error(w, err)
			return
		}
		out = append(out, st)
	}
	rest.JSON(w, http.StatusOK, out)
}
