package server

import (
	"context"
	"net"
	"net/http"
	"net/http/httputil"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/internal/server/rest"
)

// proxy forwards an HTTP request (WebSocket upgrades included) to a port
// of a sandbox.
func (s *Server) proxy(w http.ResponseWriter, r *http.Request, id, portStr, path string) {
	port, err := strconv.Atoi(portStr)
	if err != nil || port < 1 || port > 65535 {
		rest.Error(w, errdefs.Invalid("bad port %q", portStr))
		return
	}
	// Dial first, so an unreachable sandbox or port is a clean error.
	conn, _, err := s.m.DialPort(r.Context(), id, port)
	if err != nil {
		rest.Error(w, err)
		return
	}
	// Full duplex: net/http's HTTP/1 server otherwise reads the rest of
	// the request body and closes it when the response header goes out.
	// The transport below is still reading that body (after its
	// Content-Length bytes it reads once more for EOF, then closes it):
	// when the sandbox answers inside that window the read fails with
	// "invalid Read on closed Body", the transport tears the upstream
	// connection down and the answer is cut mid-stream (the client sees
	// its response end without its last chunk: undici's "terminated").
	// The body belongs to the transport until it is done with it.
	_ = http.NewResponseController(w).EnableFullDuplex()
	var used atomic.Bool // set by the transport's dialling goroutine
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.Out.URL.Scheme = "http"
			pr.Out.URL.Host = "sandbox"
			pr.Out.URL.Path = path
			pr.Out.URL.RawPath = ""
			pr.Out.Host = r.Host
			pr.Out.Header.Del("Authorization") // the API key is for berth, not the sandbox
			stripBearerProtocol(pr.Out.Header)
			stripPortToken(pr.Out.Header, pr.Out.URL)
			if pathRouted(r) {
				// No cookie is the daemon origin's to hand a sandbox.
				pr.Out.Header.Del("Cookie")
			}
			pr.SetXForwarded()
		},
		Transport: &http.Transport{
			DisableKeepAlives: true,
			DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
				if used.CompareAndSwap(false, true) {
					return conn, nil
				}
				c, _, err := s.m.DialPort(ctx, id, port)
				return c, err
			},
		},
		ModifyResponse: func(resp *http.Response) error {
			scrubProxiedResponse(resp.Header)
			if pathRouted(r) {
				isolatePathRouted(resp.Header)
			}
			return nil
		},
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			rest.Error(w, errdefs.Unavailable("sandbox %s port %d: %v", id, port, err))
		},
	}
	rp.ServeHTTP(w, r)
	if used.CompareAndSwap(false, true) {
		conn.Close() // the proxy never dialled: the request failed before
	}
}

// hostTarget finds the sandbox and port a request is for from its host
// name {port}-{id}.{domain}, when a domain is configured.
func (s *Server) hostTarget(r *http.Request) (string, int, bool) {
	if s.Domain == "" {
		return "", 0, false
	}
	host := r.Host
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	label, ok := strings.CutSuffix(strings.ToLower(host), "."+s.Domain)
	if !ok || strings.Contains(label, ".") {
		return "", 0, false
	}
	p, id, ok := strings.Cut(label, "-")
	port, err := strconv.Atoi(p)
	return id, port, ok && err == nil && id != ""
}
