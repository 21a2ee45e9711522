package client

import (
	"context"
	"errors"
	"net/http"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/berth-sh/berth/api"
)

// TestCreateRetriesWithTheSameKey: a create whose connection drops before
// the answer is sent again with the same Idempotency-Key, as are 409
// idempotency_in_progress answers; every create gets a key of its own, or
// the caller's.
func TestCreateRetriesWithTheSameKey(t *testing.T) {
	defer func(b []time.Duration) { idemBackoff = b }(idemBackoff)
	idemBackoff = []time.Duration{time.Millisecond, time.Millisecond, time.Millisecond}
	var mu sync.Mutex
	var keys []string
	c := newTestClient(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		keys = append(keys, r.Header.Get(IdempotencyHeader))
		n := len(keys)
		mu.Unlock()
		switch n {
		case 1: // the daemon died mid-request
			conn, _, _ := w.(http.Hijacker).Hijack()
			conn.Close()
		case 2:
			writeJSON(w, 409, api.ErrorBody{Error: api.Error{Code: "idempotency_in_progress", Message: "wait"}})
		default:
			writeJSON(w, 201, api.Sandbox{ID: "sb1"})
		}
	}), "")
	sb, err := c.CreateSandbox(context.Background(), api.CreateSandboxRequest{})
	if err != nil || sb.ID != "sb1" {
		t.Fatalf("create: %v %v", sb, err)
	}
	if len(keys) != 3 || keys[0] == "" || keys[1] != keys[0] || keys[2] != keys[0] {
		t.Fatalf("keys sent: %q", keys)
	}
	_, _ = c.Fork(context.Background(), "sb1", api.ForkRequest{}) // answered with a sandbox: only the key matters
	if keys[3] == keys[0] {
		t.Fatal("a second create reused the first one's key")
	}
	ctx := WithIdempotencyKey(context.Background(), "mine")
	if _, err := c.CreateSnapshot(ctx, "sb1", api.CreateSnapshotRequest{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.CreateVolume(ctx, api.CreateVolumeRequest{Name: "v"}); err != nil {
		t.Fatal(err)
	}
	if keys[4] != "mine" || keys[5] != "mine" {
		t.Fatalf("caller's key not sent: %q", keys[4:])
	}

	// Answers are final: a 4xx or 500 is not retried.
	keys = nil
	c = newTestClient(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		keys = append(keys, r.Header.Get(IdempotencyHeader))
		mu.Unlock()
		writeJSON(w, 500, api.ErrorBody{Error: api.Error{Code: "internal", Message: "no"}})
	}), "")
	if _, err := c.CreateSandbox(context.Background(), api.CreateSandboxRequest{}); err == nil || len(keys) != 1 {
		t.Fatalf("500: %v after %d attempts", err, len(keys))
	}
}

// TestCreateWithNoDaemonFailsAtOnce: a daemon that is not there on the
// first attempt is reported without retries.
func TestCreateWithNoDaemonFailsAtOnce(t *testing.T) {
	c, err := New("unix://"+filepath.Join(t.TempDir(), "none.sock"), "")
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_, err = c.CreateSandbox(context.Background(), api.CreateSandboxRequest{})
	var ce *ConnectError
	if !errors.As(err, &ce) || time.Since(start) > 200*time.Millisecond {
		t.Fatalf("err = %v after %s", err, time.Since(start))
	}
}
