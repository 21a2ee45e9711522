// Package client is the Go SDK of berth's HTTP API (/v1). The berth CLI is
// built on it, so everything the CLI does a program can do too.
//
// A Client is safe for concurrent use. It keeps connections alive between
// requests: over the daemon's unix socket an exec round trip costs about a
// millisecond, so create one Client and reuse it.
//
// Connections: the unix socket, or HTTPS pinned by certificate fingerprint
// (WithTLSFingerprint, compared in constant time; the pin replaces chain and
// name verification) or verified against a CA file (tls.go); bearer keys.
// A 429 carries RetryAfter. List calls page through the API's cursors
// themselves (the ...Page calls return one page and the next cursor).
// Creates (sandbox, fork, snapshot, volume) carry an Idempotency-Key
// (random, or the caller's: WithIdempotencyKey, berth create
// --idempotency-key) and are retried with it,
// boundedly, when no answer came back. StreamEvents follows the event
// stream (events.go, its own reader of the Server-Sent Events format),
// reopening a cut stream with Last-Event-ID and never handing an id twice
// (berth events [ID] --follow prints it).
// CopyToSandbox and CopyFromSandbox are docker cp's rules over the files and
// tar routes (cp.go: the extractor refuses names and links leading out of
// the destination), so every SDK user shares the CLI's copy.
package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// DefaultHost is where the daemon listens unless told otherwise.
const DefaultHost = "unix:///run/berth/berth.sock"

// SandboxIDHeader carries the id of the sandbox POST /v1/run created.
const SandboxIDHeader = "X-Berth-Sandbox-Id"

// FileModeHeader carries the octal mode of a file read with ReadFile.
const FileModeHeader = "X-Berth-File-Mode"

// unixBaseURL is the URL requests over a unix socket are addressed to; the
// transport ignores the host and dials the socket.
const unixBaseURL = "http://berth"

// Client talks to one berth daemon.
type Client struct {
	host      string // as given, for messages
	base      *url.URL
	apiKey    string
	userAgent string
	hc        *http.Client
	// TLS options (tls.go), applied to the client's own transport.
	tlsPin    string
	tlsPinSet bool
	tlsCA     string
}

// Option configures a Client.
type Option func(*Client)

// WithHTTPClient replaces the HTTP client. Its transport must reach the host
// (for a unix host it must dial the socket itself). Its Timeout must be zero
// if streaming calls (Exec, Run, BuildTemplate, ReadTar) are to outlive it.
func WithHTTPClient(hc *http.Client) Option {
	return func(c *Client) { c.hc = hc }
}

// WithUserAgent sets the User-Agent header of every request.
func WithUserAgent(ua string) Option {
	return func(c *Client) { c.userAgent = ua }
}

// New returns a Client for host, which is "unix:///path/to/berth.sock"
// (DefaultHost when empty), "http://host:port" or "https://host:port".
// apiKey, when set, is sent as a bearer token.
func New(host, apiKey string, opts ...Option) (*Client, error) {
	if host == "" {
		host = DefaultHost
	}
	c := &Client{host: host, apiKey: apiKey, userAgent: "berth-go-client"}
	u, err := url.Parse(host)
	if err != nil {
		return nil, fmt.Errorf("invalid host %q: %w", host, err)
	}
	var tr *http.Transport
	switch u.Scheme {
	case "unix":
		sock := u.Path
		if sock == "" {
			sock = u.Opaque
		}
		if sock == "" {
			return nil, fmt.Errorf("invalid host %q: want unix:///path/to/socket", host)
		}
		c.base, _ = url.Parse(unixBaseURL)
		tr = newTransport()
		var d net.Dialer
		tr.DialContext = func(ctx context.Context, _, _ string) (net.Conn, error) {
			return d.DialContext(ctx, "unix", sock)
		}
	case "http", "https":
		if u.Host == "" {
			return nil, fmt.Errorf("invalid host %q: missing host:port", host)
		}
		u.Path = strings.TrimSuffix(u.Path, "/")
		u.RawQuery, u.Fragment = "", ""
		c.base = u
		tr = newTransport()
	case "tcp":
		// As docker does: tcp://host:port means plain HTTP.
		c.base = &url.URL{Scheme: "http", Host: u.Host}
		tr = newTransport()
	default:
		return nil, fmt.Errorf("invalid host %q: scheme must be unix, http or https", host)
	}
	c.hc = &http.Client{Transport: tr}
	for _, o := range opts {
		o(c)
	}
	tc, err := c.tlsConfig()
	if err != nil {
		return nil, err
	}
	if tc != nil {
		if u.Scheme != "https" {
			return nil, fmt.Errorf("invalid host %q: a TLS fingerprint or CA needs an https:// host", host)
		}
		if c.hc.Transport != tr {
			return nil, errors.New("WithTLSFingerprint and WithTLSCAFile configure the client's own transport, not one given with WithHTTPClient")
		}
		tr.TLSClientConfig = tc
	}
	return c, nil
}

func newTransport() *http.Transport {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	// Many concurrent execs against one daemon are normal; keep their
	// connections instead of redialling after each burst.
	tr.MaxIdleConns = 256
	tr.MaxIdleConnsPerHost = 64
	tr.IdleConnTimeout = 90 * time.Second
	return tr
}

// Host returns the host the client talks to, as given to New.
func (c *Client) Host() string { return c.host }

// Close releases idle connections.
func (c *Client) Close() error {
	c.hc.CloseIdleConnections()
	return nil
}

// url builds the request URL of an API path ("/v1/...") and query.
func (c *Client) url(path string, q url.Values) string {
	// path is already escaped segment by segment (see pathEscape), so it
	// is appended as is rather than through url.URL.Path.
	s := c.base.String() + path
	if len(q) > 0 {
		s += "?" + q.Encode()
	}
	return s
}

// newRequest builds a request; a non-nil body that is not an io.Reader is
// encoded as JSON.
func (c *Client) newRequest(ctx context.Context, method, path string, q url.Values, body any) (*http.Request, error) {
	var (
		r           io.Reader
		contentType string
	)
	switch b := body.(type) {
	case nil:
	case io.Reader:
		r, contentType = b, "application/octet-stream"
	default:
		buf, err := json.Marshal(b)
		if err != nil {
			return nil, fmt.Errorf("encode request: %w", err)
		}
		// A bytes.Reader lets net/http send a Content-Length, which keeps
		// small requests to a single write.
		r, contentType = bytes.NewReader(buf), "application/json"
	}
	req, err := http.NewRequestWithContext(ctx, method, c.url(path, q), r)
	if err != nil {
		return nil, err
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	c.setHeaders(req.Header)
	return req, nil
}

func (c *Client) setHeaders(h http.Header) {
	if c.apiKey != "" {
		h.Set("Authorization", "Bearer "+c.apiKey)
	}
	if c.userAgent != "" {
		h.Set("User-Agent", c.userAgent)
	}
}

// send performs req and returns the response if its status is 2xx; any
// other status is decoded into an *Error and the body closed.
func (c *Client) send(req *http.Request) (*http.Response, error) {
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, c.transportError(req.Context(), err)
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		defer closeBody(resp.Body)
		return nil, decodeError(resp)
	}
	return resp, nil
}

// transportError makes a failure to reach the daemon say what to check.
func (c *Client) transportError(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "dial" {
		return &ConnectError{Host: c.host, Err: err}
	}
	return err
}

// ConnectError reports that the daemon could not be reached at all.
type ConnectError struct {
	Host string
	Err  error
}

func (e *ConnectError) Error() string {
	return fmt.Sprintf("cannot connect to the berth daemon at %s (is `berth serve` running? set --host or BERTH_HOST): %v", e.Host, rootCause(e.Err))
}

func (e *ConnectError) Unwrap() error { return e.Err }

// rootCause strips the url.Error / net.OpError wrappers that repeat the URL.
func rootCause(err error) error {
	for {
		u := errors.Unwrap(err)
		if u == nil {
			return err
		}
		err = u
	}
}

// do sends a request and decodes a JSON answer into out (when non-nil).
func (c *Client) do(ctx context.Context, method, path string, q url.Values, body, out any) error {
	req, err := c.newRequest(ctx, method, path, q, body)
	if err != nil {
		return err
	}
	return c.roundTrip(req, method, path, out)
}

// roundTrip sends a built request (to method path) and decodes a JSON
// answer into out (when non-nil).
func (c *Client) roundTrip(req *http.Request, method, path string, out any) error {
	resp, err := c.send(req)
	if err != nil {
		return err
	}
	defer closeBody(resp.Body)
	if out == nil || resp.StatusCode == http.StatusNoContent {
		return nil
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return fmt.Errorf("%s %s: decode response: %w", method, path, err)
	}
	return nil
}

// closeBody drains what is left (a few KiB at most) so the connection goes
// back to the pool, then closes.
func closeBody(b io.ReadCloser) {
	_, _ = io.CopyN(io.Discard, b, 64<<10)
	_ = b.Close()
}

// pathEscape escapes one path segment (an id, name or template name).
func pathEscape(s string) string { return url.PathEscape(s) }

func sandboxPath(id string, rest ...string) string {
	p := "/v1/sandboxes/" + pathEscape(id)
	for _, r := range rest {
		p += "/" + r
	}
	return p
}
