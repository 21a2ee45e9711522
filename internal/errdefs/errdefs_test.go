package errdefs

import (
	"errors"
	"fmt"
	"testing"
	"time"
)

func TestNameTakenIsAConflictWithItsReason(t *testing.T) {
	err := fmt.Errorf("creating: %w", NameTaken("a sandbox named %q already exists", "x"))
	if !errors.Is(err, ErrConflict) || !errors.Is(err, ErrNameTaken) {
		t.Fatalf("%v: want both ErrConflict and ErrNameTaken", err)
	}
	if Message(err) != `a sandbox named "x" already exists` {
		t.Fatalf("message %q: the reason must not show in it", Message(err))
	}
	if errors.Is(Conflict("sandbox is paused"), ErrNameTaken) {
		t.Fatal("a plain conflict matched ErrNameTaken")
	}
}

// TestQuotaAndRateLimited: both are 429s in the exhausted category with
// their own stable codes, carry their Retry-After through wrapping, and
// keep their message.
func TestQuotaAndRateLimited(t *testing.T) {
	for _, tc := range []struct {
		err  error
		code string
	}{
		{QuotaExceeded(3*time.Second, "tenant acme: 3 of 3 concurrent sandboxes in use"), "quota_exceeded"},
		{RateLimited(500*time.Millisecond, "API key k: over its rate"), "rate_limited"},
	} {
		wrapped := fmt.Errorf("creating: %w", tc.err)
		if code, status := Code(wrapped); code != tc.code || status != 429 {
			t.Errorf("%v: %s %d", tc.err, code, status)
		}
		if !errors.Is(wrapped, ErrExhausted) {
			t.Errorf("%v is not in the exhausted category", tc.err)
		}
		if d, ok := RetryAfter(wrapped); !ok || d <= 0 {
			t.Errorf("%v: Retry-After %v %v", tc.err, d, ok)
		}
		if Message(wrapped) != tc.err.Error() {
			t.Errorf("message %q", Message(wrapped))
		}
	}
	if _, ok := RetryAfter(Exhausted("plain")); ok {
		t.Error("a plain exhausted error has a Retry-After")
	}
}

func TestEgressSecretReasons(t *testing.T) {
	for reason, want := range map[error]string{
		ErrEgressSecretNetwork: "egress_secret_needs_egress",
		ErrEgressSecretHost:    "egress_secret_host_not_allowed",
	} {
		err := fmt.Errorf("create: %w", EgressSecret(reason, "secret K: no"))
		if code, status := Code(err); code != want || status != 400 || !errors.Is(err, ErrInvalid) {
			t.Errorf("%v: %s %d", reason, code, status)
		}
		if Message(err) != "secret K: no" {
			t.Errorf("message %q", Message(err))
		}
	}
}

func TestLimitErrors(t *testing.T) {
	err := fmt.Errorf("creating: %w", Limit("max_labels", 64, "%d labels given", 70))
	if code, status := Code(err); code != "limit_exceeded" || status != 400 || !errors.Is(err, ErrInvalid) {
		t.Fatalf("Limit: %s %d", code, status)
	}
	if LimitName(err) != "max_labels" || Message(err) != "70 labels given (limit max_labels is 64)" {
		t.Fatalf("Limit names %q, says %q", LimitName(err), Message(err))
	}
	busy := LimitBusy("max_concurrent_uploads", 4, time.Second, "4 uploads")
	if code, status := Code(busy); code != "limit_exceeded" || status != 429 || LimitName(busy) != "max_concurrent_uploads" {
		t.Fatalf("LimitBusy: %s %d %q", code, status, LimitName(busy))
	}
	if d, ok := RetryAfter(busy); !ok || d != time.Second {
		t.Fatalf("LimitBusy's Retry-After: %v %v", d, ok)
	}
	if LimitName(Invalid("x")) != "" {
		t.Fatal("a plain invalid error names a limit")
	}
}

// TestCodesListsWhatCodeGives: Codes (the list api/openapi.json
// documents) holds the code and status Code gives for every error the
// package defines, alone and in the pairs Code tells apart.
func TestCodesListsWhatCodeGives(t *testing.T) {
	errs := []error{ErrInvalid, ErrUnauthenticated, ErrPermission, ErrNotFound, ErrConflict, ErrTooLarge, ErrExhausted,
		ErrUnavailable, ErrUnreachable, ErrNotSupported, ErrInsufficientStorage, ErrIdempotencyKeyInvalid,
		ErrIdempotencyKeyReused, ErrIdempotencyInProgress, ErrQuota, ErrRateLimited, ErrEgressSecretNetwork,
		ErrEgressSecretHost, ErrRegistryUnreachable, ErrRegistryDNS, ErrRegistryTLS, ErrRegistryUnauthorized,
		ErrRegistryDenied, ErrRegistry, ErrImageNotFound, ErrImageUnsupported, ErrDigestMismatch, ErrLimit,
		errors.Join(ErrLimit, ErrExhausted), errors.Join(ErrDigestMismatch, ErrInvalid), errors.New("anything")}
	codes := Codes()
	seen := map[StatusCode]bool{}
	for _, err := range errs {
		code, status := Code(err)
		sc := StatusCode{code, status}
		seen[sc] = true
		found := false
		for _, c := range codes {
			found = found || c == sc
		}
		if !found {
			t.Errorf("Code(%v) = %v, which Codes does not list", err, sc)
		}
	}
	for _, c := range codes {
		if !seen[c] {
			t.Errorf("Codes lists %v, which no error here gives", c)
		}
	}
	if codes[len(codes)-1] != (StatusCode{"internal", 500}) {
		t.Errorf("Codes ends with %v, want internal", codes[len(codes)-1])
	}
}
