package rest

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

// NewRequestID returns 16 random bytes in hex.
func NewRequestID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// RequestIDOf returns r's id from the caller, or a new one.
func RequestIDOf(r *http.Request) string {
	if id := r.Header.Get(RequestIDHeader); ValidRequestID(id) {
		return id
	}
	return NewRequestID()
}

// Writer is the response writer every request is answered through: it
// keeps the status sent and what the edge knows about the request (its
// id, the route the mux matched, and where 5xx causes go), which Error
// reads back through any wrapper that unwraps to it.
type Writer struct {
	http.ResponseWriter
	status int
	wrote  bool
	id     string
	method string
	route  string // the matched pattern; set by the guard (SetRoute)
	log    *slog.Logger
}

// NewWriter wraps w for the request of id and method; 5xx causes are
// logged to log (nil: slog's default).
func NewWriter(w http.ResponseWriter, id, method string, log *slog.Logger) *Writer {
	return &Writer{ResponseWriter: w, status: 200, id: id, method: method, log: log}
}

// WriteHeader records the first status sent.
func (w *Writer) WriteHeader(code int) {
	if !w.wrote {
		w.status, w.wrote = code, true
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *Writer) Write(b []byte) (int, error) {
	w.wrote = true
	return w.ResponseWriter.Write(b)
}

// Flush flushes the underlying writer, if it can.
func (w *Writer) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// Unwrap lets http.ResponseController and the WebSocket upgrade reach the
// underlying writer.
func (w *Writer) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// Status is the status sent (200 until one is).
func (w *Writer) Status() int { return w.status }

// Route is the route the guard matched ("" before it has).
func (w *Writer) Route() string { return w.route }

// Wrote reports whether anything of the answer was sent.
func (w *Writer) Wrote() bool { return w.wrote }

// writerOf finds the Writer of the response writer w, which is one or
// wraps one.
func writerOf(w http.ResponseWriter) *Writer {
	for w != nil {
		if sw, ok := w.(*Writer); ok {
			return sw
		}
		u, ok := w.(interface{ Unwrap() http.ResponseWriter })
		if !ok {
			return nil
		}
		w = u.Unwrap()
	}
	return nil
}

// SetRoute records the route the mux matched for the request w answers.
func SetRoute(w http.ResponseWriter, pattern string) {
	if sw := writerOf(w); sw != nil {
		sw.route = pattern
	}
}

// RequestID is the id of the request w answers ("" if w is no Writer's).
func RequestID(w http.ResponseWriter) string {
	if sw := writerOf(w); sw != nil {
		return sw.id
	}
	return ""
}

// StatusOf is the status w's Writer sent, 0 if w is no Writer's.
func StatusOf(w http.ResponseWriter) int {
	if sw := writerOf(w); sw != nil {
		return sw.status
	}
	return 0
}

// HeaderWritten reports whether w has sent its header (true when w is no
// Writer's: then it cannot be known, and the answer must not be begun
// again).
func HeaderWritten(w http.ResponseWriter) bool {
	if sw, ok := w.(*Writer); ok {
		return sw.wrote
	}
	return true
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
	info := writerOf(w)
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

// StreamError is Error for an error sent inside a stream (an exec or
// build event, a WebSocket frame): logged the same way.
func StreamError(w http.ResponseWriter, err error) *api.Error {
	e, _ := errorFor(w, err)
	return e
}

// retryAfterSeconds is d as a Retry-After value: whole seconds, rounded up
// (a client that waits that long is not early), at least 1.
func retryAfterSeconds(d time.Duration) string {
	s := int64((d + time.Second - 1) / time.Second)
	return strconv.FormatInt(max(s, 1), 10)
}
