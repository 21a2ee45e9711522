package sandboxes

import (
	"net/http"

	"github.com/berth-sh/berth/internal/server/rest"
)

// Hibernate serves the hibernate verbs: POST /v1/sandboxes/{id}/hibernate
// saves a sandbox's processes and memory to disk and stops it (reason
// "hibernated"; runtime classes that cannot checkpoint answer 409 with the
// reason); POST /v1/sandboxes/{id}/wake restores it, processes running
// where they were.
func (h *Handlers) Hibernate(op string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		// Looked up per request: the route table is built without an engine.
		fn := h.E.Wake
		if op == "hibernate" {
			fn = h.E.Hibernate
		}
		sb, err := fn(r.Context(), r.PathValue("id"), rest.Actor(r))
		if err != nil {
			rest.Error(w, err)
			return
		}
		rest.JSON(w, 200, h.ToAPI(sb))
	}
}
