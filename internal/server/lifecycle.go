package server

import (
	"context"
	"net/http"
	"strconv"
	"time"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/internal/engine"
	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/internal/sandbox"
	"github.com/berth-sh/berth/internal/server/convert"
	"github.com/berth-sh/berth/internal/server/input"
	"github.com/berth-sh/berth/internal/server/rest"
	"github.com/berth-sh/berth/internal/store"
)

// lifecycle serves POST /v1/sandboxes/{id}/{op}.
func (s *Server) lifecycle(op string) http.HandlerFunc {
	// The manager's method is looked up per request, not when the route
	// table is built (the table is built before, and without, a manager).
	fns := map[string]func(*Server) func(context.Context, string, string) (*sandbox.Sandbox, error){
		"pause":      func(s *Server) func(context.Context, string, string) (*sandbox.Sandbox, error) { return s.m.Pause },
		"resume":     func(s *Server) func(context.Context, string, string) (*sandbox.Sandbox, error) { return s.m.Resume },
		"stop":       func(s *Server) func(context.Context, string, string) (*sandbox.Sandbox, error) { return s.m.Stop },
		"start":      func(s *Server) func(context.Context, string, string) (*sandbox.Sandbox, error) { return s.m.Start },
		"reset":      func(s *Server) func(context.Context, string, string) (*sandbox.Sandbox, error) { return s.m.Reset },
		"quarantine": func(s *Server) func(context.Context, string, string) (*sandbox.Sandbox, error) { return s.m.Quarantine },
		"release":    func(s *Server) func(context.Context, string, string) (*sandbox.Sandbox, error) { return s.m.Release },
		"touch":      func(s *Server) func(context.Context, string, string) (*sandbox.Sandbox, error) { return s.m.Touch },
	}
	pick := fns[op]
	return func(w http.ResponseWriter, r *http.Request) {
		fn := pick(s)
		if op == "stop" && r.URL.Query().Has("timeout") {
			grace, err := parseStopTimeout(r.URL.Query().Get("timeout"))
			if err != nil {
				rest.Error(w, err)
				return
			}
			fn = func(ctx context.Context, ref, actor string) (*sandbox.Sandbox, error) {
				return s.m.StopGrace(ctx, ref, actor, grace)
			}
		}
		sb, err := fn(r.Context(), r.PathValue("id"), rest.Actor(r))
		if err != nil {
			rest.Error(w, err)
			return
		}
		rest.JSON(w, 200, s.toAPI(sb))
	}
}

func (s *Server) diff(w http.ResponseWriter, r *http.Request) {
	entries, err := s.m.Diff(r.Context(), r.PathValue("id"))
	if err != nil {
		rest.Error(w, err)
		return
	}
	rest.JSON(w, 200, convert.Slice(entries, convert.DiffToAPI))
}

func (s *Server) volumeToAPI(v *store.Volume) api.Volume {
	u := s.m.VolumeUsage(v)
	return api.Volume{ID: v.ID, Name: v.Name, State: v.State, SizeBytes: v.SizeBytes, Inodes: v.Inodes,
		UsedBytes: u.UsedBytes, UsedInodes: u.UsedInodes, AttachedTo: v.SandboxID, Keep: v.Keep, CreatedAt: v.CreatedAt,
		ReadOnly: u.ReadOnly}
}

func (s *Server) createVolume(w http.ResponseWriter, r *http.Request) {
	var req api.CreateVolumeRequest
	if err := input.Decode(r, &req); err != nil {
		rest.Error(w, err)
		return
	}
	v, err := s.m.CreateVolume(r.Context(), convert.VolumeRequest(&req), rest.Tenant(r))
	if err != nil {
		rest.Error(w, err)
		return
	}
	rest.JSON(w, http.StatusCreated, s.volumeToAPI(v))
}

func (s *Server) listVolumes(w http.ResponseWriter, r *http.Request) {
	p, err := rest.PageOf(r)
	if err != nil {
		rest.Error(w, err)
		return
	}
	vs, next, err := s.m.ListVolumes(r.Context(), r.URL.Query().Get("all") == "true", p)
	if err != nil {
		rest.Error(w, err)
		return
	}
	rest.SetNext(w, next)
	out := make([]api.Volume, 0, len(vs))
	for _, v := range vs {
		out = append(out, s.volumeToAPI(v))
	}
	rest.JSON(w, 200, out)
}

func (s *Server) getVolume(w http.ResponseWriter, r *http.Request) {
	v, err := s.m.GetVolume(r.Context(), r.PathValue("name"))
	if err != nil {
		rest.Error(w, err)
		return
	}
	rest.JSON(w, 200, s.volumeToAPI(v))
}

func (s *Server) deleteVolume(w http.ResponseWriter, r *http.Request) {
	if err := s.m.DeleteVolume(r.Context(), r.PathValue("name")); err != nil {
		rest.Error(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
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
