package files

import (
	"net/http"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/internal/server/convert"
	"github.com/berth-sh/berth/internal/server/input"
	"github.com/berth-sh/berth/internal/server/rest"
)

// Export serves POST /v1/sandboxes/{id}/export.
func (h *Handlers) Export(w http.ResponseWriter, r *http.Request) {
	var req api.ExportRequest
	if err := input.Decode(r, &req); err != nil {
		rest.Error(w, err)
		return
	}
	sw := &lazyHeader{w: w}
	if err := h.E.Export(r.Context(), r.PathValue("id"), req.Paths, sw, rest.Actor(r)); err != nil {
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

// Copy serves POST /v1/copy.
func (h *Handlers) Copy(w http.ResponseWriter, r *http.Request) {
	var req api.CopyRequest
	if err := input.Decode(r, &req); err != nil {
		rest.Error(w, err)
		return
	}
	if err := h.E.Copy(r.Context(), convert.CopyRequest(&req), rest.Actor(r)); err != nil {
		rest.Error(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}
