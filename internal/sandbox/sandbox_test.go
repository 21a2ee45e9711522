package sandbox

import (
	"errors"
	"testing"
	"time"

	"github.com/berth-sh/berth/internal/errdefs"
)

func TestTransitions(t *testing.T) {
	cases := []struct {
		from, to State
		ok       bool
	}{
		{StateCreating, StateRunning, true},
		{StateRunning, StatePaused, true},
		{StatePaused, StateRunning, true},
		{StateRunning, StateStopping, true},
		{StateStopping, StateStopped, true},
		{StateStopped, StateStarting, true},
		{StateStarting, StateRunning, true},
		{StateRunning, StateDeleting, true},
		{StateDeleting, StateDeleted, true},
		{StateDeleting, StateDeleting, false},
		{StateDeleted, StateDeleting, false},
		{StateDeleted, StateRunning, false},
		{StateCreating, StatePaused, false},
		{StateStopped, StateRunning, false},
		{StateFailed, StateRunning, false},
		{StateFailed, StateDeleting, true},
		{StateRunning, StateFailed, true},
		{StateRunning, StateQuarantined, true},
		{StateQuarantined, StateRunning, true},
	}
	for _, c := range cases {
		if got := CanTransition(c.from, c.to); got != c.ok {
			t.Errorf("%s -> %s: got %v want %v", c.from, c.to, got, c.ok)
		}
	}
}

func TestTransitionRecordsAndRefuses(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	sb := &Sandbox{ID: "x", State: StateCreating}
	if err := sb.Transition(StateRunning, CauseUser, "create", now); err != nil {
		t.Fatal(err)
	}
	if sb.StartedAt != now || sb.Cause != CauseUser || sb.UpdatedAt != now {
		t.Fatalf("not recorded: %+v", sb)
	}
	err := sb.Transition(StateStarting, CauseUser, "start", now)
	if !errors.Is(err, errdefs.ErrConflict) {
		t.Fatalf("wrong-state transition: %v", err)
	}
	if sb.State != StateRunning {
		t.Fatal("refused transition changed the state")
	}
	sb.Transition(StateDeleting, CausePolicy, "timeout", now)
	sb.Transition(StateDeleted, CausePolicy, "timeout", now.Add(time.Second))
	if sb.DeletedAt != now.Add(time.Second) {
		t.Fatal("deleted_at not set")
	}
}

func TestDeadline(t *testing.T) {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	sb := &Sandbox{StartedAt: start, Spec: Spec{Timeout: 10 * time.Second}}
	if d, ok := sb.Deadline(); !ok || d != start.Add(10*time.Second) {
		t.Fatalf("deadline %v %v", d, ok)
	}
	if sb.Expired(start.Add(9 * time.Second)) {
		t.Fatal("expired early")
	}
	if !sb.Expired(start.Add(10 * time.Second)) {
		t.Fatal("not expired at the deadline")
	}
	sb.Spec.Timeout = 0
	if _, ok := sb.Deadline(); ok || sb.Expired(start.Add(time.Hour*1000)) {
		t.Fatal("no timeout must mean no deadline")
	}
}

func TestSpecValidate(t *testing.T) {
	good := Spec{Resources: DefaultResources}
	if err := good.Validate(); err != nil {
		t.Fatal(err)
	}
	bad := []func(*Spec){
		func(s *Spec) { s.Resources.CPUs = 0 },
		func(s *Spec) { s.Resources.CPUs = 1000 },
		func(s *Spec) { s.Resources.MemoryBytes = 1 },
		func(s *Spec) { s.Resources.Pids = 1 },
		func(s *Spec) { s.Timeout = -1 },
		func(s *Spec) { s.Env = map[string]string{"1BAD": "x"} },
		func(s *Spec) { s.Env = map[string]string{"A=B": "x"} },
		func(s *Spec) { s.Labels = map[string]string{"": "x"} },
		func(s *Spec) { s.Network = "host" },
		func(s *Spec) { s.Workdir = "relative" },
	}
	for i, mut := range bad {
		s := good
		mut(&s)
		if err := s.Validate(); !errors.Is(err, errdefs.ErrInvalid) {
			t.Errorf("case %d: want invalid, got %v", i, err)
		}
	}
}

func TestNameAndKeyCharsets(t *testing.T) {
	for n, ok := range map[string]bool{"a": true, "web-1.x_y": true, "-a": false, "": false, "a b": false,
		"a/b": false, string(make([]byte, 64)): false, "Z9": true} {
		if ValidName(n) != ok {
			t.Errorf("ValidName(%q) = %v", n, !ok)
		}
	}
	for k, ok := range map[string]bool{"PATH": true, "_x1": true, "1X": false, "A-B": false, "": false} {
		if validEnvKey(k) != ok {
			t.Errorf("validEnvKey(%q) = %v", k, !ok)
		}
	}
	for k, ok := range map[string]bool{"team": true, "a.b/c-d_e": true, "/x": false, "": false} {
		if validLabelKey(k) != ok {
			t.Errorf("validLabelKey(%q) = %v", k, !ok)
		}
	}
}

func TestFormatBytes(t *testing.T) {
	for n, want := range map[int64]string{0: "0 B", 1023: "1023 B", 1024: "1.0 KiB", 1536: "1.5 KiB", 5 << 30: "5.0 GiB"} {
		if got := FormatBytes(n); got != want {
			t.Errorf("FormatBytes(%d) = %q, want %q", n, got, want)
		}
	}
}
