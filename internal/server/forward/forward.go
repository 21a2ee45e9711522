// Package forward sends an API request about a sandbox that another daemon
// of the shared store runs to that daemon's peer listener, over the
// mutual TLS of internal/peer: the request goes as it came (body,
// credential, a WebSocket upgrade), and the owner answers it. The server
// decides what is forwarded (internal/server, forward.go); this package
// carries it: net/http/httputil's ReverseProxy over one pooled transport
// per peer.
package forward

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httputil"
	"sync"
	"time"

	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/internal/peer"
	"github.com/berth-sh/berth/internal/server/rest"
)

// Headers a forwarding daemon sets; a peer listener trusts them, no other
// listener reads them.
const (
	ForwardedForHeader = "Berth-Forwarded-For" // the client's address, for audit
	ForwardedByHeader  = "Berth-Forwarded-By"  // the forwarding daemon's node
)

// Forwarder forwards requests to the peer listeners of other nodes.
type Forwarder struct {
	Identity *peer.Identity
	// Addr returns the peer address of a node (the store's peers).
	Addr func(ctx context.Context, node string) (string, error)
	Log  interface{ Warn(string, ...any) }

	mu         sync.Mutex
	transports map[string]*http.Transport // by node and address
}

// Serve forwards r to node's peer listener and writes its answer to w;
// what went wrong on the way is a 503 naming the node.
func (f *Forwarder) Serve(w http.ResponseWriter, r *http.Request, sandboxID, node string) {
	addr, err := f.Addr(r.Context(), node)
	if err != nil {
		if errors.Is(err, errdefs.ErrNotFound) {
			err = errdefs.Unavailable("sandbox %s runs on node %s, which has no peer listener (serve --peer-listen)", sandboxID, node)
		}
		rest.Error(w, err)
		return
	}
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.Out.URL.Scheme = "https"
			pr.Out.URL.Host = addr
			pr.Out.Host = peer.ServerName
			pr.Out.Header.Set(ForwardedForHeader, pr.In.RemoteAddr)
			pr.Out.Header.Set(ForwardedByHeader, f.Identity.Node())
		},
		Transport:     f.transport(node, addr),
		FlushInterval: -1, // streams (exec, logs, events) as they come
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			if f.Log != nil {
				f.Log.Warn("forwarding to the owning daemon", "node", node, "addr", addr, "err", err)
			}
			rest.Error(w, errdefs.Unavailable("sandbox %s runs on node %s, which could not be reached: %v", sandboxID, node, err))
		},
	}
	rp.ServeHTTP(w, r)
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
	cfg := f.Identity.ClientConfig(node)
	cfg.NextProtos = []string{"http/1.1"} // WebSocket upgrades need HTTP/1.1
	t := &http.Transport{
		TLSClientConfig:     cfg,
		DialContext:         (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		TLSHandshakeTimeout: 10 * time.Second,
		MaxIdleConnsPerHost: 16,
		IdleConnTimeout:     90 * time.Second,
	}
	f.transports[key] = t
	return t
}

// peerKey marks a request that came through a peer listener.
type peerKey struct{}

// FromPeer reports whether ctx is a request's that came through a peer
// listener: it is never forwarded again.
func FromPeer(ctx context.Context) bool { return ctx.Value(peerKey{}) != nil }

// PeerHandler serves h on a peer listener: for requests whose TLS client
// leaf names a node of the peer CA (the listener's TLS config requires
// one), marked as from a peer, with the forwarded client address as the
// request's remote address (trusted here alone).
func PeerHandler(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		node, ok := peer.ClientNode(r.TLS)
		if !ok {
			rest.Error(w, errdefs.Unauthenticated("peer listener: no verified peer certificate"))
			return
		}
		r = r.WithContext(context.WithValue(r.Context(), peerKey{}, node))
		if a := r.Header.Get(ForwardedForHeader); a != "" {
			if _, _, err := net.SplitHostPort(a); err == nil {
				r.RemoteAddr = a
			}
		}
		r.Header.Del(ForwardedForHeader)
		r.Header.Del(ForwardedByHeader)
		h.ServeHTTP(w, r)
	})
}
