package engine

import (
	"context"
	"errors"
	"testing"
	"time"
)

func TestExecOutcome(t *testing.T) {
	for _, tc := range []struct {
		exit Exit
		err  error
		want string
	}{
		{Exit{Code: 0}, nil, "ok"},
		{Exit{Code: 3}, nil, "nonzero"},
		{Exit{Code: 137, Signal: "SIGKILL", TimedOut: true}, nil, "timeout"},
		{Exit{Code: 0}, errors.New("agent gone"), "error"},
	} {
		if got := execOutcome(tc.exit, tc.err); got != tc.want {
			t.Errorf("%+v, %v: %s, want %s", tc.exit, tc.err, got, tc.want)
		}
	}
}

// TestCleanupSinceDeadline: a policy deletion's lag counts from its
// deadline; a deadline in the future (a clock step) is not trusted.
func TestCleanupSinceDeadline(t *testing.T) {
	begin := time.Now()
	if d := cleanupSince(context.Background(), begin); d < 0 || d > time.Second {
		t.Fatalf("lag from the call: %v", d)
	}
	ctx := WithCleanupFrom(context.Background(), begin.Add(-3*time.Second))
	if d := cleanupSince(ctx, begin); d < 3*time.Second || d > 4*time.Second {
		t.Fatalf("lag from a deadline 3s before: %v", d)
	}
	ctx = WithCleanupFrom(context.Background(), begin.Add(time.Hour))
	if d := cleanupSince(ctx, begin); d > time.Second {
		t.Fatalf("lag from a future deadline: %v", d)
	}
}
