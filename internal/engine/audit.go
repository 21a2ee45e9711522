package engine

import (
	"context"

	"github.com/berth-sh/berth/internal/sandbox"
)

// Auditor records a system action — one the daemon takes on its own: a
// policy's pause, stop or delete, the reconciler's cleanup, the watchdog's
// kill — before it takes effect, with the actor "system:<component>", and
// returns the function that completes it with its error (the daemon's is
// audit.Log.System).
type Auditor func(ctx context.Context, tenant, component, action, target string) func(error)

// auditSystem begins the record of a system action on sb (in sb's tenant);
// call the result with the action's error. Without an Auditor it records
// nothing.
func (m *Engine) auditSystem(ctx context.Context, sb *sandbox.Sandbox, component, action string) func(error) {
	return m.auditSystemOn(ctx, sb.Tenant, component, action, sb.ID)
}

// auditSystemOn is AuditSystem for a target that is no sandbox record (an
// orphan on the host).
func (m *Engine) auditSystemOn(ctx context.Context, tenant, component, action, target string) func(error) {
	if m.cfg.Audit == nil {
		return func(error) {}
	}
	return m.cfg.Audit(ctx, tenant, component, action, target)
}
