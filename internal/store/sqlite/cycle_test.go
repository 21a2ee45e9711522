package sqlite

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/berth-sh/berth/internal/sandbox"
	"github.com/berth-sh/berth/internal/store"
)

// cycle stores one create/delete cycle as the manager does: a record with
// its creating event, running, deleting, then the tombstone.
func cycle(ctx context.Context, t *testing.T, s store.Store, i int, now time.Time) {
	t.Helper()
	sb := &sandbox.Sandbox{ID: fmt.Sprintf("%016x", i), State: sandbox.StateCreating, Node: "node-a",
		CreatedAt: now, UpdatedAt: now, Cause: sandbox.CauseUser,
		Spec: sandbox.Spec{Template: "base", Layers: []string{"sha256:6ad9f6c0e5d1b1fa9a3c2b7e0e3b0c8a1f5d2e4c6b8a0d2f4e6c8b0a2d4f6e8c"},
			Resources: sandbox.Resources{CPUs: 1, MemoryBytes: 512 << 20, Pids: 1024, DiskBytes: 10 << 30},
			Env:       map[string]string{"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"},
			Network:   "none", Runtime: "runc", Workdir: "/root", Timeout: time.Hour}}
	ev := func(from, to sandbox.State) *sandbox.Event {
		return &sandbox.Event{Time: now, Type: "state", From: from, To: to, Actor: "local", Cause: sandbox.CauseUser, Outcome: "ok"}
	}
	if err := s.CreateSandbox(ctx, sb, ev("", sandbox.StateCreating)); err != nil {
		t.Fatal(err)
	}
	for _, to := range []sandbox.State{sandbox.StateRunning, sandbox.StateDeleting, sandbox.StateDeleted} {
		from := sb.State
		sb.State = to
		if to == sandbox.StateDeleted {
			sb.DeletedAt = now
		}
		if err := s.UpdateSandbox(ctx, sb, ev(from, to)); err != nil {
			t.Fatal(err)
		}
	}
}

func dbSize(t *testing.T, path string) int64 {
	t.Helper()
	var n int64
	for _, p := range []string{path, path + "-wal"} {
		if fi, err := os.Stat(p); err == nil {
			n += fi.Size()
		}
	}
	return n
}
