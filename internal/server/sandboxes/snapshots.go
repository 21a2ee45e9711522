package sandboxes

import (
	"net/http"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/internal/server/convert"
	"github.com/berth-sh/berth/internal/server/idempotency"
	"github.com/berth-sh/berth/internal/server/input"
	"github.com/berth-sh/berth/internal/server/rest"
	"github.com/berth-sh/berth/internal/store"
)

// Fork serves POST /v1/sandboxes/{id}/fork.
func (h *Handlers) Fork(w http.ResponseWriter, r *http.Request) {
	var req api.ForkRequest
	if err := input.Decode(r, &req); err != nil {
		rest.Error(w, err)
		return
	}
	kids, frozen, err := h.E.Fork(r.Context(), r.PathValue("id"), convert.ForkRequest(&req), rest.Actor(r), idempotency.IDs(r)...)
	if err != nil && len(kids) == 0 {
		rest.Error(w, err)
		return
	}
	resp := api.ForkResponse{Children: []api.Sandbox{}, FreezeMS: float64(frozen.Microseconds()) / 1000}
	for _, k := range kids {
		resp.Children = append(resp.Children, h.ToAPI(k))
	}
	if err != nil { // some children failed: report them, keep the rest
		for _, k := range kids {
			h.E.Delete(r.Context(), k.ID, rest.Actor(r), "user", "fork partly failed")
		}
		rest.Error(w, err)
		return
	}
	rest.JSON(w, http.StatusCreated, resp)
}

func SnapshotToAPI(sn *store.Snapshot) api.Snapshot {
	out := api.Snapshot{ID: sn.ID, Name: sn.Name, SandboxID: sn.SandboxID, Template: sn.Template,
		SizeBytes: sn.SizeBytes, Parent: sn.Parent, CreatedAt: sn.CreatedAt}
	out.ExpiresAt = convert.TimePtr(sn.ExpiresAt)
	return out
}

// CreateSnapshot serves POST /v1/sandboxes/{id}/snapshots.
func (h *Handlers) CreateSnapshot(w http.ResponseWriter, r *http.Request) {
	var req api.CreateSnapshotRequest
	if err := input.Decode(r, &req); err != nil {
		rest.Error(w, err)
		return
	}
	sn, err := h.E.CreateSnapshot(r.Context(), r.PathValue("id"), convert.SnapshotRequest(&req), rest.Actor(r), idempotency.IDs(r)...)
	if err != nil {
		rest.Error(w, err)
		return
	}
	rest.JSON(w, http.StatusCreated, SnapshotToAPI(sn))
}

// ListSnapshots serves GET /v1/sandboxes/{id}/snapshots and GET /v1/snapshots.
func (h *Handlers) ListSnapshots(w http.ResponseWriter, r *http.Request) {
	p, err := rest.PageOf(r)
	if err != nil {
		rest.Error(w, err)
		return
	}
	sns, next, err := h.E.ListSnapshots(r.Context(), r.PathValue("id"), p)
	if err != nil {
		rest.Error(w, err)
		return
	}
	rest.SetNext(w, next)
	out := make([]api.Snapshot, 0, len(sns))
	for _, sn := range sns {
		out = append(out, SnapshotToAPI(sn))
	}
	rest.JSON(w, 200, out)
}

// GetSnapshot serves GET /v1/snapshots/{id}.
func (h *Handlers) GetSnapshot(w http.ResponseWriter, r *http.Request) {
	sn, err := h.E.GetSnapshot(r.Context(), r.PathValue("id"))
	if err != nil {
		rest.Error(w, err)
		return
	}
	rest.JSON(w, 200, SnapshotToAPI(sn))
}

// DeleteSnapshot serves DELETE /v1/snapshots/{id}.
func (h *Handlers) DeleteSnapshot(w http.ResponseWriter, r *http.Request) {
	if err := h.E.DeleteSnapshot(r.Context(), r.PathValue("id")); err != nil {
		rest.Error(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// RestoreSnapshot serves POST /v1/snapshots/{id}/restore.
func (h *Handlers) RestoreSnapshot(w http.ResponseWriter, r *http.Request) {
	sb, err := h.E.RestoreSnapshot(r.Context(), r.PathValue("id"), rest.Actor(r))
	if err != nil {
		rest.Error(w, err)
		return
	}
	rest.JSON(w, 200, h.ToAPI(sb))
}
