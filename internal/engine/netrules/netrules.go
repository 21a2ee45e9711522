// Package netrules is the egress-rules feature over the engine's core: a
// sandbox's network identity and rules, changes to them (applied at once
// by the node backend), and its flow log.
package netrules

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/berth-sh/berth/internal/engine"
	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/internal/node"
	"github.com/berth-sh/berth/internal/sandbox"
	"github.com/berth-sh/berth/internal/store"
)

// Rules serves sandboxes' network rules and flow logs.
type Rules struct {
	e     *engine.Engine
	store store.Store
	node  node.Backend
}

// New returns the network-rules feature of e.
func New(e *engine.Engine) *Rules { return &Rules{e: e, store: e.Store(), node: e.Backend()} }

// NetworkRules returns a sandbox's network identity and rules.
func (m *Rules) NetworkRules(ctx context.Context, ref string) (*NetworkRules, error) {
	sb, err := m.e.Get(ctx, ref)
	if err != nil {
		return nil, err
	}
	return rulesOf(sb), nil
}

func rulesOf(sb *sandbox.Sandbox) *NetworkRules {
	return &NetworkRules{Mode: sb.Spec.Network, IPv4: sb.Spec.IPv4, IPv6: sb.Spec.IPv6, Allow: append([]string{}, sb.Spec.Allow...)}
}

// canonical returns the form of rule two spellings of it share.
func (m *Rules) canonical(rule string) (string, error) { return m.node.CanonicalRule(rule) }

// UpdateNetworkRules adds and removes egress rules; a running sandbox's
// take effect at once, without a restart.
func (m *Rules) UpdateNetworkRules(ctx context.Context, ref string, req *Request, actor string) (*NetworkRules, error) {
	var out *NetworkRules
	_, err := m.e.Op(ctx, ref, func(ctx context.Context, sb *sandbox.Sandbox) error {
		if sb.Spec.Network != "egress" {
			return errdefs.Invalid("sandbox %s has network mode %s: rules apply to mode egress", sb.ID, sb.Spec.Network)
		}
		allow := slices.Clone(sb.Spec.Allow)
		for _, a := range req.Allow {
			r, err := m.canonical(a)
			if err != nil {
				return err
			}
			if !slices.ContainsFunc(allow, func(s string) bool { x, _ := m.canonical(s); return x == r }) {
				allow = append(allow, a)
			}
		}
		for _, d := range req.Deny {
			r, err := m.canonical(d)
			if err != nil {
				return err
			}
			allow = slices.DeleteFunc(allow, func(s string) bool { x, _ := m.canonical(s); return x == r })
		}
		if err := m.node.CheckRules(allow); err != nil {
			return err
		}
		prev := sb.Spec.Allow
		sb.Spec.Allow = allow
		if err := m.store.UpdateSandbox(ctx, sb); err != nil {
			sb.Spec.Allow = prev
			return err
		}
		if sb.State == sandbox.StateRunning || sb.State == sandbox.StatePaused {
			if err := m.node.SetRules(ctx, sb, false); err != nil {
				return fmt.Errorf("applying rules: %w", err)
			}
		}
		m.e.Event(ctx, &sandbox.Event{SandboxID: sb.ID, Type: "network.rules", Actor: actor, Cause: sandbox.CauseUser,
			Outcome: "ok", Message: "allow: " + strings.Join(allow, ", ")})
		out = rulesOf(sb)
		return nil
	})
	return out, err
}

// Flows returns a sandbox's stored flow log after sequence number after.
func (m *Rules) Flows(ctx context.Context, ref string, after uint64, limit int) ([]Flow, error) {
	sb, err := m.e.Get(ctx, ref)
	if err != nil {
		return nil, err
	}
	fs, err := m.store.ListFlows(ctx, engine.Owner(ctx), sb.ID, int64(after), limit)
	if err != nil {
		return nil, err
	}
	out := make([]Flow, 0, len(fs))
	for _, f := range fs {
		out = append(out, Flow{Seq: uint64(f.ID), Time: f.Time, Kind: f.Kind, Proto: f.Proto, Src: f.Src,
			Dst: f.Dst, Name: f.Name, Decision: f.Decision, Rule: f.Rule})
	}
	return out, nil
}
