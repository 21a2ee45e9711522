package server

import (
	"net/http"
	"strings"

	"github.com/berth-sh/berth/internal/auth"
	"github.com/berth-sh/berth/internal/sandbox"
	"github.com/berth-sh/berth/internal/server/forward"
	"github.com/berth-sh/berth/internal/server/rest"
)

// Forwarder carries requests to other daemons (internal/server/forward).
type Forwarder = forward.Forwarder

// localRoutes are answered by any daemon from the shared store: the
// record and its events need nothing of the node.
var localRoutes = map[string]bool{
	"GET /v1/sandboxes/{id}":        true,
	"GET /v1/sandboxes/{id}/events": true,
}

// PeerHandler is the handler of the peer listener: the API, for requests
// other daemons forward (forward.PeerHandler).
func (s *Server) PeerHandler() http.Handler { return forward.PeerHandler(s.Handler(false)) }

// maybeForward forwards r when it names a sandbox another daemon of the
// shared store runs and that daemon can authenticate its credential (an
// API key, a lease or a port token, from the shared store; not this
// daemon's unix socket, whose callers are told the node: 409); it
// reports whether it did, and so answered.
func (s *Server) maybeForward(w http.ResponseWriter, r *http.Request, rt Route, p auth.Principal) bool {
	if s.Forward == nil || localRoutes[rt.Pattern] || !strings.Contains(rt.Pattern, " /v1/sandboxes/{id}") {
		return false
	}
	if forward.FromPeer(r.Context()) || rest.Trusted(r.Context()) || p.Actor == auth.Anonymous.Actor || s.m == nil {
		return false
	}
	sb, err := s.m.Get(rest.WithCaller(r.Context(), p), r.PathValue("id"))
	if err != nil || sb.Node == "" || sb.Node == s.m.Config().Node || sb.State == sandbox.StateDeleted {
		return false // served here: its own answer (404, the local sandbox)
	}
	s.Forward.Serve(w, r, sb.ID, sb.Node)
	return true
}
