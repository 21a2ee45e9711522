// Package netrules is the egress-rules feature over the engine's core: a
// sandbox's network identity and rules, changes to them (applied at once
// by the node backend), and its flow log.
package netrules

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/berth-sh/berth/internal/engine"
	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/internal/failpoint"
	"github.com/berth-sh/berth/internal/network/egressrule"
	"github.com/berth-sh/berth/internal/node"
	"github.com/berth-sh/berth/internal/sandbox"
	"github.com/berth-sh/berth/internal/store"
)

// Rules serves sandboxes' network rules and flow logs.
type Rules struct {
	e     engine.Host
	store store.Store
	node  node.Backend

	flows        chan node.Flow
	flowsDropped atomic.Int64
}

// New returns the network-rules feature of e and starts its flow-log
// recorder (until e closes); Record is a flow hook of the backend's.
func New(e engine.Host) *Rules {
	r := &Rules{e: e, store: e.Store(), node: e.Backend(), flows: make(chan node.Flow, 4096)}
	e.Go(func(context.Context) { r.recordFlows() })
	e.Hooks().OnFlow(r.Record)
	return r
}

// Record queues a flow for the store (the backend's flow hook). It must not block: under a flood,
// what does not fit is dropped (and counted).
func (m *Rules) Record(f node.Flow) {
	m.e.Recorder().Egress(f.Decision)
	select {
	case m.flows <- f:
	default:
		m.flowsDropped.Add(1)
	}
}

// FlowsDropped counts flow records dropped under a flood.
func (m *Rules) FlowsDropped() int64 { return m.flowsDropped.Load() }

// flowsKept bounds each sandbox's stored flow log; it is kept as long as
// the sandbox's other records.
const flowsKept = 10000

// recordFlows stores flows in batches and turns denials into events,
// rate-limited per sandbox.
func (m *Rules) recordFlows() {
	last := map[string]time.Time{}
	var batch []*store.Flow
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	flush := func() {
		if len(batch) == 0 {
			return
		}
		if err := m.store.AppendFlows(context.Background(), batch, flowsKept); err != nil {
			m.e.Log().Warn("storing flow log", "flows", len(batch), "err", err)
		}
		batch = batch[:0]
	}
	for {
		select {
		case <-m.e.Stopping():
			flush()
			return
		case <-tick.C:
			flush()
		case f := <-m.flows:
			batch = append(batch, &store.Flow{SandboxID: f.SandboxID, Time: f.Time, Kind: f.Kind, Proto: f.Proto,
				Src: f.Src, Dst: f.Dst, Name: f.Name, Decision: f.Decision, Rule: f.Rule})
			if len(batch) >= 500 {
				flush()
			}
			if f.Decision != node.Deny {
				continue
			}
			if t, ok := last[f.SandboxID]; ok && time.Since(t) < 200*time.Millisecond {
				continue
			}
			last[f.SandboxID] = time.Now()
			dst := f.Dst
			if f.Name != "" {
				dst = f.Name + " (" + dst + ")"
			}
			m.e.Event(context.Background(), &sandbox.Event{SandboxID: f.SandboxID, Type: "network.deny", Actor: "network",
				Cause: sandbox.CausePolicy, Outcome: "denied", Message: fmt.Sprintf("%s %s %s: %s", f.Kind, f.Proto, dst, f.Rule)})
		}
	}
}

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
func (m *Rules) canonical(rule string) (string, error) { return egressrule.Canonical(rule) }

// UpdateNetworkRules adds and removes egress rules; a running sandbox's
// take effect at once, without a restart.
func (m *Rules) UpdateNetworkRules(ctx context.Context, ref string, req *Request, actor string) (*NetworkRules, error) {
	var out *NetworkRules
	_, err := m.e.Op(ctx, ref, func(ctx context.Context, op *engine.Op, sb *sandbox.Sandbox) error {
		if sb.Spec.Network != "egress" {
			return errdefs.Invalid("sandbox %s has network mode %s: rules apply to mode egress", sb.ID, sb.Spec.Network)
		}
		// The merge below compares rules pairwise: bound the input first.
		if len(req.Allow) > sandbox.MaxAllowRules || len(req.Deny) > sandbox.MaxAllowRules {
			return errdefs.Limit("max_allow_rules", sandbox.MaxAllowRules, "%d rules to allow and %d to deny given", len(req.Allow), len(req.Deny))
		}
		var prev, allow []string
		if err := op.StoreOwn(ctx, sb, func(sb *sandbox.Sandbox) ([]*sandbox.Event, error) {
			prev, allow = sb.Spec.Allow, slices.Clone(sb.Spec.Allow)
			if req.Replace {
				allow = nil
			}
			for _, a := range req.Allow {
				r, err := m.canonical(a)
				if err != nil {
					return nil, err
				}
				if !slices.ContainsFunc(allow, func(s string) bool { x, _ := m.canonical(s); return x == r }) {
					allow = append(allow, a)
				}
			}
			for _, d := range req.Deny {
				r, err := m.canonical(d)
				if err != nil {
					return nil, err
				}
				allow = slices.DeleteFunc(allow, func(s string) bool { x, _ := m.canonical(s); return x == r })
			}
			if err := sandbox.CheckAllow(allow); err != nil {
				return nil, err
			}
			if err := egressrule.Check(allow); err != nil {
				return nil, err
			}
			sb.Spec.Allow = allow
			return nil, nil
		}); err != nil {
			sb.Spec.Allow = prev
			return err
		}
		if sb.State == sandbox.StateRunning || sb.State == sandbox.StatePaused {
			eg, err := node.Need[node.Egress](m.node, node.OpEgress)
			if err != nil {
				return err
			}
			err = failpoint.Inject("network.rules.apply")
			if err == nil {
				err = eg.SetRules(ctx, sb, false)
			}
			if err != nil {
				// The sandbox keeps the rules it had: record and kernel.
				sb.Spec.Allow = prev
				if uerr := m.store.UpdateSandbox(ctx, sb); uerr != nil {
					err = errors.Join(err, fmt.Errorf("restoring the stored rules: %w", uerr))
				}
				if rerr := eg.SetRules(ctx, sb, false); rerr != nil {
					err = errors.Join(err, fmt.Errorf("restoring the applied rules: %w", rerr))
				}
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
