package engine_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/berth-sh/berth/internal/audit"
	"github.com/berth-sh/berth/internal/engine"
	"github.com/berth-sh/berth/internal/engine/enginetest"
	"github.com/berth-sh/berth/internal/sandbox"
	"github.com/berth-sh/berth/internal/store"
)

// TestSystemActionsAudited: a policy's idle stop and the reconciler's
// cleanup of a sandbox whose processes died are recorded in the real
// audit log with the system actor, in the sandbox's tenant, completed
// with their outcome, and the chain verifies.
func TestSystemActionsAudited(t *testing.T) {
	t.Parallel()
	var log atomic.Pointer[audit.Log]
	e := newEnv(t, func(e *enginetest.Env) {
		e.Config.Audit = func(ctx context.Context, tenant, component, action, target string) func(error) {
			return log.Load().System(ctx, tenant, component, action, target)
		}
	})
	key := []byte("manager-test-audit-key-0123456789abcdef")
	log.Store(audit.New(e.Store, key, nil))

	idle := e.Create(engine.CreateRequest{Persistent: true, Policy: sandbox.Policy{IdleTimeout: 30 * time.Second, OnIdle: sandbox.ActionStop}})
	crashed := e.Create(engine.CreateRequest{})
	e.Node.Crash(crashed.ID)
	e.WaitState(crashed.ID, sandbox.StateDeleted)
	e.Clock.Advance(31 * time.Second)
	e.WaitState(idle.ID, sandbox.StateStopped)

	want := map[string]struct{ actor, action string }{
		idle.ID:    {"system:policy", "policy.stop"},
		crashed.ID: {"system:reconciler", "reconciler.cleanup"},
	}
	// Under load a teardown may be retried (the first attempt failing is
	// itself audited): every entry must be the system's own action, the
	// newest ok.
	total := 0
	for id, w := range want {
		var es []*store.AuditEntry
		deadline := time.Now().Add(10 * time.Second)
		for time.Now().Before(deadline) {
			var err error
			es, _, err = e.Store.ListAudit(e.Ctx, store.AuditFilter{Owner: store.AnyOwner, Target: id}, store.Page{})
			if err != nil {
				t.Fatal(err)
			}
			if len(es) >= 1 && es[len(es)-1].Result == "ok" {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		total += len(es)
		for i, en := range es {
			if en.Actor != w.actor || en.Action != w.action || en.Tenant != "" || en.Result == store.AuditPending {
				t.Errorf("%s: entry %d %+v; want %s by %s", id, i, en, w.action, w.actor)
			}
		}
		if len(es) == 0 || es[len(es)-1].Result != "ok" {
			t.Errorf("%s: %d entries, the newest not ok; want %s by %s, ok", id, len(es), w.action, w.actor)
		}
	}
	rep, err := log.Load().Verify(e.Ctx, store.AnyOwner)
	// Each action is two records: its start and its outcome.
	if err != nil || !rep.OK || rep.Checked != int64(2*total) {
		t.Errorf("Verify = %+v, %v; want ok with %d records", rep, err, 2*total)
	}
}
