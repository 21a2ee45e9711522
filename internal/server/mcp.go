package server

import (
	"context"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/berth-sh/berth/client"
	"github.com/berth-sh/berth/internal/access"
	"github.com/berth-sh/berth/internal/auth"
	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/internal/mcp"
	"github.com/berth-sh/berth/internal/server/rest"
)

// The MCP endpoint (/v1/mcp): the tools of internal/mcp over streamable
// HTTP. Its tools are the Go client's calls, made through a loopback to
// this very handler with the caller's own credential (or, for the trusted
// unix socket, as the local administrator), so every tool call passes the
// same guard and authorization as the REST call it makes.

// A session needs the read every tool starts from (access.MCPCall).
// Each tool's own right is decided where the same REST call's is, by the
// access layer its loopback call passes with the caller's key: the door
// keeps no rule of its own, so a viewer reads through MCP what it reads
// through REST, and a key without exec writes files but runs nothing, on
// both.

type mcpState struct {
	once    sync.Once
	handler *mcp.HTTPHandler
	loop    *loopback
	srv     *http.Server
	hcs     [2]*http.Client // by trust: untrusted, trusted
}

// mcpHandler serves /v1/mcp; its loopback starts with the first request.
func (s *Server) mcpHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mcpInit()
		if s.mcp.handler == nil {
			rest.Error(w, errdefs.Unavailable("the daemon is shutting down"))
			return
		}
		s.mcp.handler.ServeHTTP(w, r)
	})
}

func (s *Server) mcpInit() {
	s.mcp.once.Do(func() {
		st := &s.mcp
		st.loop = newLoopback()
		untrusted, trusted := s.Handler(false), s.Handler(true)
		st.srv = &http.Server{
			Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if t, _ := r.Context().Value(loopTrustKey{}).(bool); t {
					trusted.ServeHTTP(w, r)
					return
				}
				untrusted.ServeHTTP(w, r)
			}),
			ConnContext: func(ctx context.Context, c net.Conn) context.Context {
				lc, _ := c.(*loopConn)
				return context.WithValue(ctx, loopTrustKey{}, lc != nil && lc.trusted)
			},
			ReadHeaderTimeout: time.Minute,
		}
		go func() { _ = st.srv.Serve(st.loop) }()
		for i, t := range []bool{false, true} {
			tr := &http.Transport{
				DialContext:         func(ctx context.Context, _, _ string) (net.Conn, error) { return st.loop.dial(ctx, t) },
				MaxIdleConnsPerHost: 16,
				IdleConnTimeout:     30 * time.Second,
			}
			st.hcs[i] = &http.Client{Transport: tr}
		}
		st.handler = mcp.NewHTTPHandler(mcp.HTTPOptions{Log: s.logger(), MaxSessions: s.MCPMaxSessions,
			MaxSessionsPerTenant: s.MCPMaxSessionsPerTenant, IdleTimeout: s.MCPIdleTimeout}, s.mcpCaller)
	})
}

// mcpCaller is who calls /v1/mcp, from what the guard established.
func (s *Server) mcpCaller(r *http.Request) (mcp.Caller, bool) {
	p, ok := auth.From(r.Context())
	if !ok || p.IsLease() || p.Actor == auth.Anonymous.Actor {
		return mcp.Caller{}, false
	}
	trusted := rest.Trusted(r.Context())
	key := ""
	owner := "local"
	if !trusted {
		key, _ = strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		key = strings.TrimSpace(key)
		if key == "" || p.KeyID == "" {
			return mcp.Caller{}, false
		}
		owner = "key:" + p.KeyID
	}
	base := ""
	if !trusted && r.Host != "" {
		scheme := "http"
		if r.TLS != nil {
			scheme = "https"
		}
		base = scheme + "://" + r.Host
	}
	source := r.RemoteAddr
	hc := s.mcp.hcs[0]
	if trusted {
		hc = s.mcp.hcs[1]
	}
	return mcp.Caller{Owner: owner, Tenant: p.Tenant, Bind: func() (context.Context, func()) {
		// The session outlives the request that made it: it ends with the
		// credential (live.go), not with the request.
		return s.bind(context.Background(), p)
	}, Options: func() mcp.Options {
		c, _ := client.New("http://berth.mcp.loopback", key, client.WithHTTPClient(hc), client.WithUserAgent("berth-mcp"))
		return mcp.Options{Client: c, Processes: mcp.ClientProcesses{C: c}, PortBaseURL: base, PortDomain: s.Domain, Log: s.logger(),
			Refuse: func(ctx context.Context, op access.Op, sandbox, why string) error {
				// Arguments the SDK refused before the tool: the gate's
				// decision, then REST's record of an invalid request.
				g := access.Gate{Audit: s.Audit, Log: s.logger()}
				return g.DoTranslated(ctx, access.Call{P: p, Op: op, Sandbox: sandbox, Source: source},
					func() (access.Validator, error) { return nil, errdefs.Invalid("%s", why) }, func() error { return nil })
			}}
	}}, true
}

// CloseMCP ends every MCP session, deleting their ephemeral sandboxes,
// and stops the loopback: the daemon is shutting down.
func (s *Server) CloseMCP() {
	s.mcp.once.Do(func() {}) // never started: it never will
	if s.mcp.handler == nil {
		return
	}
	s.mcp.handler.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = s.mcp.srv.Shutdown(ctx)
	for _, hc := range s.mcp.hcs {
		hc.CloseIdleConnections()
	}
}

type loopTrustKey struct{}

// loopback is an in-memory listener: dial hands one end of a pipe to
// Accept.
type loopback struct {
	conns  chan net.Conn
	done   chan struct{}
	closed sync.Once
}

type loopConn struct {
	net.Conn
	trusted bool
}

func newLoopback() *loopback {
	return &loopback{conns: make(chan net.Conn), done: make(chan struct{})}
}

func (l *loopback) dial(ctx context.Context, trusted bool) (net.Conn, error) {
	a, b := net.Pipe()
	select {
	case l.conns <- &loopConn{Conn: b, trusted: trusted}:
		return a, nil
	case <-l.done:
	case <-ctx.Done():
	}
	a.Close()
	b.Close()
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	return nil, net.ErrClosed
}

func (l *loopback) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *loopback) Close() error {
	l.closed.Do(func() { close(l.done) })
	return nil
}

func (l *loopback) Addr() net.Addr { return loopAddr{} }

type loopAddr struct{}

func (loopAddr) Network() string { return "pipe" }
func (loopAddr) String() string  { return "mcp-loopback" }
