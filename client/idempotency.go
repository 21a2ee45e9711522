package client

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"io"
	"net/http"
	"syscall"
	"time"
)

// IdempotencyHeader is the request header of an idempotency key. The SDK
// sends one with every create (CreateSandbox, Fork, CreateSnapshot,
// CreateVolume) — a random one unless the context carries one
// (WithIdempotencyKey) — and reuses it when it retries the call, so a
// retry never makes a second object: the daemon answers it with the first
// attempt's result.
const IdempotencyHeader = "Idempotency-Key"

type idemKeyCtx struct{}

// WithIdempotencyKey returns a context whose create calls send key (1 to
// 255 printable ASCII bytes) as their Idempotency-Key. A caller that
// retries a create itself — after a crash of its own, or a failure the SDK
// gave up on — passes the same key each time to get the one object.
func WithIdempotencyKey(ctx context.Context, key string) context.Context {
	return context.WithValue(ctx, idemKeyCtx{}, key)
}

// NewIdempotencyKey returns a random key.
func NewIdempotencyKey() string {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err)
	}
	return hex.EncodeToString(b[:])
}

// idemBackoff is the wait before each retry of a create whose request did
// not get an answer; the key makes the retries safe.
var idemBackoff = []time.Duration{250 * time.Millisecond, 500 * time.Millisecond, time.Second, 2 * time.Second}

// doIdempotent is do for a create: with an Idempotency-Key, retried with
// the same key while the daemon cannot answer (the connection dropped, the
// daemon restarting, the first attempt still in progress). A daemon that
// is not there at all on the first attempt is reported at once.
func (c *Client) doIdempotent(ctx context.Context, method, path string, body, out any) error {
	key, _ := ctx.Value(idemKeyCtx{}).(string)
	if key == "" {
		key = NewIdempotencyKey()
	}
	for attempt := 0; ; attempt++ {
		err := c.doKeyed(ctx, method, path, key, body, out)
		if err == nil || ctx.Err() != nil || attempt >= len(idemBackoff) || !retryable(err, attempt) {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(idemBackoff[attempt]):
		}
	}
}

func (c *Client) doKeyed(ctx context.Context, method, path, key string, body, out any) error {
	req, err := c.newRequest(ctx, method, path, nil, body)
	if err != nil {
		return err
	}
	req.Header.Set(IdempotencyHeader, key)
	return c.roundTrip(req, method, path, out)
}

// retryable: the request may not have been answered, and asking again
// with the same key is safe.
func retryable(err error, attempt int) bool {
	var ae *Error
	if errors.As(err, &ae) {
		return ae.Code == "idempotency_in_progress" || ae.Status == http.StatusServiceUnavailable ||
			ae.Status == http.StatusBadGateway || ae.Status == http.StatusGatewayTimeout
	}
	var ce *ConnectError
	if errors.As(err, &ce) {
		return attempt > 0 // down since an earlier attempt: restarting
	}
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) || errors.Is(err, syscall.ECONNREFUSED)
}
