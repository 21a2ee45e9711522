package server

import (
	"net/http"

	"github.com/berth-sh/berth/internal/access"
	"github.com/berth-sh/berth/internal/auth"
	"github.com/berth-sh/berth/internal/server/rest"
)

// Audited reports whether calls of rt are recorded in the audit log: when
// its operation is (internal/access: every route with a method other than
// GET, and the WebSocket exec and process attach, GETs that run a command
// or write to one). Not audited: reads, the port proxy (per-request
// records of a sandbox's own web traffic would flood the log and say
// nothing about the platform) and the catch-all 404.
func Audited(rt Route) bool { return rt.Op.Audited() }

// serveAudited runs rt's handler for the authorized caller p through the
// access layer's gate (internal/access): for an audited operation, behind
// a begin record written before the handler acts (if it cannot be written
// the call is refused: nothing happens unrecorded) and an outcome record
// with the answer's status after it. Only the operation's action, its
// {id}/{name} path value, the caller and its address are recorded, never
// a body or query (they may carry secrets). The handler decodes and
// validates its body with the request type's one Validate
// (internal/server/input), the same every door's call of the operation
// meets.
func (s *Server) serveAudited(w http.ResponseWriter, r *http.Request, rt Route, p auth.Principal) {
	if s.Audit == nil || !Audited(rt) {
		rt.h.ServeHTTP(w, r)
		return
	}
	target := r.PathValue("id")
	if target == "" {
		target = r.PathValue("name")
	}
	gate := access.Gate{Audit: s.Audit, Log: s.logger()}
	rec, err := gate.Begin(r.Context(), access.Call{P: p, Op: rt.Op, Sandbox: r.PathValue("id"), Target: target,
		Source: r.RemoteAddr, RequestID: rest.RequestID(w)}, nil)
	if err != nil {
		rest.Error(w, err)
		return
	}
	finished := false
	defer func() {
		switch {
		case !finished:
			rec.Complete("error: handler aborted")
		default:
			rec.Status(rest.StatusOf(w))
		}
	}()
	rt.h.ServeHTTP(w, r)
	finished = true
}
