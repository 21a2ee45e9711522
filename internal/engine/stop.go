package engine

import (
	"context"
	"time"

	"github.com/berth-sh/berth/internal/sandbox"
)

// Graceful stop. Before a running sandbox's processes are killed (the
// backend's Stop), the agent is asked to send them the template's stop
// signal (its image's STOPSIGNAL; SIGTERM when it has none) and to answer
// once they are gone (wire.OpShutdown). The wait is bounded by the
// daemon's own deadline, grace plus stopAnswerSlack, never by the agent:
// whatever it answers, or if it does not, the kill follows, so a hostile
// agent can only make a stop shorter. Stop and the idle policy's stop use
// the grace (DefaultStopGrace, or the API's/CLI's timeout); delete of a
// running sandbox does not wait: it is a removal, and a process that
// wants to save something has stop for that.
const (
	DefaultStopGrace = 10 * time.Second
	MaxStopGrace     = 10 * time.Minute
	stopAnswerSlack  = time.Second
)

// signalStop runs the graceful part of a stop of sb and returns when its
// processes are gone, the agent answered, or the daemon's deadline passed.
func (m *Engine) signalStop(ctx context.Context, sb *sandbox.Sandbox, grace time.Duration) {
	sig := m.stopSignal(ctx, sb)
	sctx, cancel := context.WithTimeout(ctx, grace+stopAnswerSlack)
	defer cancel()
	begin := time.Now()
	left, err := m.node.Agent(sb).Shutdown(sctx, sig, grace)
	if err != nil {
		m.log.Info("graceful stop: no answer from the agent; killing", "sandbox", sb.ID, "signal", sig,
			"after", time.Since(begin).Round(time.Millisecond), "err", err)
		return
	}
	m.log.Debug("graceful stop", "sandbox", sb.ID, "signal", sig, "remaining", left,
		"after", time.Since(begin).Round(time.Millisecond))
}

// stopSignal is the stop signal of sb's template, SIGTERM when it has
// none (or the template is gone).
func (m *Engine) stopSignal(ctx context.Context, sb *sandbox.Sandbox) string {
	if sb.Spec.Template != "" {
		if t, err := m.store.ResolveTemplate(ctx, sb.Tenant, sb.Spec.Template); err == nil && t.Config.StopSignal != "" {
			return t.Config.StopSignal
		}
	}
	return "SIGTERM"
}
