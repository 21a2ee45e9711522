package sandboxes

import (
	"net/http"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/internal/server/convert"
	"github.com/berth-sh/berth/internal/server/input"
	"github.com/berth-sh/berth/internal/server/rest"
	"github.com/berth-sh/berth/internal/store"
)

// VolumeToAPI is v as the API shows it, with its usage.
func (h *Handlers) VolumeToAPI(v *store.Volume) api.Volume {
	u := h.E.VolumeUsage(v)
	return api.Volume{ID: v.ID, Name: v.Name, State: v.State, SizeBytes: v.SizeBytes, Inodes: v.Inodes,
		UsedBytes: u.UsedBytes, UsedInodes: u.UsedInodes, AttachedTo: v.SandboxID, Keep: v.Keep, CreatedAt: v.CreatedAt,
		ReadOnly: u.ReadOnly}
}

// CreateVolume serves POST /v1/volumes.
func (h *Handlers) CreateVolume(w http.ResponseWriter, r *http.Request) {
	var req api.CreateVolumeRequest
	if err := input.Decode(r, &req); err != nil {
		rest.Error(w, err)
		return
	}
	v, err := h.E.CreateVolume(r.Context(), convert.VolumeRequest(&req), rest.Tenant(r))
	if err != nil {
		rest.Error(w, err)
		return
	}
	rest.JSON(w, http.StatusCreated, h.VolumeToAPI(v))
}

// ListVolumes serves GET /v1/volumes.
func (h *Handlers) ListVolumes(w http.ResponseWriter, r *http.Request) {
	p, err := rest.PageOf(r)
	if err != nil {
		rest.Error(w, err)
		return
	}
	vs, next, err := h.E.ListVolumes(r.Context(), r.URL.Query().Get("all") == "true", p)
	if err != nil {
		rest.Error(w, err)
		return
	}
	rest.SetNext(w, next)
	out := make([]api.Volume, 0, len(vs))
	for _, v := range vs {
		out = append(out, h.VolumeToAPI(v))
	}
	rest.JSON(w, 200, out)
}

// GetVolume serves GET /v1/volumes/{name}.
func (h *Handlers) GetVolume(w http.ResponseWriter, r *http.Request) {
	v, err := h.E.GetVolume(r.Context(), r.PathValue("name"))
	if err != nil {
		rest.Error(w, err)
		return
	}
	rest.JSON(w, 200, h.VolumeToAPI(v))
}

// DeleteVolume serves DELETE /v1/volumes/{name}.
func (h *Handlers) DeleteVolume(w http.ResponseWriter, r *http.Request) {
	if err := h.E.DeleteVolume(r.Context(), r.PathValue("name")); err != nil {
		rest.Error(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}
