package sandboxes

import (
	"net/http"
	"strconv"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/internal/server/convert"
	"github.com/berth-sh/berth/internal/server/input"
	"github.com/berth-sh/berth/internal/server/rest"
)

// GetNetwork serves GET /v1/sandboxes/{id}/network.
func (h *Handlers) GetNetwork(w http.ResponseWriter, r *http.Request) {
	nr, err := h.E.NetworkRules(r.Context(), r.PathValue("id"))
	if err != nil {
		rest.Error(w, err)
		return
	}
	rest.JSON(w, 200, convert.RulesToAPI(nr))
}

// UpdateNetwork serves POST /v1/sandboxes/{id}/network.
func (h *Handlers) UpdateNetwork(w http.ResponseWriter, r *http.Request) {
	var req api.NetworkRulesRequest
	if err := input.Decode(r, &req); err != nil {
		rest.Error(w, err)
		return
	}
	nr, err := h.E.UpdateNetworkRules(r.Context(), r.PathValue("id"), convert.RulesRequest(&req), rest.Actor(r))
	if err != nil {
		rest.Error(w, err)
		return
	}
	rest.JSON(w, 200, convert.RulesToAPI(nr))
}

// Flows serves GET /v1/sandboxes/{id}/flows.
func (h *Handlers) Flows(w http.ResponseWriter, r *http.Request) {
	var after uint64
	if v := r.URL.Query().Get("after"); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			rest.Error(w, errdefs.Invalid("after must be a flow sequence number"))
			return
		}
		after = n
	}
	fs, err := h.E.Flows(r.Context(), r.PathValue("id"), after, 10000)
	if err != nil {
		rest.Error(w, err)
		return
	}
	rest.JSON(w, 200, convert.Slice(fs, convert.FlowToAPI))
}
