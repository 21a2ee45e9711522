package server

import (
	"context"
	"net/http"

	"github.com/berth-sh/berth/internal/sandbox"
)

// hibernate serves the hibernate verbs: POST /v1/sandboxes/{id}/hibernate
// saves a sandbox's processes and memory to disk and stops it (reason
// "hibernated"; runtime classes that cannot checkpoint answer 409 with the
// reason); POST /v1/sandboxes/{id}/wake restores it, processes running
// where they were.
func (s *Server) hibernate(op string) http.HandlerFunc {
	fn := map[string]func(context.Context, string, string) (*sandbox.Sandbox, error){
		"hibernate": s.m.Hibernate, "wake": s.m.Wake,
	}[op]
	return func(w http.ResponseWriter, r *http.Request) {
		sb, err := fn(r.Context(), r.PathValue("id"), actor(r))
		if err != nil {
			writeError(w, err)
			return
		}
		writeJSON(w, 200, s.toAPI(sb))
	}
}
