package rest

import (
	"encoding/json"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/internal/errdefs"
)

// TestRetryAfterHeader: a quota or rate refusal is a 429 with its code
// and a Retry-After in whole seconds rounded up (never early, never 0).
func TestRetryAfterHeader(t *testing.T) {
	for _, tc := range []struct {
		err        error
		code, want string
	}{
		{errdefs.QuotaExceeded(1500*time.Millisecond, "tenant acme: create rate"), "quota_exceeded", "2"},
		{errdefs.RateLimited(10*time.Millisecond, "API key k"), "rate_limited", "1"},
		{errdefs.QuotaExceeded(5*time.Second, "tenant acme: 3 of 3"), "quota_exceeded", "5"},
	} {
		w := httptest.NewRecorder()
		Error(w, tc.err)
		var body api.ErrorBody
		if err := json.Unmarshal(w.Body.Bytes(), &body); err != nil {
			t.Fatal(err)
		}
		if w.Code != 429 || body.Error.Code != tc.code || w.Header().Get("Retry-After") != tc.want {
			t.Errorf("%v: %d %s Retry-After %q, want 429 %s %q", tc.err, w.Code, body.Error.Code, w.Header().Get("Retry-After"), tc.code, tc.want)
		}
	}
	w := httptest.NewRecorder()
	Error(w, errdefs.Conflict("x"))
	if w.Header().Get("Retry-After") != "" {
		t.Error("a conflict carries a Retry-After")
	}
}
