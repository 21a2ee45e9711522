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
	// The manager's method is looked up per request, not when the route
	// table is built (the table is built before, and without, a manager).
	fns := map[string]func(*Handlers) func(context.Context, string, string) (*sandbox.Sandbox, error){
		"pause":  func(h *Handlers) func(context.Context, string, string) (*sandbox.Sandbox, error) { return h.E.Pause },
		"resume": func(h *Handlers) func(context.Context, string, string) (*sandbox.Sandbox, error) { return h.E.Resume },
		"stop":   func(h *Handlers) func(context.Context, string, string) (*sandbox.Sandbox, error) { return h.E.Stop },
		"start":  func(h *Handlers) func(context.Context, string, string) (*sandbox.Sandbox, error) { return h.E.Start },
		"reset":  func(h *Handlers) func(context.Context, string, string) (*sandbox.Sandbox, error) { return h.E.Reset },
		"quarantine": func(h *Handlers) func(context.Context, string, string) (*sandbox.Sandbox, error) {
			return h.E.Quarantine
		},
		"release": func(h *Handlers) func(context.Context, string, string) (*sandbox.Sandbox, error) { return h.E.Release },
		"touch":   func(h *Handlers) func(context.Context, string, string) (*sandbox.Sandbox, error) { return h.E.Touch },
	}
	pick := fns[op]
	return func(w http.ResponseWriter, r *http.Request) {
		fn := pick(h)
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
