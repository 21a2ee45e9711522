package sandboxes

import (
	"context"
	"net/http"
	"strconv"
	"time"

	"github.com/berth-sh/berth/internal/engine"
	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/internal/sandbox"
	"github.com/berth-sh/berth/internal/server/convert"
	"github.com/berth-sh/berth/internal/server/rest"
)

// Lifecycle serves POST /v1/sandboxes/{id}/{op}.
func (h *Handlers) Lifecycle(op string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		// The engine's method is picked per request, not when the route
		// table is built (the table is built before, and without, an
		// engine).
		var fn func(ctx context.Context, ref, actor string) (*sandbox.Sandbox, error)
		switch op {
		case "pause":
			fn = h.E.Pause
		case "resume":
			fn = h.E.Resume
		case "stop":
			fn = h.E.Stop
		case "start":
			fn = h.E.Start
		case "reset":
			fn = h.E.Reset
		case "quarantine":
			fn = h.E.Quarantine
		case "release":
			fn = h.E.Release
		case "touch":
			fn = h.E.Touch
		}
		if op == "stop" && r.URL.Query().Has("timeout") {
			grace, err := parseStopTimeout(r.URL.Query().Get("timeout"))
			if err != nil {
				rest.Error(w, err)
				return
			}
			fn = func(ctx context.Context, ref, actor string) (*sandbox.Sandbox, error) {
				return h.E.StopGrace(ctx, ref, actor, grace)
			}
		}
		sb, err := fn(r.Context(), r.PathValue("id"), rest.Actor(r))
		if err != nil {
			rest.Error(w, err)
			return
		}
		rest.JSON(w, 200, h.ToAPI(sb))
	}
}

// Diff serves GET /v1/sandboxes/{id}/diff.
func (h *Handlers) Diff(w http.ResponseWriter, r *http.Request) {
	entries, err := h.E.Diff(r.Context(), r.PathValue("id"))
	if err != nil {
		rest.Error(w, err)
		return
	}
	rest.JSON(w, 200, convert.Slice(entries, convert.DiffToAPI))
}

// parseStopTimeout reads stop's ?timeout=: a duration ("30s", "1m") or
// whole seconds ("30"); 0 kills at once.
func parseStopTimeout(v string) (time.Duration, error) {
	if n, err := strconv.ParseInt(v, 10, 64); err == nil {
		if n < 0 || n > int64(engine.MaxStopGrace/time.Second) {
			return 0, errdefs.Invalid("timeout must be between 0 and %s", engine.MaxStopGrace)
		}
		return time.Duration(n) * time.Second, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		return 0, errdefs.Invalid("timeout %q: want a duration (30s) or whole seconds", v)
	}
	if d < 0 || d > engine.MaxStopGrace {
		return 0, errdefs.Invalid("timeout must be between 0 and %s", engine.MaxStopGrace)
	}
	return d, nil
}
