package manager

import (
	"context"
	"fmt"
	"net"
	"slices"
	"strings"
	"time"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/internal/node"
	"github.com/berth-sh/berth/internal/sandbox"
	"github.com/berth-sh/berth/internal/store"
)

// Sandbox networking, the engine's half: a sandbox's mode, addresses and
// rules are in its record; the backend attaches it (node.Network). Mode
// none (the default) is loopback only; mode egress is default-deny with
// the sandbox's rules, its connections in the flow log.

// onFlow queues a flow for the store. It must not block: under a flood,
// what does not fit is dropped (and counted).
func (m *Manager) onFlow(f node.Flow) {
	select {
	case m.flows <- f:
	default:
		m.flowsDropped.Add(1)
	}
}

// FlowsDropped counts flow records dropped under a flood.
func (m *Manager) FlowsDropped() int64 { return m.flowsDropped.Load() }

// flowsKept bounds each sandbox's stored flow log; it is kept as long as
// the sandbox's other records.
const flowsKept = 10000

// recordFlows stores flows in batches and turns denials into events,
// rate-limited per sandbox.
func (m *Manager) recordFlows() {
	defer m.wg.Done()
	last := map[string]time.Time{}
	var batch []*store.Flow
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	flush := func() {
		if len(batch) == 0 {
			return
		}
		if err := m.store.AppendFlows(context.Background(), batch, flowsKept); err != nil {
			m.log.Warn("storing flow log", "flows", len(batch), "err", err)
		}
		batch = batch[:0]
	}
	for {
		select {
		case <-m.stopCh:
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
			m.event(context.Background(), &sandbox.Event{SandboxID: f.SandboxID, Type: "network.deny", Actor: "network",
				Cause: sandbox.CausePolicy, Outcome: "denied", Message: fmt.Sprintf("%s %s %s: %s", f.Kind, f.Proto, dst, f.Rule)})
		}
	}
}

// prepareNetwork assigns an egress sandbox's addresses (once: they are
// kept across stop/start) and checks its rules.
func (m *Manager) prepareNetwork(ctx context.Context, sp *sandbox.Spec, id string) error {
	if sp.Network != "egress" {
		return nil
	}
	if err := m.node.CheckRules(sp.Allow); err != nil {
		return err
	}
	if sp.IPv4 != "" {
		return nil
	}
	used, err := m.addressesInUse(ctx)
	if err != nil {
		return err
	}
	v4, v6, err := m.node.Allocate(ctx, id, func(a string) bool { return used[a] })
	if err != nil {
		return err
	}
	sp.IPv4, sp.IPv6 = v4, v6
	return nil
}

func (m *Manager) addressesInUse(ctx context.Context) (map[string]bool, error) {
	live, err := m.store.ListSandboxes(ctx, store.SandboxFilter{Node: m.cfg.Node})
	if err != nil {
		return nil, err
	}
	used := map[string]bool{}
	for _, sb := range live {
		used[sb.Spec.IPv4], used[sb.Spec.IPv6] = true, true
	}
	return used, nil
}

// keepNetwork reports whether a sandbox of this node still needs the
// egress network after the daemon stops (one with egress is running,
// paused or quarantined), or it cannot tell.
func (m *Manager) keepNetwork(ctx context.Context) bool {
	live, err := m.store.ListSandboxes(ctx, store.SandboxFilter{Node: m.cfg.Node})
	if err != nil {
		m.log.Warn("leaving the network in place: listing sandboxes", "err", err)
		return true
	}
	for _, sb := range live {
		if sb.Spec.Network == "egress" && sb.State != sandbox.StateStopped && sb.State != sandbox.StateDeleted &&
			sb.State != sandbox.StateFailed {
			return true
		}
	}
	return false
}

// NetworkRules returns a sandbox's network identity and rules.
func (m *Manager) NetworkRules(ctx context.Context, ref string) (*api.NetworkRules, error) {
	sb, err := m.Get(ctx, ref)
	if err != nil {
		return nil, err
	}
	return netRulesAPI(sb), nil
}

func netRulesAPI(sb *sandbox.Sandbox) *api.NetworkRules {
	return &api.NetworkRules{Mode: sb.Spec.Network, IPv4: sb.Spec.IPv4, IPv6: sb.Spec.IPv6, Allow: append([]string{}, sb.Spec.Allow...)}
}

// canonical returns the form of rule two spellings of it share.
func (m *Manager) canonical(rule string) (string, error) { return m.node.CanonicalRule(rule) }

// UpdateNetworkRules adds and removes egress rules; a running sandbox's
// take effect at once, without a restart.
func (m *Manager) UpdateNetworkRules(ctx context.Context, ref string, req *api.NetworkRulesRequest, actor string) (*api.NetworkRules, error) {
	var out *api.NetworkRules
	_, err := m.op(ctx, ref, func(ctx context.Context, sb *sandbox.Sandbox) error {
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
		m.event(ctx, &sandbox.Event{SandboxID: sb.ID, Type: "network.rules", Actor: actor, Cause: sandbox.CauseUser,
			Outcome: "ok", Message: "allow: " + strings.Join(allow, ", ")})
		out = netRulesAPI(sb)
		return nil
	})
	return out, err
}

// Flows returns a sandbox's stored flow log after sequence number after.
func (m *Manager) Flows(ctx context.Context, ref string, after uint64, limit int) ([]api.Flow, error) {
	sb, err := m.Get(ctx, ref)
	if err != nil {
		return nil, err
	}
	fs, err := m.store.ListFlows(ctx, sb.ID, int64(after), limit)
	if err != nil {
		return nil, err
	}
	out := make([]api.Flow, 0, len(fs))
	for _, f := range fs {
		out = append(out, api.Flow{Seq: uint64(f.ID), Time: f.Time, Kind: f.Kind, Proto: f.Proto, Src: f.Src,
			Dst: f.Dst, Name: f.Name, Decision: f.Decision, Rule: f.Rule})
	}
	return out, nil
}

// DialPort connects to a port of a running sandbox (the backend decides
// how: through its agent, over the bridge, or in its network namespace).
// A port nothing listens on is errdefs.ErrUnreachable (502).
func (m *Manager) DialPort(ctx context.Context, ref string, port int) (net.Conn, *sandbox.Sandbox, error) {
	if port < 1 || port > 65535 {
		return nil, nil, errdefs.Invalid("port %d out of range", port)
	}
	sb, err := m.local(ctx, ref)
	if err != nil {
		return nil, nil, err
	}
	if sb, err = m.readyForUse(ctx, sb, "reach ports of", "proxy"); err != nil {
		return nil, nil, err
	}
	m.touch(sb.ID)
	c, err := m.node.DialPort(ctx, sb, port)
	if err != nil {
		return nil, nil, err
	}
	return c, sb, nil
}
