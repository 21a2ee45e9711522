package engine_test

import (
	"testing"
	"time"

	"github.com/berth-sh/berth/internal/engine"
	"github.com/berth-sh/berth/internal/engine/enginetest"
	"github.com/berth-sh/berth/internal/engine/netrules"
	"github.com/berth-sh/berth/internal/sandbox"
)

// A request with no precondition is not answered 409 "modified
// concurrently" because another writer updated the record between the
// engine's read and its write: the engine's write is its own optimistic
// one, and it reads the record again and retries. (Three such 409s came
// to requests that carried no If-Match.)
func TestUnconditionalUpdatesRetryTheirOwnWrite(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	sb := e.Create(engine.CreateRequest{Network: "egress", Allow: []string{"10.1.0.0/16"}})
	for _, tc := range []struct {
		name string
		do   func() error
	}{
		{"timeout", func() error { _, err := e.Engine.SetTimeout(e.Ctx, sb.ID, time.Hour, "test"); return err }},
		{"touch", func() error { _, err := e.Engine.Touch(e.Ctx, sb.ID, "test"); return err }},
		{"network rules", func() error {
			_, err := e.Engine.UpdateNetworkRules(e.Ctx, sb.ID, &netrules.Request{Allow: []string{"10.2.0.0/16"}}, "test")
			return err
		}},
	} {
		e.Store.FailUpdate(sb.ID, enginetest.ErrRace)
		if err := tc.do(); err != nil {
			t.Fatalf("%s with a concurrent writer: %v", tc.name, err)
		}
	}
	got := e.Get(sb.ID)
	if got.Spec.Timeout == 0 || len(got.Spec.Allow) != 2 || got.State != sandbox.StateRunning {
		t.Fatalf("record after the retried updates: timeout %s allow %v state %s", got.Spec.Timeout, got.Spec.Allow, got.State)
	}
}
