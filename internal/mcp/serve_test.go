package mcp

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// A client's connect is two requests: a discovery probe, for which the SDK
// makes a session the response does not name, then the initialize that
// makes the real one. The probe's slot must be free by the time its client
// hears the answer, or a connect at MaxSessions-1 is refused (it was, under
// load, in CI).
func TestProbeSlotFreeBeforeNextRequest(t *testing.T) {
	h := NewHTTPHandler(HTTPOptions{MaxSessions: 1}, func(*http.Request) (Caller, bool) {
		return Caller{Owner: "o", Options: func() Options { return Options{} }}, true
	})
	srv := httptest.NewServer(h)
	defer srv.Close()
	defer h.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	open := func() (*mcp.ClientSession, error) {
		return mcp.NewClient(&mcp.Implementation{Name: "t", Version: "1"}, nil).Connect(ctx,
			&mcp.StreamableClientTransport{Endpoint: srv.URL, MaxRetries: -1}, nil)
	}
	for i := range 50 {
		cs, err := open()
		if err != nil {
			t.Fatalf("connect %d with the only slot free: %v", i, err)
		}
		if second, err := open(); err == nil {
			second.Close()
			t.Fatalf("connect %d: a second session past MaxSessions 1", i)
		} else if !strings.Contains(err.Error(), "Service Unavailable") {
			t.Fatalf("connect %d: a second session: %v, want 503", i, err)
		}
		cs.Close()
		for deadline := time.Now().Add(10 * time.Second); h.Sessions() > 0; time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("connect %d: %d sessions left after Close", i, h.Sessions())
			}
		}
	}
}
