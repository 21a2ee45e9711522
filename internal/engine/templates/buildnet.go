package templates

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/internal/network/egressrule"
	"github.com/berth-sh/berth/internal/node"
	"github.com/berth-sh/berth/internal/store"
)

// Builds with a network: a build step may run with network mode egress
// and allow rules, in a build sandbox under the same egress policy and
// flow log as any sandbox. The builder taps the flow hook for its build
// sandboxes, so a failed step's error names what the policy denied and the
// template's build record keeps the step's flows.

// BuildNetwork is a build step's network: mode "" or "none" (the
// default: loopback only) or "egress" with Allow rules.
type BuildNetwork struct {
	Mode  string
	Allow []string
}

func (n BuildNetwork) egress() bool { return n.Mode == "egress" }

// check refuses a mode other than none and egress, and rules without
// egress or that the backend cannot parse.
func (m *Builder) checkNetwork(n BuildNetwork) error {
	switch n.Mode {
	case "", "none":
		if len(n.Allow) > 0 {
			return errdefs.Invalid("allow rules need network mode egress (--network egress)")
		}
	case "egress":
		if err := egressrule.Check(n.Allow); err != nil {
			return errdefs.Invalid("build network: %s", errdefs.Message(err))
		}
	default:
		return errdefs.Invalid("build network must be none or egress, got %q", n.Mode)
	}
	return nil
}

// flowTap collects the flows of one build sandbox.
type flowTap struct {
	mu      sync.Mutex
	flows   []store.Flow
	dropped int
	denied  chan struct{} // closed at the first denial
	once    sync.Once
}

// ObserveFlow is the builder's side of the backend's flow hook: a flow of
// a build sandbox is kept for its step's record. It never blocks.
func (m *Builder) ObserveFlow(f node.Flow) {
	m.tapMu.Lock()
	t := m.taps[f.SandboxID]
	m.tapMu.Unlock()
	if t == nil {
		return
	}
	t.mu.Lock()
	if len(t.flows) < store.MaxBuildFlows {
		t.flows = append(t.flows, store.Flow{SandboxID: f.SandboxID, Time: f.Time, Kind: f.Kind, Proto: f.Proto,
			Src: f.Src, Dst: f.Dst, Name: f.Name, Decision: f.Decision, Rule: f.Rule})
	} else {
		t.dropped++
	}
	t.mu.Unlock()
	if f.Decision == node.Deny {
		t.once.Do(func() { close(t.denied) })
	}
}

func (m *Builder) tap(id string) (*flowTap, func()) {
	t := &flowTap{denied: make(chan struct{})}
	m.tapMu.Lock()
	if m.taps == nil {
		m.taps = map[string]*flowTap{}
	}
	m.taps[id] = t
	m.tapMu.Unlock()
	return t, func() {
		m.tapMu.Lock()
		delete(m.taps, id)
		m.tapMu.Unlock()
	}
}

// snapshot returns the flows seen so far.
func (t *flowTap) snapshot() ([]store.Flow, int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return slices.Clone(t.flows), t.dropped
}

// denialSettle is how long a failed step's error waits for a denial the
// kernel logged but the flow reader has not handed over yet (a refused
// connection can fail the step before its log record is read). DNS
// denials are recorded before the answer and need no wait.
const denialSettle = 300 * time.Millisecond

// explainDenials adds to a failed step's error the flows the policy
// denied, so the user sees which destination to allow.
func (t *flowTap) explainDenials(ctx context.Context, err error) error {
	select {
	case <-t.denied:
	case <-ctx.Done():
	case <-time.After(denialSettle):
	}
	flows, _ := t.snapshot()
	var denied []string
	seen := map[string]bool{}
	for _, f := range flows {
		if f.Decision != node.Deny {
			continue
		}
		d := describeFlow(f)
		if !seen[d] {
			seen[d] = true
			denied = append(denied, d)
		}
	}
	if len(denied) == 0 {
		return err
	}
	const shown = 5
	more := ""
	if len(denied) > shown {
		more = fmt.Sprintf(" and %d more", len(denied)-shown)
		denied = denied[:shown]
	}
	return annotate(err, "", fmt.Sprintf("; the build's network policy denied %s%s (allow it with --allow)", strings.Join(denied, ", "), more))
}

// describeFlow names a flow as a user reads it: "dns pkg.test
// (notallowed)", "tcp 203.0.113.5:80 (pkg.test, norule)".
func describeFlow(f store.Flow) string {
	if f.Kind == "dns" {
		return fmt.Sprintf("dns %s (%s)", f.Name, f.Rule)
	}
	if f.Name != "" {
		return fmt.Sprintf("%s %s (%s, %s)", f.Proto, f.Dst, f.Name, f.Rule)
	}
	return fmt.Sprintf("%s %s (%s)", f.Proto, f.Dst, f.Rule)
}

// annotate adds to err's user-visible message (errdefs.Message shows
// only the innermost categorised error's): prefix before it, suffix
// after, keeping its category, so a build's error names its step and
// cause whatever door shows it.
func annotate(err error, prefix, suffix string) error {
	var e *errdefs.Error
	if errors.As(err, &e) {
		c := *e
		c.Msg = prefix + e.Msg + suffix
		return &c
	}
	return fmt.Errorf("%s%w%s", prefix, err, suffix)
}
