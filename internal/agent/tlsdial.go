package agent

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"time"
)

// TLSDialer connects to one sandbox's agent over TCP and mutual TLS.
type TLSDialer struct {
	// Addr returns the agent's current address (host:port).
	Addr func(ctx context.Context) (string, error)
	// Config pins the agent's certificate and presents the daemon's
	// (package agenttls: Identity.ClientConfig).
	Config *tls.Config
	// Refused, when non-nil, is told of every connection refused for who
	// listened (an error wrapping ErrPeerRefused).
	Refused func(error)
}

// Dial implements the agent client's dial: the handshake completes, under
// ctx, before the connection is returned.
func (d *TLSDialer) Dial(ctx context.Context) (net.Conn, error) {
	addr, err := d.Addr(ctx)
	if err != nil {
		return nil, err
	}
	td := &tls.Dialer{NetDialer: &net.Dialer{Timeout: 5 * time.Second}, Config: d.Config}
	hctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	c, err := td.DialContext(hctx, "tcp", addr)
	if err != nil {
		if errors.Is(err, ErrPeerRefused) {
			if d.Refused != nil {
				d.Refused(err)
			}
			return nil, err
		}
		// A handshake the listener failed (it did not speak TLS, or did
		// not accept our certificate) is no agent of this sandbox
		// either; a refused or unreachable TCP connect is not an
		// impostor.
		var ne *net.OpError
		if errors.As(err, &ne) && ne.Op == "dial" || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
			return nil, err
		}
		err = fmt.Errorf("%w: TLS handshake with %s: %v", ErrPeerRefused, addr, err)
		if d.Refused != nil {
			d.Refused(err)
		}
		return nil, err
	}
	return c, nil
}
