package client

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/berth-sh/berth/api"
)

// Error is an error answer of the API: a non-2xx status with the body
// {"error": {"code": ..., "message": ...}}.
type Error struct {
	Status  int    // HTTP status
	Code    string // stable code: invalid_argument, not_found, conflict, ...
	Message string // one actionable line, safe to show
	// RequestID is the request's X-Request-Id (from the error body, else
	// the response header): quote it when reporting a 5xx, whose cause
	// the daemon logged under it.
	RequestID string
	// RetryAfter is the answer's Retry-After (429 quota_exceeded and
	// rate_limited): waiting that long, the same request may succeed.
	RetryAfter time.Duration
	// Limit names the documented limit of a limit_exceeded refusal
	// (docs/limits.md).
	Limit string
}

// IsLimitExceeded reports whether err refuses a request past one of the
// documented limits (docs/limits.md), and names it.
func IsLimitExceeded(err error) (limit string, ok bool) {
	var e *Error
	if errors.As(err, &e) && e.Code == "limit_exceeded" {
		return e.Limit, true
	}
	return "", false
}

func (e *Error) Error() string { return e.Message }

// IsQuotaExceeded reports whether err is a 429 naming a tenant's limit.
func IsQuotaExceeded(err error) bool { return hasCode(err, "quota_exceeded") }

// IsRateLimited reports whether err is a 429 for a key's request rate.
func IsRateLimited(err error) bool { return hasCode(err, "rate_limited") }

func hasCode(err error, code string) bool {
	var e *Error
	return errors.As(err, &e) && e.Code == code
}

// maxRetryAfter bounds what ParseRetryAfter accepts (a day).
const maxRetryAfter = 24 * time.Hour

// ParseRetryAfter reads a Retry-After header in its delay-seconds form
// (1*DIGIT); anything else (an HTTP date, a sign, spaces inside, more than
// a day) is ignored: false.
func ParseRetryAfter(v string) (time.Duration, bool) {
	v = strings.TrimSpace(v)
	if v == "" || len(v) > 6 {
		return 0, false
	}
	var n int64
	for i := 0; i < len(v); i++ {
		c := v[i]
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int64(c-'0')
	}
	d := time.Duration(n) * time.Second
	if d > maxRetryAfter {
		return 0, false
	}
	return d, true
}

// IsNotFound reports whether err is an API error saying the object does not
// exist (or is not the caller's).
func IsNotFound(err error) bool { return hasStatus(err, http.StatusNotFound, "not_found") }

// IsConflict reports whether err is an API error saying the object is in the
// wrong state or its name is taken.
func IsConflict(err error) bool { return hasStatus(err, http.StatusConflict, "conflict") }

// IsInvalid reports whether err is an API error rejecting the request's input.
func IsInvalid(err error) bool { return hasStatus(err, http.StatusBadRequest, "invalid_argument") }

// IsUnauthorized reports whether err is an API error about a missing, bad or
// insufficient credential (401 or 403).
func IsUnauthorized(err error) bool {
	return hasStatus(err, http.StatusUnauthorized, "unauthenticated") ||
		hasStatus(err, http.StatusForbidden, "permission_denied")
}

func hasStatus(err error, status int, code string) bool {
	var e *Error
	if !errors.As(err, &e) {
		return false
	}
	return e.Status == status || e.Code == code
}

// codes maps statuses to the API's codes for answers that carry no JSON
// body (a proxy in between, or a handler that failed early).
var codes = map[int]string{
	400: "invalid_argument",
	401: "unauthenticated",
	403: "permission_denied",
	404: "not_found",
	409: "conflict",
	413: "too_large",
	429: "resource_exhausted",
	501: "not_supported",
	503: "unavailable",
}

// decodeError turns a non-2xx response into an *Error.
func decodeError(resp *http.Response) error {
	e := &Error{Status: resp.StatusCode, RequestID: resp.Header.Get("X-Request-Id")}
	if d, ok := ParseRetryAfter(resp.Header.Get("Retry-After")); ok {
		e.RetryAfter = d
	}
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	var eb api.ErrorBody
	if json.Unmarshal(body, &eb) == nil && (eb.Error.Code != "" || eb.Error.Message != "") {
		e.Code, e.Message, e.Limit = eb.Error.Code, eb.Error.Message, eb.Error.Limit
		if eb.Error.RequestID != "" {
			e.RequestID = eb.Error.RequestID
		}
	}
	if e.Code == "" {
		e.Code = codes[resp.StatusCode]
		if e.Code == "" {
			e.Code = "internal"
		}
	}
	if e.Message == "" {
		msg := strings.TrimSpace(string(body))
		if i := strings.IndexByte(msg, '\n'); i >= 0 {
			msg = msg[:i]
		}
		if msg == "" || len(msg) > 200 {
			msg = resp.Status
		}
		e.Message = msg
	}
	return e
}

// apiError converts an error carried inside a stream (an exec or build event,
// a WebSocket frame) into an *Error. Status is 0: the stream itself was 200.
func apiError(e *api.Error) error {
	msg := e.Message
	if msg == "" {
		msg = e.Code
	}
	return &Error{Code: e.Code, Message: msg, RequestID: e.RequestID}
}
