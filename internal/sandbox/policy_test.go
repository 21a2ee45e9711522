package sandbox

import (
	"testing"
	"time"
)

func TestNextPolicyAction(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	base := func() *Sandbox {
		return &Sandbox{State: StateRunning, CreatedAt: t0, StartedAt: t0, LastActivityAt: t0}
	}
	cases := []struct {
		name     string
		mut      func(*Sandbox)
		activity time.Time
		want     Due
		none     bool
	}{
		{name: "nothing", mut: func(*Sandbox) {}, none: true},
		{name: "ephemeral timeout deletes", mut: func(s *Sandbox) { s.Spec.Timeout = time.Minute },
			want: Due{ActionDelete, t0.Add(time.Minute), "timeout"}},
		{name: "persistent timeout stops", mut: func(s *Sandbox) { s.Spec.Timeout = time.Minute; s.Spec.Persistent = true },
			want: Due{ActionStop, t0.Add(time.Minute), "timeout"}},
		{name: "idle pauses by default", mut: func(s *Sandbox) { s.Spec.Policy.IdleTimeout = 2 * time.Second },
			want: Due{ActionPause, t0.Add(2 * time.Second), "idle"}},
		{name: "idle counts from the latest activity", mut: func(s *Sandbox) {
			s.Spec.Policy.IdleTimeout = 2 * time.Second
			s.Spec.Policy.OnIdle = ActionStop
		}, activity: t0.Add(10 * time.Second), want: Due{ActionStop, t0.Add(12 * time.Second), "idle"}},
		{name: "idle does not apply when paused", mut: func(s *Sandbox) {
			s.Spec.Policy.IdleTimeout = time.Second
			s.State = StatePaused
		}, none: true},
		{name: "earliest wins", mut: func(s *Sandbox) {
			s.Spec.Policy.IdleTimeout = time.Hour
			s.Spec.Policy.MaxAge = time.Minute
		}, want: Due{ActionDelete, t0.Add(time.Minute), "max_age"}},
		{name: "max age stop ignores stopped", mut: func(s *Sandbox) {
			s.Spec.Policy.MaxAge = time.Minute
			s.Spec.Policy.OnMaxAge = ActionStop
			s.State = StateStopped
		}, none: true},
		{name: "retention after stop", mut: func(s *Sandbox) {
			s.State = StateStopped
			s.StoppedAt = t0.Add(time.Hour)
			s.Spec.Policy.Retention = 24 * time.Hour
		}, want: Due{ActionDelete, t0.Add(25 * time.Hour), "retention"}},
		{name: "quarantine holds everything but nothing", mut: func(s *Sandbox) {
			s.State = StateQuarantined
			s.Spec.Policy.MaxAge = time.Minute
			s.Spec.Timeout = time.Minute
		}, none: true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			sb := base()
			c.mut(sb)
			got, ok := Next(sb, c.activity)
			if c.none {
				if ok {
					t.Fatalf("want none, got %+v", got)
				}
				return
			}
			if !ok || got != c.want {
				t.Fatalf("got %+v %v, want %+v", got, ok, c.want)
			}
		})
	}
}
