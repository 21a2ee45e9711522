package manager_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/berth-sh/berth/internal/audit"
	"github.com/berth-sh/berth/internal/manager"
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
	e := newEnv(t, func(e *env) {
		e.cfg.Audit = func(ctx context.Context, tenant, component, action, target string) func(error) {
			return log.Load().System(ctx, tenant, component, action, target)
		}
	})
	key := []byte("manager-test-audit-key-0123456789abcdef")
	log.Store(audit.New(e.st, key, nil))

	idle := e.create(manager.CreateRequest{Persistent: true, Policy: sandbox.Policy{IdleTimeout: 30 * time.Second, OnIdle: sandbox.ActionStop}})
	crashed := e.create(manager.CreateRequest{})
	e.node.Crash(crashed.ID)
	e.waitState(crashed.ID, sandbox.StateDeleted)
	e.clock.Advance(31 * time.Second)
	e.waitState(idle.ID, sandbox.StateStopped)

	want := map[string]struct{ actor, action string }{
		idle.ID:    {"system:policy", "policy.stop"},
		crashed.ID: {"system:reconciler", "reconciler.cleanup"},
	}
	for id, w := range want {
		var es []*store.AuditEntry
		deadline := time.Now().Add(10 * time.Second)
		for time.Now().Before(deadline) {
			var err error
			es, _, err = e.st.ListAudit(e.ctx, store.AuditFilter{Owner: store.AnyOwner, Target: id}, store.Page{})
			if err != nil {
				t.Fatal(err)
			}
			if len(es) == 1 && es[0].Result != store.AuditPending {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		if len(es) != 1 || es[0].Actor != w.actor || es[0].Action != w.action || es[0].Result != "ok" || es[0].Tenant != "" {
			t.Errorf("%s: entries %+v; want one %s by %s, ok", id, es, w.action, w.actor)
		}
	}
	rep, err := log.Load().Verify(e.ctx, store.AnyOwner)
	if err != nil || !rep.OK || rep.Checked != 4 {
		t.Errorf("Verify = %+v, %v; want ok with 4 records", rep, err)
	}
}
