// Package errdefs defines the error categories that every layer of berth wraps
// its errors with. The API edge maps a category to an HTTP status and a stable
// error code exactly once; nothing below it knows about HTTP.
package errdefs

import (
	"errors"
	"fmt"
	"time"
)

// Category errors. Wrap them with fmt.Errorf("...: %w", errdefs.ErrNotFound)
// or use the constructors below, which keep a user-safe message.
var (
	ErrInvalid         = errors.New("invalid argument")   // 400 invalid_argument
	ErrUnauthenticated = errors.New("unauthenticated")    // 401 unauthenticated
	ErrPermission      = errors.New("permission denied")  // 403 permission_denied
	ErrNotFound        = errors.New("not found")          // 404 not_found
	ErrConflict        = errors.New("conflict")           // 409 conflict (wrong state, name taken)
	ErrTooLarge        = errors.New("too large")          // 413 too_large
	ErrExhausted       = errors.New("resource exhausted") // 429 resource_exhausted
	ErrUnavailable     = errors.New("unavailable")        // 503 unavailable
	ErrUnreachable     = errors.New("unreachable")        // 502 unreachable (the sandbox is up, nothing answers at the target)
	ErrNotSupported    = errors.New("not supported")      // 501 not_supported
	// ErrInsufficientStorage: the request's data cannot fit on the host
	// (507 insufficient_storage).
	ErrInsufficientStorage = errors.New("insufficient storage")

	// Idempotency-Key answers (internal/server/idempotency.go).
	ErrIdempotencyKeyInvalid = errors.New("invalid idempotency key") // 400 invalid_idempotency_key
	ErrIdempotencyKeyReused  = errors.New("idempotency key reused")  // 422 idempotency_key_reused
	ErrIdempotencyInProgress = errors.New("idempotency in progress") // 409 idempotency_in_progress
)

// Error is an error with a message that is safe to show to an API user, kept
// apart from the wrapped internal detail.
type Error struct {
	Category error  // one of the Err* values above
	Msg      string // safe for users
	Err      error  // internal cause, may be nil
	// Reason, if set, is a finer sentinel within the category (ErrNameTaken)
	// that callers match with errors.Is instead of reading Msg.
	Reason error
	// RetryAfter, when positive, is when the same request may succeed
	// (the API's Retry-After header, in whole seconds rounded up).
	RetryAfter time.Duration
	// Limit names the documented limit a request went past (ErrLimit).
	Limit string
}

func (e *Error) Error() string {
	if e.Err != nil {
		return e.Msg + ": " + e.Err.Error()
	}
	return e.Msg
}

// Unwrap lets errors.Is match both the category and the cause.
func (e *Error) Unwrap() []error {
	out := []error{e.Category}
	if e.Reason != nil {
		out = append(out, e.Reason)
	}
	if e.Err != nil {
		out = append(out, e.Err)
	}
	return out
}

// ErrModified is the reason of a Conflict from a compare-and-swap write
// that met a newer version of the record: a writer that did not ask for a
// precondition reads it again and retries (the engine's own writes do).
var ErrModified = errors.New("modified concurrently")

// Modified reports a compare-and-swap write that met a newer record (409).
func Modified(format string, args ...any) error {
	return &Error{Category: ErrConflict, Msg: fmt.Sprintf(format, args...), Reason: ErrModified}
}

// ErrNameTaken is the reason of a Conflict whose cause is a name already
// used by a live object of the same kind and tenant.
var ErrNameTaken = errors.New("name taken")

// NameTaken reports a name clash (409 conflict, reason ErrNameTaken).
func NameTaken(format string, args ...any) error {
	return &Error{Category: ErrConflict, Msg: fmt.Sprintf(format, args...), Reason: ErrNameTaken}
}

func mk(cat error, format string, args ...any) error {
	return &Error{Category: cat, Msg: fmt.Sprintf(format, args...)}
}

// Invalid reports bad input (400).
func Invalid(format string, args ...any) error { return mk(ErrInvalid, format, args...) }

// NotFound reports an unknown object (404).
func NotFound(format string, args ...any) error { return mk(ErrNotFound, format, args...) }

// Conflict reports an operation in the wrong state or a name clash (409).
func Conflict(format string, args ...any) error { return mk(ErrConflict, format, args...) }

// TooLarge reports a body or file past its cap (413).
func TooLarge(format string, args ...any) error { return mk(ErrTooLarge, format, args...) }

// Exhausted reports a quota or rate limit hit (429).
func Exhausted(format string, args ...any) error { return mk(ErrExhausted, format, args...) }

// Unauthenticated reports a missing or bad credential (401).
func Unauthenticated(format string, args ...any) error {
	return mk(ErrUnauthenticated, format, args...)
}

// Permission reports a credential without the needed scope (403).
func Permission(format string, args ...any) error { return mk(ErrPermission, format, args...) }

// NotSupported reports a feature the chosen backend lacks (501).
func NotSupported(format string, args ...any) error { return mk(ErrNotSupported, format, args...) }

// Reasons within ErrExhausted (429) with their own stable codes.
var (
	// ErrQuota: a tenant's quota (sandboxes, CPUs, memory, storage or
	// create rate) would be exceeded (429 quota_exceeded).
	ErrQuota = errors.New("quota exceeded")
	// ErrRateLimited: an API key sent requests faster than its rate
	// (429 rate_limited).
	ErrRateLimited = errors.New("rate limited")
)

// Reasons within ErrInvalid (400) with their own stable codes: why an
// egress-injected secret (egress_host) cannot be given to a sandbox.
var (
	// ErrEgressSecretNetwork: the sandbox is not in network mode egress
	// (400 egress_secret_needs_egress).
	ErrEgressSecretNetwork = errors.New("egress secret needs network mode egress")
	// ErrEgressSecretHost: the sandbox's egress rules do not allow the
	// secret's host on TCP 443 (400 egress_secret_host_not_allowed).
	ErrEgressSecretHost = errors.New("egress secret host not allowed")
)

// Reasons of registry transfers (a pull, an import by reference, a push),
// each with its own stable code, so a client can tell the registry's
// failures from berth's. The registry is upstream of the daemon: what it
// refuses or cannot serve is a 502 (bad gateway) or, for a missing image
// or refused credentials, a 404 or 403 (never a 401, which would say the
// caller's berth key was refused).
var (
	// ErrRegistryUnreachable: nothing answered at the registry's address
	// (connection refused, no route, timed out) (502 registry_unreachable).
	ErrRegistryUnreachable = errors.New("registry unreachable")
	// ErrRegistryDNS: the registry's host name did not resolve (502
	// registry_dns).
	ErrRegistryDNS = errors.New("registry name not resolved")
	// ErrRegistryTLS: the registry's TLS handshake or certificate failed
	// (unknown authority, a name it is not for, expired, plain HTTP) (502
	// registry_tls).
	ErrRegistryTLS = errors.New("registry TLS failed")
	// ErrRegistryUnauthorized: the registry answered 401: credentials
	// missing or refused (403 registry_unauthorized).
	ErrRegistryUnauthorized = errors.New("registry credentials refused")
	// ErrRegistryDenied: the registry answered 403 to the credentials it
	// took (403 registry_denied).
	ErrRegistryDenied = errors.New("registry denied access")
	// ErrRegistry: any other failure of the registry (a 5xx, a malformed
	// answer, a 429) (502 registry_error).
	ErrRegistry = errors.New("registry error")
	// ErrImageNotFound: the registry has no such repository, tag or
	// manifest (404 image_not_found).
	ErrImageNotFound = errors.New("image not found")
	// ErrImageUnsupported: what the reference names is no container image
	// berth runs: an unknown media type (an artifact), no linux image for
	// this host's architecture (400 image_unsupported).
	ErrImageUnsupported = errors.New("image unsupported")
	// ErrDigestMismatch: a blob does not hash to the digest that names it
	// (a registry's: 502 digest_mismatch; an uploaded archive's or a
	// layout's stays 400 invalid_argument, its code from before).
	ErrDigestMismatch = errors.New("digest mismatch")
)

// ErrLimit: a request past one of berth's documented limits (400
// limit_exceeded; docs/limits.md lists them). The *Error's Limit names it.
var ErrLimit = errors.New("limit exceeded")

// Limit reports a request past limit name, whose maximum is max; the
// message says what was asked and names the limit.
func Limit(name string, max int64, format string, args ...any) error {
	return &Error{Category: ErrInvalid, Reason: ErrLimit, Limit: name,
		Msg: fmt.Sprintf(format, args...) + fmt.Sprintf(" (limit %s is %d)", name, max)}
}

// LimitBusy reports a request past a documented limit on work in
// progress (429 limit_exceeded, Retry-After retryAfter): the same request
// may succeed once some of it is done.
func LimitBusy(name string, max int64, retryAfter time.Duration, format string, args ...any) error {
	return &Error{Category: ErrExhausted, Reason: ErrLimit, Limit: name, RetryAfter: retryAfter,
		Msg: fmt.Sprintf(format, args...) + fmt.Sprintf(" (limit %s is %d)", name, max)}
}

// LimitName returns the limit err refuses past, "" if none.
func LimitName(err error) string {
	var e *Error
	if errors.As(err, &e) {
		return e.Limit
	}
	return ""
}

// EgressSecret reports a refused egress secret reference; reason is
// ErrEgressSecretNetwork or ErrEgressSecretHost.
func EgressSecret(reason error, format string, args ...any) error {
	return &Error{Category: ErrInvalid, Reason: reason, Msg: fmt.Sprintf(format, args...)}
}

// QuotaExceeded reports a tenant's limit (429 quota_exceeded); the message
// names the limit, retryAfter (0: none known) says when to try again.
func QuotaExceeded(retryAfter time.Duration, format string, args ...any) error {
	return &Error{Category: ErrExhausted, Reason: ErrQuota, Msg: fmt.Sprintf(format, args...), RetryAfter: retryAfter}
}

// RateLimited reports a key over its request rate (429 rate_limited).
func RateLimited(retryAfter time.Duration, format string, args ...any) error {
	return &Error{Category: ErrExhausted, Reason: ErrRateLimited, Msg: fmt.Sprintf(format, args...), RetryAfter: retryAfter}
}

// RetryAfter returns the outermost RetryAfter set on err, if any.
func RetryAfter(err error) (time.Duration, bool) {
	var e *Error
	if errors.As(err, &e) && e.RetryAfter > 0 {
		return e.RetryAfter, true
	}
	return 0, false
}

// codes maps errors to the API's stable codes and statuses: the first
// row whose errors err is all of (and not the row's not) gives them. The
// order matters: a specific reason before its category.
var codes = []struct {
	all    []error
	not    error
	code   string
	status int
}{
	{[]error{ErrQuota}, nil, "quota_exceeded", 429},
	{[]error{ErrRateLimited}, nil, "rate_limited", 429},
	{[]error{ErrLimit, ErrExhausted}, nil, "limit_exceeded", 429},
	{[]error{ErrLimit}, nil, "limit_exceeded", 400},
	{[]error{ErrEgressSecretNetwork}, nil, "egress_secret_needs_egress", 400},
	{[]error{ErrEgressSecretHost}, nil, "egress_secret_host_not_allowed", 400},
	{[]error{ErrIdempotencyKeyInvalid}, nil, "invalid_idempotency_key", 400},
	{[]error{ErrIdempotencyKeyReused}, nil, "idempotency_key_reused", 422},
	{[]error{ErrIdempotencyInProgress}, nil, "idempotency_in_progress", 409},
	{[]error{ErrDigestMismatch}, ErrInvalid, "digest_mismatch", 502},
	{[]error{ErrImageUnsupported}, nil, "image_unsupported", 400},
	{[]error{ErrImageNotFound}, nil, "image_not_found", 404},
	{[]error{ErrRegistryUnauthorized}, nil, "registry_unauthorized", 403},
	{[]error{ErrRegistryDenied}, nil, "registry_denied", 403},
	{[]error{ErrRegistryUnreachable}, nil, "registry_unreachable", 502},
	{[]error{ErrRegistryDNS}, nil, "registry_dns", 502},
	{[]error{ErrRegistryTLS}, nil, "registry_tls", 502},
	{[]error{ErrRegistry}, nil, "registry_error", 502},
	{[]error{ErrInvalid}, nil, "invalid_argument", 400},
	{[]error{ErrUnauthenticated}, nil, "unauthenticated", 401},
	{[]error{ErrPermission}, nil, "permission_denied", 403},
	{[]error{ErrNotFound}, nil, "not_found", 404},
	{[]error{ErrConflict}, nil, "conflict", 409},
	{[]error{ErrTooLarge}, nil, "too_large", 413},
	{[]error{ErrExhausted}, nil, "resource_exhausted", 429},
	{[]error{ErrNotSupported}, nil, "not_supported", 501},
	{[]error{ErrInsufficientStorage}, nil, "insufficient_storage", 507},
	{[]error{ErrUnavailable}, nil, "unavailable", 503},
	{[]error{ErrUnreachable}, nil, "unreachable", 502},
}

// Code returns the stable API error code and HTTP status for err.
func Code(err error) (code string, status int) {
rows:
	for _, c := range codes {
		for _, e := range c.all {
			if !errors.Is(err, e) {
				continue rows
			}
		}
		if c.not != nil && errors.Is(err, c.not) {
			continue
		}
		return c.code, c.status
	}
	return "internal", 500
}

// StatusCode is a stable API error code and the HTTP status it comes
// with.
type StatusCode struct {
	Code   string `json:"code"`
	Status int    `json:"status"`
}

// Codes lists every stable code Code returns, each with its statuses
// (limit_exceeded has two), "internal" last: the list api/openapi.json
// documents.
func Codes() []StatusCode {
	var out []StatusCode
	seen := map[StatusCode]bool{}
	for _, c := range codes {
		sc := StatusCode{c.code, c.status}
		if !seen[sc] {
			seen[sc] = true
			out = append(out, sc)
		}
	}
	return append(out, StatusCode{"internal", 500})
}

// Message returns the user-safe message of err: the Msg of the outermost
// *Error, or a generic text for uncategorised internal errors.
func Message(err error) string {
	var e *Error
	if errors.As(err, &e) {
		return e.Msg
	}
	if _, status := Code(err); status != 500 {
		return err.Error()
	}
	return "internal error"
}

// Unreachable reports a target inside a running sandbox that refuses or
// does not answer, e.g. a port nothing listens on (502).
func Unreachable(format string, args ...any) error { return mk(ErrUnreachable, format, args...) }

// InsufficientStorage reports a request whose data the host cannot hold
// (507); the message names the limit.
func InsufficientStorage(format string, args ...any) error {
	return mk(ErrInsufficientStorage, format, args...)
}

// Unavailable reports a dependency that cannot be reached now (503).
func Unavailable(format string, args ...any) error { return mk(ErrUnavailable, format, args...) }
