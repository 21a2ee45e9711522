package nodeagent

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/berth-sh/berth/internal/agent/agenttls"
	"github.com/berth-sh/berth/internal/errdefs"
)

// ErrRefused: the listener at a node agent's address is not berth's node
// agent (its certificate is not the pinned one), or it refused the
// daemon's.
var ErrRefused = errors.New("node agent refused")

// Client is the daemon's side: it presents the daemon pair of the node
// agents' identity and accepts only their pinned certificate.
type Client struct {
	port int
	http *http.Client
}

// NewClient returns a client of the node agents listening on port of
// each node, authenticated by identity (agenttls: its daemon pair and the
// node agents' certificate).
func NewClient(id agenttls.Identity, port int) (*Client, error) {
	// Only the daemon pair and the node agents' certificate are used
	// (ClientConfig checks them); the node agents' key may be absent.
	conf, err := id.ClientConfig()
	if err != nil {
		return nil, err
	}
	tr := &http.Transport{
		TLSClientConfig:     conf,
		ForceAttemptHTTP2:   false,
		MaxIdleConnsPerHost: 4,
		IdleConnTimeout:     90 * time.Second,
		TLSHandshakeTimeout: 10 * time.Second,
		DialContext:         (&net.Dialer{Timeout: 10 * time.Second}).DialContext,
		// No proxy: the node's address, never through another host.
		Proxy: nil,
	}
	return &Client{port: port, http: &http.Client{Transport: tr, Timeout: 60 * time.Second}}, nil
}

// Close drops idle connections.
func (c *Client) Close() { c.http.CloseIdleConnections() }

// maxReply bounds a node agent's answer.
const maxReply = 64 << 10

// Do asks the node agent at hostIP for op ("": the status; "pause",
// "resume") of pod ns/pod and returns the pod's sandbox status after it.
func (c *Client) Do(ctx context.Context, hostIP, ns, pod, op string) (string, error) {
	ip := net.ParseIP(hostIP)
	if ip == nil {
		return "", errdefs.Unreachable("node address %q", hostIP)
	}
	u := url.URL{Scheme: "https", Host: net.JoinHostPort(ip.String(), strconv.Itoa(c.port)),
		Path: "/v1/pods/" + url.PathEscape(ns) + "/" + url.PathEscape(pod)}
	method := http.MethodGet
	if op != "" {
		method = http.MethodPost
		u.Path += "/" + op
	}
	req, err := http.NewRequestWithContext(ctx, method, u.String(), nil)
	if err != nil {
		return "", err
	}
	resp, err := c.http.Do(req)
	if err != nil {
		var cv *tls.CertificateVerificationError
		if errors.As(err, &cv) || errors.Is(err, agenttls.ErrNotPinned) {
			return "", fmt.Errorf("%w: %v", ErrRefused, err)
		}
		return "", errdefs.Unreachable("node agent at %s: %v", u.Host, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxReply+1))
	if err != nil {
		return "", errdefs.Unreachable("node agent at %s: %v", u.Host, err)
	}
	if len(body) > maxReply {
		return "", fmt.Errorf("node agent at %s: an answer over %d bytes", u.Host, maxReply)
	}
	if resp.StatusCode != http.StatusOK {
		var e struct {
			Error struct{ Code, Message string } `json:"error"`
		}
		_ = json.Unmarshal(body, &e)
		msg := fmt.Sprintf("node agent at %s: %s (%s)", u.Host, e.Error.Message, e.Error.Code)
		switch resp.StatusCode {
		case http.StatusNotFound:
			return "", errdefs.NotFound("%s", msg)
		case http.StatusConflict:
			return "", errdefs.Conflict("%s", msg)
		case http.StatusForbidden:
			return "", errdefs.Permission("%s", msg)
		}
		return "", fmt.Errorf("%s: status %d", msg, resp.StatusCode)
	}
	var r Reply
	if err := json.Unmarshal(body, &r); err != nil {
		return "", fmt.Errorf("node agent at %s: %w", u.Host, err)
	}
	if r.Status != StatusRunning && r.Status != StatusPaused {
		return "", fmt.Errorf("node agent at %s: status %q", u.Host, r.Status)
	}
	return r.Status, nil
}

// Serve serves s on l under mutual TLS with the node agent's parts of
// the identity (agenttls.AgentFiles in tlsDir) until ctx ends.
func Serve(ctx context.Context, s *Server, l net.Listener, tlsDir string) error {
	conf, err := agenttls.LoadServerConfig(tlsDir)
	if err != nil {
		return fmt.Errorf("node agent identity in %s: %w", tlsDir, err)
	}
	srv := &http.Server{Handler: s.Handler(), TLSConfig: conf,
		ReadHeaderTimeout: 10 * time.Second, ReadTimeout: 30 * time.Second, WriteTimeout: 90 * time.Second,
		IdleTimeout: 2 * time.Minute, MaxHeaderBytes: 16 << 10,
		ErrorLog: nil}
	done := make(chan struct{})
	go func() {
		select {
		case <-ctx.Done():
			sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_ = srv.Shutdown(sctx)
		case <-done:
		}
	}()
	defer close(done)
	err = srv.ServeTLS(l, "", "")
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}
