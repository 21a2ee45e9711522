package sqlite

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/berth-sh/berth/internal/sandbox"
	"github.com/berth-sh/berth/internal/store"
)

// The writes a burst of creates makes most, from many goroutines at once
// as a burst's requests make them (group commit batches them): an audit
// record (two per audited call) and an event (one per transition and
// exec). `go test -run X -bench . ./internal/store/sqlite/`.

func benchStore(b *testing.B) store.Store {
	s, err := Open(b.Context(), filepath.Join(b.TempDir(), "berth.db"))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	return s
}

func BenchmarkAppendAudit(b *testing.B) {
	s := benchStore(b)
	seal := func(r *store.AuditRecord) string { return "seal" }
	now := time.Now()
	b.SetParallelism(32)
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			r := &store.AuditRecord{Kind: store.AuditBegin, Time: now, Actor: "local", Action: "POST /v1/sandboxes"}
			if err := s.AppendAudit(b.Context(), r, seal); err != nil {
				b.Error(err)
			}
		}
	})
}

func BenchmarkAppendEvent(b *testing.B) {
	s := benchStore(b)
	now := time.Now()
	sb := &sandbox.Sandbox{ID: "sb1", State: sandbox.StateCreating, Node: "n", CreatedAt: now, UpdatedAt: now}
	if err := s.CreateSandbox(b.Context(), sb); err != nil {
		b.Fatal(err)
	}
	b.SetParallelism(32)
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			ev := &sandbox.Event{SandboxID: sb.ID, Time: now, Type: "exec", Outcome: "ok", Message: "true exited 0"}
			if err := s.AppendEvent(b.Context(), ev); err != nil {
				b.Error(err)
			}
		}
	})
}
