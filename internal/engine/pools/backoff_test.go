package pools

import (
	"errors"
	"testing"
	"time"
)

// TestRefillBacksOff: a member that fails holds its pool's next one back,
// for longer after each failure in a row up to the maximum; one made
// clears it.
func TestRefillBacksOff(t *testing.T) {
	var st poolStats
	if st.backingOff() {
		t.Fatal("a new pool backs off")
	}
	boom := errors.New("boom")
	var last time.Duration
	for i := 1; i <= 12; i++ {
		before := time.Now()
		st.made(boom)
		if !st.backingOff() {
			t.Fatalf("not backing off after %d failures", i)
		}
		st.mu.Lock()
		wait := st.retryAt.Sub(before)
		reason := st.reason
		st.mu.Unlock()
		if reason != refillReason(boom) || reason == "" {
			t.Fatalf("reason %q", reason)
		}
		if wait < last && last < refillBackoffMax || wait > refillBackoffMax+time.Second || wait < refillBackoff {
			t.Fatalf("failure %d waits %s (the one before %s)", i, wait, last)
		}
		last = wait
	}
	if last < refillBackoffMax-time.Second {
		t.Fatalf("after 12 failures the wait is %s, not the maximum %s", last, refillBackoffMax)
	}
	st.made(nil)
	if st.backingOff() || st.lastReason() != "" {
		t.Fatal("a member made does not clear the backoff")
	}
}
