package sandbox

import "time"

// Due is the next thing the reconciler must do to a sandbox, and when.
type Due struct {
	Action Action
	At     time.Time
	// Policy names the rule: "timeout", "idle", "max_age", "retention".
	Policy string
}

// Next returns the earliest policy action due for sb, computed only from
// its stored timestamps (so it survives restarts), and false if none
// applies. lastActivity is the latest activity known, which may be newer
// than the stored sb.LastActivityAt.
func Next(sb *Sandbox, lastActivity time.Time) (Due, bool) {
	var best Due
	found := false
	consider := func(d Due) {
		if !found || d.At.Before(best.At) {
			best, found = d, true
		}
	}
	p := sb.Spec.Policy
	switch sb.State {
	case StateRunning, StatePaused:
		if d, ok := sb.Deadline(); ok {
			a := ActionDelete
			if sb.Spec.Persistent {
				a = ActionStop // a persistent sandbox keeps its state
			}
			consider(Due{Action: a, At: d, Policy: "timeout"})
		}
	}
	if sb.State == StateRunning && p.IdleTimeout > 0 {
		since := lastActivity
		if since.IsZero() || sb.StartedAt.After(since) {
			since = sb.StartedAt
		}
		a := p.OnIdle
		if a == ActionNone {
			a = ActionPause
		}
		if !since.IsZero() {
			consider(Due{Action: a, At: since.Add(p.IdleTimeout), Policy: "idle"})
		}
	}
	if p.MaxAge > 0 && !sb.CreatedAt.IsZero() {
		a := p.OnMaxAge
		if a == ActionNone {
			a = ActionDelete
		}
		switch {
		case a == ActionDelete && sb.State != StateDeleting && sb.State != StateDeleted && sb.State != StateQuarantined:
			consider(Due{Action: a, At: sb.CreatedAt.Add(p.MaxAge), Policy: "max_age"})
		case a == ActionStop && (sb.State == StateRunning || sb.State == StatePaused):
			consider(Due{Action: a, At: sb.CreatedAt.Add(p.MaxAge), Policy: "max_age"})
		}
	}
	if sb.State == StateStopped && p.Retention > 0 && !sb.StoppedAt.IsZero() {
		consider(Due{Action: ActionDelete, At: sb.StoppedAt.Add(p.Retention), Policy: "retention"})
	}
	return best, found
}
