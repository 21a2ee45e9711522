package engine

import (
	"context"
	"fmt"
	"time"

	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/internal/sandbox"
)

// MaxTimeout bounds the hard lifetime a sandbox may be given from now.
const MaxTimeout = 30 * 24 * time.Hour

// TimeoutRequest is a sandbox's hard timeout set d from now (0 lifts
// it): the one rule set of every door's call that sets it (the E2B door's
// timeout, connect and resume, through the access layer's gate) and of
// SetTimeout itself.
type TimeoutRequest struct {
	Timeout time.Duration
}

// Validate checks the timeout: 0 (none) up to MaxTimeout.
func (r *TimeoutRequest) Validate() error {
	if r.Timeout < 0 || r.Timeout > MaxTimeout {
		return errdefs.Invalid("timeout must be between 0 and %s", MaxTimeout)
	}
	return nil
}

// SetTimeout moves the hard timeout of a running or paused sandbox to d
// from now (its deadline counts from its start, so the stored timeout
// becomes the time since then plus d); d == 0 removes it. The change and
// its event are one write; the reconciler acts on the new deadline.
func (m *Engine) SetTimeout(ctx context.Context, ref string, d time.Duration, actor string) (*sandbox.Sandbox, error) {
	if err := (&TimeoutRequest{Timeout: d}).Validate(); err != nil {
		return nil, err
	}
	return m.op(ctx, ref, func(ctx context.Context, sb *sandbox.Sandbox) error {
		return m.storeOwn(ctx, sb, func(sb *sandbox.Sandbox) ([]*sandbox.Event, error) {
			if sb.State != sandbox.StateRunning && sb.State != sandbox.StatePaused {
				return nil, sandbox.ErrWrongState("set the timeout of", sb)
			}
			msg := "timeout removed"
			sb.Spec.Timeout = 0
			if d > 0 {
				since := m.now().Sub(sb.StartedAt)
				if sb.StartedAt.IsZero() || since < 0 {
					since = 0
				}
				// Whole seconds, never below what was asked.
				sb.Spec.Timeout = (since + d + time.Second - 1).Truncate(time.Second)
				msg = fmt.Sprintf("timeout set to %s from now", d)
			}
			return []*sandbox.Event{{SandboxID: sb.ID, Type: "timeout", Actor: actor,
				Cause: sandbox.CauseUser, Outcome: "ok", Message: msg}}, nil
		})
	})
}
