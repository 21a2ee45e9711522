package engine

import (
	"context"
	"time"
)

// TenantTemplateLabel is the template measures name a tenant's own
// template by: tenants make templates at will, and their names are not the
// operator's to see as series.
const TenantTemplateLabel = "tenant"

// ImageTemplateLabel is the template measures name a registry image's
// record by (create --image): one per digest, thousands for a harness
// that runs an image per task, so never a series each.
const ImageTemplateLabel = "image"

// Recorder receives the engine's measures as they happen (package metrics
// implements it over Prometheus; nil in Config: none). Labels are small
// closed sets or template and class names; never a sandbox id.
type Recorder interface {
	// Created: a create succeeded, its agent answering d after the
	// request; path is cold, pool or snapshot; template is a shared
	// catalogue name, TenantTemplateLabel or ImageTemplateLabel.
	Created(template, class, path string, d time.Duration)
	// CreateFailed: a create was refused or failed with this API error code.
	CreateFailed(code string)
	// ExecDone: an exec ended; outcome is ok, nonzero, timeout or error.
	ExecDone(outcome string, d time.Duration)
	// Resumed: a sandbox is running again d after it was asked; kind is
	// unpause, start, wake or pool_claim.
	Resumed(kind string, d time.Duration)
	// CleanedUp: a deletion was verified complete d after it was asked for.
	CleanedUp(cause string, d time.Duration)
	// TeardownFailed: a teardown step failed; incomplete: the deletion is
	// left to the reconciler.
	TeardownFailed(incomplete bool)
	// Orphan: a fixing sweep found an orphan of kind, and removed it or not.
	Orphan(kind string, removed bool)
	// PolicyAction: a lifecycle policy acted.
	PolicyAction(policy, action string)
	// Egress: a flow-log decision (allow, deny).
	Egress(decision string)
}

type nopRecorder struct{}

func (nopRecorder) Created(string, string, string, time.Duration) {}
func (nopRecorder) CreateFailed(string)                           {}
func (nopRecorder) ExecDone(string, time.Duration)                {}
func (nopRecorder) Resumed(string, time.Duration)                 {}
func (nopRecorder) CleanedUp(string, time.Duration)               {}
func (nopRecorder) TeardownFailed(bool)                           {}
func (nopRecorder) Orphan(string, bool)                           {}
func (nopRecorder) PolicyAction(string, string)                   {}
func (nopRecorder) Egress(string)                                 {}

// execOutcome names how an exec ended, for ExecDone.
func execOutcome(exit Exit, err error) string {
	switch {
	case err != nil:
		return "error"
	case exit.TimedOut:
		return "timeout"
	case exit.Code == 0:
		return "ok"
	default:
		return "nonzero"
	}
}

type cleanupFromKey struct{}

// WithCleanupFrom returns a context under which a deletion's cleanup lag
// counts from at (a policy's deadline) rather than from the call.
func WithCleanupFrom(ctx context.Context, at time.Time) context.Context {
	return context.WithValue(ctx, cleanupFromKey{}, at)
}

// cleanupSince is the cleanup lag of a deletion begun at begin.
func cleanupSince(ctx context.Context, begin time.Time) time.Duration {
	if at, ok := ctx.Value(cleanupFromKey{}).(time.Time); ok && !at.IsZero() && at.Before(begin) {
		return time.Since(begin) + begin.Sub(at)
	}
	return time.Since(begin)
}
