// Package edge is the API's connection edge: the listener wrapper that
// caps connections per client address and rewrites the answers net/http
// writes itself, before any handler runs, into the API's JSON error body
// with a request id. It is apart from the server because it works on
// bytes of connections, not on requests, and needs from the server only
// what Config lends it.
package edge

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/berth-sh/berth/api"
)

// Config is what the edge takes from the server.
type Config struct {
	Log             func() *slog.Logger
	NewRequestID    func() string
	RequestIDHeader string
	MaxHeaderBytes  int                // as the http.Server has it
	ConnOpen        prometheus.Gauge   // nil: not counted
	ConnRefused     prometheus.Counter // nil: not counted
}

// Listener wraps a listener the API is served on:
//
//   - maxPerClient > 0 caps the connections open at once from one client
//     address (TCP: the remote IP). At the cap, a new connection takes the
//     place of the oldest one from that address that has not yet carried
//     an authenticated request (Authenticated; the server's ConnContext
//     must be ConnContext): slow or idle connections that never show a
//     credential (a slowloris from the client's host, say) cannot lock
//     out clients that do. Only when every one of them has authenticated
//     is the new connection closed at accept with nothing written:
//     answering it would cost what the cap is there to save, and its
//     request is unread (a response before it would often be lost to a
//     reset). Refusals and evictions are counted
//     (berth_http_connections_refused_total) and logged, at most every 10 s.
//   - every connection's writes pass through RewriteHTTPError, so the
//     answers net/http writes itself before any handler runs (431, a
//     malformed request line, header or Content-Length, an unsupported
//     Transfer-Encoding or protocol version) carry the JSON error body and
//     a request id like every other error.
//
// It goes directly over the plaintext connection (under TLS, if one is
// ever added, inside it).
func Listener(l net.Listener, maxPerClient int, cfg Config) net.Listener {
	return &edgeListener{Listener: l, s: &cfg, max: maxPerClient, open: map[netip.Addr][]*edgeConn{}}
}

type edgeListener struct {
	net.Listener
	s   *Config
	max int

	mu      sync.Mutex
	open    map[netip.Addr][]*edgeConn // oldest first
	lastLog atomic.Int64               // unix nanos of the last refusal logged
	refused atomic.Int64               // since then
}

func (l *edgeListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		ec := &edgeConn{Conn: c, s: l.s}
		if l.max > 0 {
			addr, ok := clientAddr(c)
			if ok {
				l.mu.Lock()
				var evict *edgeConn
				if conns := l.open[addr]; len(conns) >= l.max {
					for _, o := range conns {
						if !o.authed.Load() {
							evict = o
							break
						}
					}
					if evict == nil {
						l.mu.Unlock()
						if l.s.ConnRefused != nil {
							l.s.ConnRefused.Inc()
						}
						l.logRefusal(addr, "refused")
						c.Close()
						continue
					}
					l.drop(addr, evict)
				}
				l.open[addr] = append(l.open[addr], ec)
				l.mu.Unlock()
				if evict != nil {
					// Its slot is the new one's already; closing it
					// ends the server's read of it.
					evict.Close()
					if l.s.ConnRefused != nil {
						l.s.ConnRefused.Inc()
					}
					l.logRefusal(addr, "evicted")
				}
				ec.release = func() {
					l.mu.Lock()
					l.drop(addr, ec)
					l.mu.Unlock()
				}
			}
		}
		if l.s.ConnOpen != nil {
			l.s.ConnOpen.Inc()
		}
		return ec, nil
	}
}

// drop removes c from addr's open connections; the caller holds l.mu.
func (l *edgeListener) drop(addr netip.Addr, c *edgeConn) {
	conns := l.open[addr]
	for i, o := range conns {
		if o == c {
			conns = append(conns[:i:i], conns[i+1:]...)
			break
		}
	}
	if len(conns) == 0 {
		delete(l.open, addr)
	} else {
		l.open[addr] = conns
	}
}

type connKey struct{}

// ConnContext is the http.Server's ConnContext for a listener of this
// package: it lets Authenticated find the request's connection.
func ConnContext(ctx context.Context, c net.Conn) context.Context {
	if tc, ok := c.(*tls.Conn); ok {
		c = tc.NetConn()
	}
	if ec, ok := c.(*edgeConn); ok {
		return context.WithValue(ctx, connKey{}, ec)
	}
	return ctx
}

// Authenticated marks the connection of a request (ctx) as one that
// carried a credential: the per-client cap no longer gives its slot to a
// newer connection.
func Authenticated(ctx context.Context) {
	if ec, ok := ctx.Value(connKey{}).(*edgeConn); ok {
		ec.authed.Store(true)
	}
}

func (l *edgeListener) logRefusal(addr netip.Addr, how string) {
	n := l.refused.Add(1)
	now := time.Now().UnixNano()
	last := l.lastLog.Load()
	if now-last < int64(10*time.Second) || !l.lastLog.CompareAndSwap(last, now) {
		return
	}
	l.refused.Store(0)
	msg := "connections refused: too many open from one client"
	if how == "evicted" {
		msg = "connections evicted: too many open from one client, the oldest without a credential closed"
	}
	l.s.Log().Warn(msg, "client", addr.String(), "max_per_client", l.max, "refused_or_evicted", n)
}

// clientAddr is the IP a connection comes from (TCP only).
func clientAddr(c net.Conn) (netip.Addr, bool) {
	tcp, ok := c.RemoteAddr().(*net.TCPAddr)
	if !ok {
		return netip.Addr{}, false
	}
	a, ok := netip.AddrFromSlice(tcp.IP)
	return a.Unmap(), ok
}

type edgeConn struct {
	net.Conn
	s       *Config
	release func()
	once    sync.Once
	// authed: a request on it carried a credential (Authenticated); the
	// release of its slot no longer goes to a newer connection.
	authed atomic.Bool
}

func (c *edgeConn) Close() error {
	c.once.Do(func() {
		if c.s.ConnOpen != nil {
			c.s.ConnOpen.Dec()
		}
		if c.release != nil {
			c.release()
		}
	})
	return c.Conn.Close()
}

func (c *edgeConn) Write(p []byte) (int, error) {
	if out, ok := c.s.RewriteHTTPError(p); ok {
		if _, err := c.Conn.Write(out); err != nil {
			return 0, err
		}
		return len(p), nil
	}
	return c.Conn.Write(p)
}

// NetHTTPErrorHeaders are the headers net/http's server writes, in this
// order (not the sorted order of a handler's response, which would also
// carry a Date), on the answers it gives itself when it cannot read a
// request (net/http.(*conn).serve).
const NetHTTPErrorHeaders = "\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n\r\n"

// RewriteHTTPError recognises one of net/http's own error answers — a
// single write, exactly "HTTP/1.1 <status>" + NetHTTPErrorHeaders + a body
// that repeats the status (or, for 501, "Unsupported transfer encoding") —
// and returns it as a JSON error answer with a request id. Anything else
// is not touched.
func (s *Config) RewriteHTTPError(p []byte) ([]byte, bool) {
	const proto = "HTTP/1.1 "
	if len(p) < len(proto)+3+len(NetHTTPErrorHeaders) || !bytes.HasPrefix(p, []byte(proto)) {
		return nil, false
	}
	i := bytes.Index(p, []byte(NetHTTPErrorHeaders))
	if i < 0 {
		return nil, false
	}
	status, body := p[len(proto):i], p[i+len(NetHTTPErrorHeaders):]
	if bytes.ContainsAny(status, "\r\n") || len(status) < 4 || status[3] != ' ' {
		return nil, false
	}
	code, err := strconv.Atoi(string(status[:3]))
	if err != nil || code < 400 || code > 599 {
		return nil, false
	}
	if !bytes.Equal(body, status) && !(code == http.StatusNotImplemented && string(body) == "Unsupported transfer encoding") {
		return nil, false
	}
	detail := ""
	if _, d, ok := bytes.Cut(status, []byte(": ")); ok {
		detail = string(d)
	}
	e := api.Error{RequestID: s.NewRequestID()}
	switch code {
	case http.StatusRequestHeaderFieldsTooLarge:
		e.Code, e.Message = "too_large", fmt.Sprintf("request header fields too large (at most %d bytes)", s.MaxHeaderBytes)
	case http.StatusBadRequest:
		e.Code, e.Message = "invalid_argument", "malformed HTTP request"
		if detail != "" {
			e.Message += ": " + detail
		}
	case http.StatusNotImplemented:
		e.Code, e.Message = "not_supported", "unsupported Transfer-Encoding"
	case http.StatusHTTPVersionNotSupported:
		e.Code, e.Message = "not_supported", "unsupported HTTP protocol version"
	default:
		e.Code, e.Message = "invalid_argument", string(status[4:])
		if code >= 500 {
			e.Code = "internal"
		}
	}
	if code >= 500 {
		s.Log().Error("request failed", "request_id", e.RequestID, "method", "", "route", "",
			"status", code, "code", e.Code, "cause", "net/http: "+string(status))
	} else {
		s.Log().Debug("malformed request refused", "request_id", e.RequestID, "status", code, "cause", string(status))
	}
	b, _ := json.Marshal(api.ErrorBody{Error: e})
	b = append(b, '\n')
	out := fmt.Appendf(nil, "HTTP/1.1 %d %s\r\nContent-Type: application/json\r\nConnection: close\r\n%s: %s\r\nContent-Length: %d\r\n\r\n",
		code, http.StatusText(code), s.RequestIDHeader, e.RequestID, len(b))
	return append(out, b...), true
}
