package engine

import (
	"context"
	"errors"
	"net"
	"time"

	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/internal/network/egressrule"
	"github.com/berth-sh/berth/internal/node"
	"github.com/berth-sh/berth/internal/sandbox"
	"github.com/berth-sh/berth/internal/store"
)

// Sandbox networking, the engine's half: a sandbox's mode, addresses and
// rules are in its record (checked by package egressrule); the backend
// attaches it (node.Egress, a capability asked for with node.Need). Mode
// none (the default) is loopback only; mode egress is default-deny with
// the sandbox's rules, its connections in the flow log.

// prepareNetwork assigns an egress sandbox's addresses (once: they are
// kept across stop/start) and checks its rules.
func (m *Engine) prepareNetwork(ctx context.Context, sp *sandbox.Spec, id string) error {
	return m.prepareNetworkTaken(ctx, sp, id, nil)
}

func (m *Engine) prepareNetworkTaken(ctx context.Context, sp *sandbox.Spec, id string, taken func(string) bool) error {
	if sp.Network != "egress" {
		return nil
	}
	if err := egressrule.Check(sp.Allow); err != nil {
		return err
	}
	if sp.IPv4 != "" {
		return nil
	}
	used, err := m.addressesInUse(ctx)
	if err != nil {
		return err
	}
	eg, err := node.Need[node.Egress](m.node, node.OpEgress)
	if err != nil {
		return err
	}
	v4, v6, err := eg.Allocate(ctx, id, func(a string) bool { return used[a] || taken != nil && taken(a) })
	if err != nil {
		return err
	}
	sp.IPv4, sp.IPv6 = v4, v6
	return nil
}

func (m *Engine) addressesInUse(ctx context.Context) (map[string]bool, error) {
	live, _, err := m.store.ListSandboxes(ctx, store.SandboxFilter{Owner: store.AnyOwner, Node: m.cfg.Node}, store.Page{})
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
func (m *Engine) keepNetwork(ctx context.Context) bool {
	live, _, err := m.store.ListSandboxes(ctx, store.SandboxFilter{Owner: store.AnyOwner, Node: m.cfg.Node}, store.Page{})
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

// DialPort connects to a port of a running sandbox (the backend decides
// how: through its agent, over the bridge, or in its network namespace).
// A port nothing listens on is errdefs.ErrUnreachable (502).
func (m *Engine) DialPort(ctx context.Context, ref string, port int) (net.Conn, *sandbox.Sandbox, error) {
	if port < 1 || port > 65535 {
		return nil, nil, errdefs.Invalid("port %d out of range", port)
	}
	sb, err := m.local(ctx, ref)
	if err != nil {
		return nil, nil, err
	}
	woken := sb.State == sandbox.StateStopped || sb.State == sandbox.StatePaused
	if sb, err = m.readyForUse(ctx, sb, "reach ports of", "proxy"); err != nil {
		return nil, nil, err
	}
	m.touch(sb.ID)
	if woken {
		c, err := m.dialWoken(ctx, sb, port)
		if err != nil {
			return nil, nil, err
		}
		return c, sb, nil
	}
	c, err := m.node.DialPort(ctx, sb, port)
	if err != nil {
		return nil, nil, err
	}
	return c, sb, nil
}

// PortWakeWait bounds how long a port request that woke its sandbox
// (auto_resume) waits for the port to accept: the sandbox's services and
// restarting processes come up in the background after a start.
const PortWakeWait = store.ServiceReadyWait

// dialWoken dials port of sb, which this request has just brought back to
// running: it waits for its ready ports (the template's service's and its
// supervised processes', which the Running hook starts again;
// awaitService), then retries the port while nothing listens on it yet,
// at most PortWakeWait in all, so the first request to a stopped preview
// gets the page rather than a 502. The deadline is the daemon's, never the
// sandbox's: a port that never opens is a 502 after it.
func (m *Engine) dialWoken(ctx context.Context, sb *sandbox.Sandbox, port int) (net.Conn, error) {
	wctx, cancel := context.WithTimeout(ctx, PortWakeWait)
	defer cancel()
	m.awaitService(wctx, sb)
	delay := 20 * time.Millisecond
	for {
		dctx, dcancel := context.WithTimeout(wctx, 2*time.Second)
		c, err := m.node.DialPort(dctx, sb, port)
		dcancel()
		if err == nil {
			return c, nil
		}
		if !errors.Is(err, errdefs.ErrUnreachable) {
			return nil, err
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-wctx.Done():
			return nil, errdefs.Unreachable("sandbox %s was started for this request, but nothing accepted on port %d within %s",
				sb.ID, port, PortWakeWait)
		case <-time.After(delay):
		}
		delay = min(2*delay, 500*time.Millisecond)
	}
}
