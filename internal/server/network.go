package server

import (
	"context"
	"net"
	"net/http"
	"net/http/httputil"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/internal/auth"
	"github.com/berth-sh/berth/internal/errdefs"
)

func (s *Server) networkRoutes() {
	s.mux.HandleFunc("GET /v1/sandboxes/{id}/network", s.getNetwork)
	s.mux.HandleFunc("POST /v1/sandboxes/{id}/network", s.updateNetwork)
	s.mux.HandleFunc("GET /v1/sandboxes/{id}/flows", s.flows)
	s.mux.HandleFunc("/v1/sandboxes/{id}/ports/{port}/{path...}", func(w http.ResponseWriter, r *http.Request) {
		s.proxy(w, r, r.PathValue("id"), r.PathValue("port"), "/"+r.PathValue("path"))
	})
	s.mux.HandleFunc("/v1/sandboxes/{id}/ports/{port}", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, r.URL.Path+"/", http.StatusPermanentRedirect)
	})
}

func (s *Server) getNetwork(w http.ResponseWriter, r *http.Request) {
	nr, err := s.m.NetworkRules(r.Context(), r.PathValue("id"))
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, 200, nr)
}

func (s *Server) updateNetwork(w http.ResponseWriter, r *http.Request) {
	var req api.NetworkRulesRequest
	if err := decode(r, &req); err != nil {
		writeError(w, err)
		return
	}
	nr, err := s.m.UpdateNetworkRules(r.Context(), r.PathValue("id"), &req, actor(r))
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, 200, nr)
}

func (s *Server) flows(w http.ResponseWriter, r *http.Request) {
	var after uint64
	if v := r.URL.Query().Get("after"); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			writeError(w, errdefs.Invalid("after must be a flow sequence number"))
			return
		}
		after = n
	}
	fs, err := s.m.Flows(r.Context(), r.PathValue("id"), after, 10000)
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, 200, fs)
}

// proxy forwards an HTTP request (WebSocket upgrades included) to a port
// of a sandbox.
func (s *Server) proxy(w http.ResponseWriter, r *http.Request, id, portStr, path string) {
	port, err := strconv.Atoi(portStr)
	if err != nil || port < 1 || port > 65535 {
		writeError(w, errdefs.Invalid("bad port %q", portStr))
		return
	}
	// Dial first, so an unreachable sandbox or port is a clean error.
	conn, _, err := s.m.DialPort(r.Context(), id, port)
	if err != nil {
		writeError(w, err)
		return
	}
	var used atomic.Bool // set by the transport's dialling goroutine
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.Out.URL.Scheme = "http"
			pr.Out.URL.Host = "sandbox"
			pr.Out.URL.Path = path
			pr.Out.URL.RawPath = ""
			pr.Out.Host = r.Host
			pr.Out.Header.Del("Authorization") // the API key is for berth, not the sandbox
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
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			writeError(w, errdefs.Unavailable("sandbox %s port %d: %v", id, port, err))
		},
	}
	rp.ServeHTTP(w, r)
	if used.CompareAndSwap(false, true) {
		conn.Close() // the proxy never dialled: the request failed before
	}
}

// publicPort reports whether a request is for a port its sandbox made
// public, which needs no credentials.
func (s *Server) publicPort(r *http.Request) bool {
	id, port, ok := s.portTarget(r)
	if !ok {
		return false
	}
	sb, err := s.m.Get(r.Context(), id)
	return err == nil && slices.Contains(sb.Spec.PublicPorts, port)
}

// portTarget finds the sandbox and port a proxied request is for: from
// the path /v1/sandboxes/{id}/ports/{port}/..., or from a host name
// {port}-{id}.{domain} when a domain is configured.
func (s *Server) portTarget(r *http.Request) (string, int, bool) {
	if id, port, ok := s.hostTarget(r); ok {
		return id, port, true
	}
	rest, ok := strings.CutPrefix(r.URL.Path, "/v1/sandboxes/")
	if !ok {
		return "", 0, false
	}
	parts := strings.SplitN(rest, "/", 4)
	if len(parts) < 3 || parts[1] != "ports" {
		return "", 0, false
	}
	port, err := strconv.Atoi(parts[2])
	return parts[0], port, err == nil
}

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

// leaseAllows confines a lease token to its sandbox: requests about that
// sandbox only (by path or port host name), and only while it lives.
func (s *Server) leaseAllows(r *http.Request, p auth.Principal) error {
	if p.Sandbox == "" {
		return nil
	}
	ref, ok := "", false
	if id, _, hok := s.hostTarget(r); hok {
		ref, ok = id, true
	} else if rest, pok := strings.CutPrefix(r.URL.Path, "/v1/sandboxes/"); pok {
		ref, _, _ = strings.Cut(rest, "/")
		ok = ref != ""
	}
	if !ok {
		return errdefs.Permission("a lease token acts on its own sandbox only")
	}
	sb, err := s.m.Get(r.Context(), ref)
	if err != nil || sb.ID != p.Sandbox {
		return errdefs.Permission("a lease token acts on its own sandbox only")
	}
	if !sb.State.Live() {
		return errdefs.Unauthenticated("the lease token ended with its sandbox")
	}
	return nil
}
