package server

import (
	"net/http"
	"strconv"
	"strings"

	"github.com/berth-sh/berth/internal/audit"
	"github.com/berth-sh/berth/internal/auth"
	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/internal/server/rest"
)

// Audited reports whether calls of rt are recorded in the audit log: every
// route with a method other than GET, and the WebSocket exec and process
// attach (GETs that run a command or write to one). Not audited: reads, and the port proxy (no method in
// its pattern; per-request records of a sandbox's own web traffic would
// flood the log and say nothing about the platform) and the catch-all 404.
func Audited(rt Route) bool {
	method, _, ok := strings.Cut(rt.Pattern, " ")
	if !ok {
		return false
	}
	return method != http.MethodGet || rt.Pattern == "GET /v1/sandboxes/{id}/exec/ws" ||
		rt.Pattern == "GET /v1/sandboxes/{id}/processes/{pid}/ws"
}

// serveAudited runs rt's handler for the authorized caller p: for an
// audited route, behind a begin record written before the handler acts
// (if it cannot be written the call is refused: nothing happens unrecorded)
// and an outcome record with the answer's status after it. Only the route,
// its {id}/{name} path value, the caller and its address are recorded,
// never a body or query (they may carry secrets).
func (s *Server) serveAudited(w http.ResponseWriter, r *http.Request, rt Route, p auth.Principal) {
	if s.Audit == nil || !Audited(rt) {
		rt.h.ServeHTTP(w, r)
		return
	}
	target := r.PathValue("id")
	if target == "" {
		target = r.PathValue("name")
	}
	e := audit.Entry{Tenant: p.Tenant, Actor: p.Actor, Action: rt.Pattern, Target: target, Source: r.RemoteAddr}
	e.RequestID = rest.RequestID(w)
	op, err := s.Audit.Begin(r.Context(), e)
	if err != nil {
		s.logger().Error("audit: refusing a call that cannot be recorded", "route", rt.Pattern, "err", err)
		rest.Error(w, errdefs.Unavailable("the audit log cannot be written; nothing was done"))
		return
	}
	finished := false
	defer func() {
		switch {
		case !finished:
			op.Complete("error: handler aborted")
		default:
			op.Complete(statusResult(w))
		}
	}()
	rt.h.ServeHTTP(w, r)
	finished = true
}

// statusResult is the outcome of an answered call: "ok 201", "error 404".
func statusResult(w http.ResponseWriter) string {
	status := rest.StatusOf(w)
	if status == 0 {
		return "unknown"
	}
	if status < 400 {
		return "ok " + strconv.Itoa(status)
	}
	return "error " + strconv.Itoa(status)
}
