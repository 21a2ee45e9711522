package server

import (
	"net/http"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/internal/server/convert"
	"github.com/berth-sh/berth/internal/server/idempotency"
	"github.com/berth-sh/berth/internal/server/input"
	"github.com/berth-sh/berth/internal/server/rest"
	"github.com/berth-sh/berth/internal/store"
)

func (s *Server) fork(w http.ResponseWriter, r *http.Request) {
	var req api.ForkRequest
	if err := input.Decode(r, &req); err != nil {
		rest.Error(w, err)
		return
	}
	kids, frozen, err := s.m.Fork(r.Context(), r.PathValue("id"), convert.ForkRequest(&req), rest.Actor(r), idempotency.IDs(r)...)
	if err != nil && len(kids) == 0 {
		rest.Error(w, err)
		return
	}
	resp := api.ForkResponse{Children: []api.Sandbox{}, FreezeMS: float64(frozen.Microseconds()) / 1000}
	for _, k := range kids {
		resp.Children = append(resp.Children, s.toAPI(k))
	}
	if err != nil { // some children failed: report them, keep the rest
		for _, k := range kids {
			s.m.Delete(r.Context(), k.ID, rest.Actor(r), "user", "fork partly failed")
		}
		rest.Error(w, err)
		return
	}
	rest.JSON(w, http.StatusCreated, resp)
}

func snapshotToAPI(sn *store.Snapshot) api.Snapshot {
	out := api.Snapshot{ID: sn.ID, Name: sn.Name, SandboxID: sn.SandboxID, Template: sn.Template,
		SizeBytes: sn.SizeBytes, Parent: sn.Parent, CreatedAt: sn.CreatedAt}
	out.ExpiresAt = convert.TimePtr(sn.ExpiresAt)
	return out
}

func (s *Server) createSnapshot(w http.ResponseWriter, r *http.Request) {
	var req api.CreateSnapshotRequest
	if err := input.Decode(r, &req); err != nil {
		rest.Error(w, err)
		return
	}
	sn, err := s.m.CreateSnapshot(r.Context(), r.PathValue("id"), convert.SnapshotRequest(&req), rest.Actor(r), idempotency.IDs(r)...)
	if err != nil {
		rest.Error(w, err)
		return
	}
	rest.JSON(w, http.StatusCreated, snapshotToAPI(sn))
}

func (s *Server) listSnapshots(w http.ResponseWriter, r *http.Request) {
	p, err := rest.PageOf(r)
	if err != nil {
		rest.Error(w, err)
		return
	}
	sns, next, err := s.m.ListSnapshots(r.Context(), r.PathValue("id"), p)
	if err != nil {
		rest.Error(w, err)
		return
	}
	rest.SetNext(w, next)
	out := make([]api.Snapshot, 0, len(sns))
	for _, sn := range sns {
		out = append(out, snapshotToAPI(sn))
	}
	rest.JSON(w, 200, out)
}

func (s *Server) getSnapshot(w http.ResponseWriter, r *http.Request) {
	sn, err := s.m.GetSnapshot(r.Context(), r.PathValue("id"))
	if err != nil {
		rest.Error(w, err)
		return
	}
	rest.JSON(w, 200, snapshotToAPI(sn))
}

func (s *Server) deleteSnapshot(w http.ResponseWriter, r *http.Request) {
	if err := s.m.DeleteSnapshot(r.Context(), r.PathValue("id")); err != nil {
		rest.Error(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) restoreSnapshot(w http.ResponseWriter, r *http.Request) {
	sb, err := s.m.RestoreSnapshot(r.Context(), r.PathValue("id"), rest.Actor(r))
	if err != nil {
		rest.Error(w, err)
		return
	}
	rest.JSON(w, 200, s.toAPI(sb))
}

func (s *Server) export(w http.ResponseWriter, r *http.Request) {
	var req api.ExportRequest
	if err := input.Decode(r, &req); err != nil {
		rest.Error(w, err)
		return
	}
	sw := &lazyHeader{w: w}
	if err := s.m.Export(r.Context(), r.PathValue("id"), req.Paths, sw, rest.Actor(r)); err != nil {
		if !sw.started {
			rest.Error(w, err)
			return
		}
		panic(http.ErrAbortHandler)
	}
	if !sw.started {
		w.Header().Set("Content-Type", "application/x-tar")
		w.WriteHeader(200)
	}
}

// lazyHeader sets the tar content type on the first write, so an error
// found before any data can still be answered with a status.
type lazyHeader struct {
	w       http.ResponseWriter
	started bool
}

func (l *lazyHeader) Write(p []byte) (int, error) {
	if !l.started {
		l.started = true
		l.w.Header().Set("Content-Type", "application/x-tar")
	}
	return l.w.Write(p)
}

func (s *Server) copy(w http.ResponseWriter, r *http.Request) {
	var req api.CopyRequest
	if err := input.Decode(r, &req); err != nil {
		rest.Error(w, err)
		return
	}
	if err := s.m.Copy(r.Context(), convert.CopyRequest(&req), rest.Actor(r)); err != nil {
		rest.Error(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}
