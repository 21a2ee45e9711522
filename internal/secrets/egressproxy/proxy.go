package egressproxy

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"time"

	"github.com/berth-sh/berth/internal/secrets"
)

// Defaults of Config's bounds.
const (
	DefaultMaxConns       = 64
	DefaultMaxHeaderBytes = 64 << 10
	DefaultIdleTimeout    = 60 * time.Second
	DefaultDialTimeout    = 10 * time.Second
	DefaultHandshake      = 10 * time.Second
)

// Secret is one egress reference of a sandbox: the placeholder its execs
// see and the host whose requests get the value instead.
type Secret struct {
	Name        string
	Host        string // lower-case DNS name
	Placeholder string
}

// Sandbox is what the proxy knows of one sandbox.
type Sandbox struct {
	ID      string
	CA      *CA
	Secrets []Secret
	// Resolve opens the secret name of the sandbox's tenant now.
	Resolve func(ctx context.Context, name string) ([]byte, error)
	// Pinned reports whether the sandbox's resolver answered host with
	// addr (the allow-list as the sandbox's DNS pins enforce it).
	Pinned func(host string, addr netip.Addr) bool
	// OnInject, if set, is called once per connection and secret the
	// first time the secret's value is put into a request on it (the
	// audit record: names, never the value).
	OnInject func(secret, host string)
}

// Config configures a Proxy. Zero bounds take the defaults.
type Config struct {
	// Roots verifies upstream servers; nil is the system roots.
	Roots *x509.CertPool
	// OrigDst is the destination a redirected connection was sent to;
	// nil is SO_ORIGINAL_DST.
	OrigDst func(net.Conn) (netip.AddrPort, error)
	// Dial dials upstream; nil is a net.Dialer.
	Dial           func(ctx context.Context, network, addr string) (net.Conn, error)
	MaxConns       int // per sandbox
	MaxHeaderBytes int
	IdleTimeout    time.Duration
	DialTimeout    time.Duration
	Handshake      time.Duration
	Log            *slog.Logger
	Now            func() time.Time
}

// Proxy is the daemon's egress proxy. Serve accepts on a listener;
// Add/Remove register sandboxes by source address.
type Proxy struct {
	cfg Config

	mu    sync.Mutex
	boxes map[netip.Addr]*entry
	conns map[net.Conn]struct{}
	done  bool
	wg    sync.WaitGroup
}

type entry struct {
	sb    *Sandbox
	slots chan struct{}
}

// New makes a Proxy.
func New(cfg Config) *Proxy {
	if cfg.OrigDst == nil {
		cfg.OrigDst = OriginalDst
	}
	if cfg.Dial == nil {
		d := &net.Dialer{}
		cfg.Dial = d.DialContext
	}
	if cfg.MaxConns <= 0 {
		cfg.MaxConns = DefaultMaxConns
	}
	if cfg.MaxHeaderBytes <= 0 {
		cfg.MaxHeaderBytes = DefaultMaxHeaderBytes
	}
	if cfg.IdleTimeout <= 0 {
		cfg.IdleTimeout = DefaultIdleTimeout
	}
	if cfg.DialTimeout <= 0 {
		cfg.DialTimeout = DefaultDialTimeout
	}
	if cfg.Handshake <= 0 {
		cfg.Handshake = DefaultHandshake
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Proxy{cfg: cfg, boxes: map[netip.Addr]*entry{}, conns: map[net.Conn]struct{}{}}
}

// Add registers sb as the sandbox whose connections come from src.
func (p *Proxy) Add(src netip.Addr, sb *Sandbox) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.boxes[src.Unmap()] = &entry{sb: sb, slots: make(chan struct{}, p.cfg.MaxConns)}
}

// Remove forgets the sandbox at src; its open connections are closed.
func (p *Proxy) Remove(src netip.Addr) {
	p.mu.Lock()
	e := p.boxes[src.Unmap()]
	delete(p.boxes, src.Unmap())
	var closing []net.Conn
	if e != nil {
		for c := range p.conns {
			if a, ok := addrOf(c.RemoteAddr()); ok && a == src.Unmap() {
				closing = append(closing, c)
			}
		}
	}
	p.mu.Unlock()
	for _, c := range closing {
		_ = c.Close()
	}
}

func addrOf(a net.Addr) (netip.Addr, bool) {
	if ta, ok := a.(*net.TCPAddr); ok {
		ip, ok := netip.AddrFromSlice(ta.IP)
		return ip.Unmap(), ok
	}
	ap, err := netip.ParseAddrPort(a.String())
	return ap.Addr().Unmap(), err == nil
}

// Serve accepts connections on l until l is closed or Close is called.
func (p *Proxy) Serve(l net.Listener) error {
	for {
		c, err := l.Accept()
		if err != nil {
			p.mu.Lock()
			done := p.done
			p.mu.Unlock()
			if done || errors.Is(err, net.ErrClosed) {
				return nil
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				time.Sleep(10 * time.Millisecond)
				continue
			}
			return err
		}
		if !p.track(c) {
			_ = c.Close()
			continue
		}
		go func() {
			defer p.wg.Done()
			defer p.untrack(c)
			p.handle(c)
		}()
	}
}

func (p *Proxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.done {
		return false
	}
	p.conns[c] = struct{}{}
	p.wg.Add(1)
	return true
}

func (p *Proxy) untrack(c net.Conn) {
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
	_ = c.Close()
}

// Close closes every open connection and waits for their handlers; the
// listener is the caller's to close.
func (p *Proxy) Close() {
	p.mu.Lock()
	p.done = true
	for c := range p.conns {
		_ = c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}

// Open is the number of connections being handled.
func (p *Proxy) Open() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.conns)
}

func (p *Proxy) handle(c net.Conn) {
	src, ok := addrOf(c.RemoteAddr())
	if !ok {
		return
	}
	p.mu.Lock()
	e := p.boxes[src]
	p.mu.Unlock()
	if e == nil {
		p.cfg.Log.Warn("egress proxy: connection from an unknown source", "src", src)
		return
	}
	select {
	case e.slots <- struct{}{}:
		defer func() { <-e.slots }()
	default:
		p.cfg.Log.Warn("egress proxy: connection limit", "sandbox", e.sb.ID, "max", p.cfg.MaxConns)
		return
	}
	dst, err := p.cfg.OrigDst(c)
	if err != nil {
		p.cfg.Log.Warn("egress proxy: no original destination", "sandbox", e.sb.ID, "err", err)
		return
	}
	sb := e.sb
	var sni string
	tc := tls.Server(c, &tls.Config{
		MinVersion: tls.VersionTLS12,
		NextProtos: []string{"http/1.1"},
		GetCertificate: func(hello *tls.ClientHelloInfo) (*tls.Certificate, error) {
			h := strings.TrimSuffix(strings.ToLower(hello.ServerName), ".")
			if h == "" {
				return nil, errors.New("no server name")
			}
			if !sb.Pinned(h, dst.Addr()) {
				return nil, fmt.Errorf("server name %q is not pinned to %s", clip(h), dst.Addr())
			}
			sni = h
			return sb.CA.Leaf(h, p.cfg.Now())
		},
	})
	_ = tc.SetDeadline(time.Now().Add(p.cfg.Handshake))
	if err := tc.Handshake(); err != nil {
		p.cfg.Log.Info("egress proxy: client handshake", "sandbox", sb.ID, "dst", dst, "err", err)
		return
	}
	_ = tc.SetDeadline(time.Time{})

	ctx, cancel := context.WithTimeout(context.Background(), p.cfg.DialTimeout)
	raw, err := p.cfg.Dial(ctx, "tcp", dst.String())
	if err != nil {
		cancel()
		p.cfg.Log.Info("egress proxy: upstream dial", "sandbox", sb.ID, "dst", dst, "err", err)
		p.refuseFirst(tc, http.StatusBadGateway, "berth egress proxy: upstream unreachable")
		return
	}
	up := tls.Client(raw, &tls.Config{ServerName: sni, RootCAs: p.cfg.Roots, NextProtos: []string{"http/1.1"}, MinVersion: tls.VersionTLS12})
	err = up.HandshakeContext(ctx)
	cancel()
	if err != nil {
		_ = raw.Close()
		p.cfg.Log.Info("egress proxy: upstream handshake", "sandbox", sb.ID, "host", sni, "err", err)
		p.refuseFirst(tc, http.StatusBadGateway, "berth egress proxy: upstream TLS verification failed")
		return
	}
	defer up.Close()
	p.relay(idleConn{tc, p.cfg.IdleTimeout}, idleConn{up, p.cfg.IdleTimeout}, sb, sni)
}

// maxResponseHead bounds an upstream response's head.
const maxResponseHead = 1 << 20

// idleConn is a connection on which every read and write must make
// progress within d: a stalled peer (either side) ends the relay.
type idleConn struct {
	net.Conn
	d time.Duration
}

func (c idleConn) Read(b []byte) (int, error) {
	_ = c.Conn.SetReadDeadline(time.Now().Add(c.d))
	return c.Conn.Read(b)
}

func (c idleConn) Write(b []byte) (int, error) {
	_ = c.Conn.SetWriteDeadline(time.Now().Add(c.d))
	return c.Conn.Write(b)
}

// relay carries requests from client to up until either side ends or
// stalls. Upgrades (101) are not relayed: the next read of the client
// fails to parse as a request and the connection ends.
func (p *Proxy) relay(client net.Conn, up net.Conn, sb *Sandbox, sni string) {
	lim := &headLimit{r: client}
	cr := bufio.NewReaderSize(lim, 4096)
	ulim := &headLimit{r: up}
	ur := bufio.NewReaderSize(ulim, 4096)
	injected := map[string]bool{}
	for {
		lim.n = int64(p.cfg.MaxHeaderBytes)
		req, err := http.ReadRequest(cr)
		if err != nil {
			if lim.n <= 0 {
				writeError(client, http.StatusRequestHeaderFieldsTooLarge, "berth egress proxy: request head too large")
			} else if !errors.Is(err, io.EOF) && !isTimeout(err) && !errors.Is(err, net.ErrClosed) {
				writeError(client, http.StatusBadRequest, "berth egress proxy: malformed request")
			}
			return
		}
		lim.n = -1 // the body is not bounded here: it streams through
		names, err := p.rewrite(req, sb, sni)
		if err != nil {
			p.cfg.Log.Warn("egress proxy: request refused", "sandbox", sb.ID, "host", sni, "err", err)
			writeError(client, http.StatusBadGateway, "berth egress proxy: "+err.Error())
			return
		}
		for _, name := range names {
			if !injected[name] && sb.OnInject != nil {
				sb.OnInject(name, sni)
			}
			injected[name] = true
		}
		if err := req.Write(up); err != nil {
			return
		}
		ulim.n = maxResponseHead
		resp, err := http.ReadResponse(ur, req)
		if err != nil {
			writeError(client, http.StatusBadGateway, "berth egress proxy: bad upstream response")
			return
		}
		ulim.n = -1
		err = resp.Write(client)
		resp.Body.Close()
		if err != nil || resp.Close || req.Close {
			return
		}
	}
}

// rewrite puts into req's headers the values of sb's secrets for sni,
// when the request's Host is sni too, and returns the names of the
// secrets it put in.
func (p *Proxy) rewrite(req *http.Request, sb *Sandbox, sni string) ([]string, error) {
	if _, ok := req.Header["User-Agent"]; !ok {
		// http.Request.Write adds Go's own User-Agent to a request
		// without one; an empty value suppresses it, so the request goes
		// out as it came.
		req.Header["User-Agent"] = []string{""}
	}
	host := hostOnly(req.Host)
	if host != sni {
		return nil, nil
	}
	values := map[string]string{}
	var names []string
	for _, s := range sb.Secrets {
		if s.Host != host || !strings.Contains(headerText(req.Header), s.Placeholder) {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		v, err := sb.Resolve(ctx, s.Name)
		cancel()
		if err != nil {
			// A revoked secret: the placeholder goes out as it is.
			p.cfg.Log.Info("egress proxy: secret not resolved", "sandbox", sb.ID, "secret", s.Name, "err", err)
			continue
		}
		values[s.Placeholder] = string(v)
		names = append(names, s.Name)
	}
	if err := SubstituteHeaders(req.Header, values); err != nil {
		return nil, err
	}
	return names, nil
}

// SubstituteHeaders replaces the placeholders of values in every header
// value of h (names are left alone). A value that cannot go into a header
// (a control byte) refuses the whole request, naming no value.
func SubstituteHeaders(h http.Header, values map[string]string) error {
	if len(values) == 0 {
		return nil
	}
	for _, v := range values {
		if !secrets.HeaderSafe(v) {
			return errors.New("a secret's value holds a control byte and cannot go into a header")
		}
	}
	for k, vs := range h {
		for i, v := range vs {
			vs[i] = secrets.Substitute(v, values)
		}
		h[k] = vs
	}
	return nil
}

func headerText(h http.Header) string {
	var b strings.Builder
	for _, vs := range h {
		for _, v := range vs {
			b.WriteString(v)
			b.WriteByte('\n')
		}
	}
	return b.String()
}

// hostOnly is the lower-case host of a Host header, without port or
// trailing dot.
func hostOnly(h string) string {
	if hh, _, err := net.SplitHostPort(h); err == nil {
		h = hh
	}
	return strings.TrimSuffix(strings.ToLower(h), ".")
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// refuseFirst answers the client's first request with the error, once
// its head has come (bounded in size and in time), and never before: an
// answer the client has not asked for yet is not a response to it (Go's
// transport, for one, drops it as unsolicited and reports a broken
// connection instead of the 502). A client that sends no head in time,
// or too large a one, is cut without an answer.
func (p *Proxy) refuseFirst(c net.Conn, code int, msg string) {
	_ = c.SetReadDeadline(time.Now().Add(p.cfg.Handshake))
	lim := &headLimit{r: c, n: int64(p.cfg.MaxHeaderBytes)}
	if _, err := http.ReadRequest(bufio.NewReaderSize(lim, 4096)); err != nil {
		return
	}
	writeError(c, code, msg)
}

func writeError(w io.Writer, code int, msg string) {
	if c, ok := w.(interface{ SetWriteDeadline(time.Time) error }); ok {
		_ = c.SetWriteDeadline(time.Now().Add(2 * time.Second))
	}
	fmt.Fprintf(w, "HTTP/1.1 %d %s\r\nContent-Type: text/plain\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s\n", code, http.StatusText(code), len(msg)+1, msg)
}

// headLimit bounds what may be read while n > 0 counts down; n < 0 is
// unbounded (a body streaming through).
type headLimit struct {
	r io.Reader
	n int64
}

func (l *headLimit) Read(p []byte) (int, error) {
	if l.n == 0 {
		return 0, errors.New("request head too large")
	}
	if l.n > 0 && int64(len(p)) > l.n {
		p = p[:l.n]
	}
	n, err := l.r.Read(p)
	if l.n > 0 {
		l.n -= int64(n)
	}
	return n, err
}

func clip(s string) string {
	if len(s) > 64 {
		s = s[:64] + "..."
	}
	return s
}
