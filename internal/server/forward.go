package server

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httputil"
	"strings"
	"sync"
	"time"

	"github.com/berth-sh/berth/internal/auth"
	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/internal/peer"
	"github.com/berth-sh/berth/internal/sandbox"
	"github.com/berth-sh/berth/internal/server/rest"
)

// Headers a forwarding daemon sets; a peer listener trusts them, no other
// listener reads them.
const (
	forwardedForHeader = "Berth-Forwarded-For" // the client's address, for audit
	forwardedByHeader  = "Berth-Forwarded-By"  // the forwarding daemon's node
)

// Forwarder sends a request about a sandbox that another daemon of the
// shared store runs to that daemon's peer listener (internal/peer), so
// that any daemon answers any request: the request goes as it came, its
// credential included, and the owner authenticates and authorizes it
// again itself (the store, and so the keys, are shared). Only
// credentials the owner can check are forwarded: API keys, leases and
// port tokens; a caller of this daemon's unix socket, authenticated by
// its uid here, is told which node runs the sandbox (409), as before.
type Forwarder struct {
	Identity *peer.Identity
	// Addr returns the peer address of a node (the store's peers).
	Addr func(ctx context.Context, node string) (string, error)
	Log  func() interface{ Warn(string, ...any) }

	mu         sync.Mutex
	transports map[string]*http.Transport // by node and address
}

// localRoutes are answered by any daemon from the shared store: the
// record and its events need nothing of the node.
var localRoutes = map[string]bool{
	"GET /v1/sandboxes/{id}":        true,
	"GET /v1/sandboxes/{id}/events": true,
}

// forwarded reports whether a request came through a peer listener: it
// is never forwarded again.
type forwardedKey struct{}

// PeerHandler is the handler of the peer listener: the API, for requests
// whose TLS client leaf names a node of the peer CA (the listener's TLS
// config requires one), with the forwarded client address as the
// request's remote address.
func (s *Server) PeerHandler() http.Handler {
	h := s.Handler(false)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		node, ok := peer.ClientNode(r.TLS)
		if !ok {
			rest.Error(w, errdefs.Unauthenticated("peer listener: no verified peer certificate"))
			return
		}
		r = r.WithContext(context.WithValue(r.Context(), forwardedKey{}, node))
		if a := r.Header.Get(forwardedForHeader); a != "" {
			if _, _, err := net.SplitHostPort(a); err == nil {
				r.RemoteAddr = a
			}
		}
		r.Header.Del(forwardedForHeader)
		r.Header.Del(forwardedByHeader)
		h.ServeHTTP(w, r)
	})
}

// maybeForward forwards r when it names a sandbox of another node and the
// owner can authenticate its credential; it reports whether it did (and
// so answered).
func (s *Server) maybeForward(w http.ResponseWriter, r *http.Request, rt Route, p auth.Principal) bool {
	f := s.Forward
	if f == nil || localRoutes[rt.Pattern] || !strings.Contains(rt.Pattern, " /v1/sandboxes/{id}") {
		return false
	}
	if r.Context().Value(forwardedKey{}) != nil || rest.Trusted(r.Context()) || p.Actor == auth.Anonymous.Actor {
		return false
	}
	id := r.PathValue("id")
	if id == "" || s.m == nil {
		return false
	}
	sb, err := s.m.Get(rest.WithCaller(r.Context(), p), id)
	if err != nil || sb.Node == "" || sb.Node == s.m.Config().Node || sb.State == sandbox.StateDeleted {
		return false // served here: its own answer (404, the local sandbox)
	}
	addr, err := f.Addr(r.Context(), sb.Node)
	if err != nil {
		if errors.Is(err, errdefs.ErrNotFound) {
			rest.Error(w, errdefs.Unavailable("sandbox %s runs on node %s, which has no peer listener (serve --peer-listen)", sb.ID, sb.Node))
		} else {
			rest.Error(w, err)
		}
		return true
	}
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.Out.URL.Scheme = "https"
			pr.Out.URL.Host = addr
			pr.Out.Host = peer.ServerName
			pr.Out.Header.Del(forwardedForHeader)
			pr.Out.Header.Set(forwardedForHeader, pr.In.RemoteAddr)
			pr.Out.Header.Set(forwardedByHeader, s.m.Config().Node)
		},
		Transport:     f.transport(sb.Node, addr),
		FlushInterval: -1, // streams (exec, logs, events) as they come
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			if f.Log != nil {
				f.Log().Warn("forwarding to the owning daemon", "node", sb.Node, "addr", addr, "err", err)
			}
			rest.Error(w, errdefs.Unavailable("sandbox %s runs on node %s, which could not be reached: %v", sb.ID, sb.Node, err))
		},
	}
	rp.ServeHTTP(w, r)
	return true
}

// transport is the pooled mutual-TLS transport to node at addr.
func (f *Forwarder) transport(node, addr string) *http.Transport {
	f.mu.Lock()
	defer f.mu.Unlock()
	key := node + "\x00" + addr
	if t, ok := f.transports[key]; ok {
		return t
	}
	if f.transports == nil {
		f.transports = map[string]*http.Transport{}
	}
	t := &http.Transport{
		TLSClientConfig:     f.Identity.ClientConfig(node),
		DialContext:         (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		TLSHandshakeTimeout: 10 * time.Second,
		MaxIdleConnsPerHost: 16,
		IdleConnTimeout:     90 * time.Second,
		ForceAttemptHTTP2:   false, // WebSocket upgrades need HTTP/1.1
	}
	t.TLSClientConfig.NextProtos = []string{"http/1.1"}
	f.transports[key] = t
	return t
}
