package server

import (
	"crypto/rand"
	"encoding/hex"
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/internal/errdefs"
)

// RequestIDHeader carries every request's id: the caller's, when it is
// well formed, else one the server makes. Each response sends it back, each
// error body carries it, and the daemon logs every 5xx with it.
const RequestIDHeader = "X-Request-Id"

// MaxRequestIDLen bounds an incoming request id.
const MaxRequestIDLen = 128

// ValidRequestID reports whether id may be taken from a caller as is:
// 1..128 bytes of letters, digits and - _ . : / + = @. Anything else (a
// control byte, a space, a quote, a newline that would forge a log line)
// is replaced by an id of the server's own, never logged or echoed.
func ValidRequestID(id string) bool {
	if len(id) == 0 || len(id) > MaxRequestIDLen {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !alnumByte(c) && c != '-' && c != '_' && c != '.' && c != ':' && c != '/' && c != '+' && c != '=' && c != '@' {
			return false
		}
	}
	return true
}

func alnumByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}

// newRequestID returns 16 random bytes in hex.
func newRequestID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// requestID returns r's id from the caller, or a new one.
func requestID(r *http.Request) string {
	if id := r.Header.Get(RequestIDHeader); ValidRequestID(id) {
		return id
	}
	return newRequestID()
}

// reqInfo is what the edge knows about the request a response writer
// answers: its id, the route the mux matched, and where 5xx causes go.
type reqInfo struct {
	id     string
	method string
	route  string // the matched pattern; set by guard
	log    *slog.Logger
}

// infoOf finds the request info of the response writer w, which is the
// edge's statusWriter or wraps it.
func infoOf(w http.ResponseWriter) *reqInfo {
	for w != nil {
		if sw, ok := w.(*statusWriter); ok {
			return sw.info
		}
		u, ok := w.(interface{ Unwrap() http.ResponseWriter })
		if !ok {
			return nil
		}
		w = u.Unwrap()
	}
	return nil
}

// errorFor builds the API error for err answered on w, and logs it when
// it is a server-side failure (5xx) with the request id, method, route and
// the internal cause, which is never shown to the caller: a 500's message
// is "internal error" and the request id to quote.
func errorFor(w http.ResponseWriter, err error) (*api.Error, int) {
	code, status := errdefs.Code(err)
	e := &api.Error{Code: code, Message: errdefs.Message(err), Limit: errdefs.LimitName(err)}
	if d, ok := errdefs.RetryAfter(err); ok {
		w.Header().Set("Retry-After", retryAfterSeconds(d))
	}
	info := infoOf(w)
	if info != nil {
		e.RequestID = info.id
	}
	if status >= 500 {
		log, id, method, route := slog.Default(), "", "", ""
		if info != nil {
			id, method, route = info.id, info.method, info.route
			if info.log != nil {
				log = info.log
			}
		}
		log.Error("request failed", "request_id", id, "method", method, "route", route,
			"status", status, "code", code, "cause", err.Error())
		if status == http.StatusInternalServerError {
			e.Message = "internal error (request id " + id + ")"
		}
	}
	return e, status
}

// apiErrorFor is errorFor for an error sent inside a stream (an exec or
// build event, a WebSocket frame): logged the same way.
func apiErrorFor(w http.ResponseWriter, err error) *api.Error {
	e, _ := errorFor(w, err)
	return e
}

// retryAfterSeconds is d as a Retry-After value: whole seconds, rounded up
// (a client that waits that long is not early), at least 1.
func retryAfterSeconds(d time.Duration) string {
	s := int64((d + time.Second - 1) / time.Second)
	return strconv.FormatInt(max(s, 1), 10)
}
