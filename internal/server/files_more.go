package server

import (
	"net/http"

	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/internal/sandbox"
)

// moveFile renames path to to inside the sandbox by rename(2)'s rules;
// no_replace=true makes an existing destination a 409.
func (s *Server) moveFile(w http.ResponseWriter, r *http.Request) {
	path, err := pathParam(r)
	if err != nil {
		writeError(w, err)
		return
	}
	to := r.URL.Query().Get("to")
	switch {
	case to == "":
		writeError(w, errdefs.Invalid("to query parameter is required"))
		return
	case len(to) > maxPathLen:
		writeError(w, errdefs.Invalid("to longer than %d bytes", maxPathLen))
		return
	}
	if err := sandbox.CheckText("to", to); err != nil {
		writeError(w, err)
		return
	}
	noReplace, err := boolParam(r, "no_replace")
	if err != nil {
		writeError(w, err)
		return
	}
	f, err := s.m.Files(r.Context(), r.PathValue("id"), true, actor(r))
	if err != nil {
		writeError(w, err)
		return
	}
	defer f.Close()
	if err := f.Move(r.Context(), path, to, noReplace, actor(r)); err != nil {
		writeError(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}
