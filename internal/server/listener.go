package server

import (
	"context"
	"net"

	"github.com/berth-sh/berth/internal/server/edge"
	"github.com/berth-sh/berth/internal/server/rest"
)

// RequestIDHeader carries every request's id (see package rest).
const RequestIDHeader = rest.RequestIDHeader

// ValidRequestID reports whether a caller's request id is taken as is
// (see package rest).
func ValidRequestID(id string) bool { return rest.ValidRequestID(id) }

// Listener wraps a listener the API is served on (package edge): the
// per-client connection cap and the JSON rewrite of net/http's own error
// answers.
func (s *Server) Listener(l net.Listener, maxPerClient int) net.Listener {
	return edge.Listener(l, maxPerClient, s.edgeConfig())
}

// ConnContext is the http.Server ConnContext a listener from Listener
// needs: an authenticated request's connection keeps its slot under the
// per-client cap.
func ConnContext(ctx context.Context, c net.Conn) context.Context { return edge.ConnContext(ctx, c) }

func (s *Server) edgeConfig() edge.Config {
	cfg := edge.Config{Log: s.logger, NewRequestID: rest.NewRequestID, RequestIDHeader: RequestIDHeader,
		MaxHeaderBytes: s.maxHeaderBytes()}
	if s.metrics != nil {
		cfg.ConnOpen, cfg.ConnRefused = s.metrics.connOpen, s.metrics.connRefused
	}
	return cfg
}

// rewriteHTTPError is the edge's rewrite with this server's settings.
func (s *Server) rewriteHTTPError(p []byte) ([]byte, bool) {
	cfg := s.edgeConfig()
	return cfg.RewriteHTTPError(p)
}

// netHTTPErrorHeaders: see package edge.
const netHTTPErrorHeaders = edge.NetHTTPErrorHeaders

// DefaultMaxHeaderBytes bounds a request's header block (net/http's
// default is 1 MiB).
const DefaultMaxHeaderBytes = 64 << 10

func (s *Server) maxHeaderBytes() int {
	if s.MaxHeaderBytes > 0 {
		return s.MaxHeaderBytes
	}
	return DefaultMaxHeaderBytes
}
