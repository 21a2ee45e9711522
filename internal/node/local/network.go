package local

// Sandbox networking: package egress is the glue to package network (the
// lazy network, attach, detach, rules, recovery, dials in a netns); these
// are the node.Egress and node.EgressProxy methods over it.

import (
	"context"
	"fmt"
	"net"
	"strconv"

	"github.com/berth-sh/berth/internal/network"
	"github.com/berth-sh/berth/internal/node"
	"github.com/berth-sh/berth/internal/node/local/egress"
	"github.com/berth-sh/berth/internal/sandbox"
)

// onFlow hands a flow to the engine (which must not block).
func (b *Backend) onFlow(id string, f network.Flow) {
	b.hooks.Flow(node.Flow{SandboxID: id, Time: f.Time, Kind: f.Kind, Proto: f.Proto,
		Src: f.Src.String(), Dst: f.Dst.String(), Name: f.Name, Decision: f.Decision, Rule: f.Rule})
}

// EgressCA returns sb's egress CA certificate (PEM), making the CA on
// first use in sb's host-side directory (the key 0600, never mounted in),
// and the host's system CA bundle.
func (b *Backend) EgressCA(ctx context.Context, sb *sandbox.Sandbox) ([]byte, []byte, error) {
	ca, err := b.egress.CA(sb)
	if err != nil {
		return nil, nil, err
	}
	return ca.CertPEM(), egress.SystemCABundle(), nil
}

// SetEgressSecrets gives the egress proxy the daemon's secrets and audit.
func (b *Backend) SetEgressSecrets(s egress.Secrets) { b.egress.SetSecrets(s) }

// Allocate assigns new egress sandbox id's addresses.
func (b *Backend) Allocate(ctx context.Context, id string, used func(string) bool) (string, string, error) {
	return b.egress.Allocate(ctx, id, used)
}

// resolvConf writes the resolv.conf an egress sandbox gets, pointing at
// berth's resolver, and returns its path for a bind mount.
func (b *Backend) resolvConf(ctx context.Context, sb *sandbox.Sandbox) (string, error) {
	path := b.resolvConfPath(sb.ID)
	return path, b.egress.ResolvConf(ctx, path)
}

// wireNetns makes egress sandbox sb's network namespace before its
// runtime starts it and connects it to the bridge with sb's rules, for a
// class whose network stack takes the namespace's interfaces over at
// create (gVisor's netstack: see runtime.Runsc.NetnsBeforeStart). It
// returns the pin's path for Spec.NetnsPath; Stop removes it.
func (b *Backend) wireNetns(ctx context.Context, sb *sandbox.Sandbox) (string, error) {
	path := b.paths(sb.ID).netns
	if err := egress.MakeNetns(path); err != nil {
		return "", fmt.Errorf("network: %w", err)
	}
	if err := b.egress.AttachAt(ctx, sb, path); err != nil {
		_ = egress.RemoveNetns(path)
		return "", fmt.Errorf("network: %w", err)
	}
	return path, nil
}

// Recover re-registers running egress sandboxes after a restart and
// removes network leftovers of sandboxes that are gone.
func (b *Backend) Recover(ctx context.Context, live []*sandbox.Sandbox) error {
	return b.egress.Recover(ctx, live)
}

// SetRules applies sb's egress rules to its attachment now, or none at
// all (cut: a quarantine). A sandbox that is not attached (stopped) has
// nothing to change.
func (b *Backend) SetRules(ctx context.Context, sb *sandbox.Sandbox, cut bool) error {
	return b.egress.SetRules(sb, cut)
}

// DialPort connects to a port of a running sandbox: through its agent
// when its runtime's network cannot be entered from the host (the
// runtime has NetworkViaAgent: gVisor), over the bridge for egress
// sandboxes, else inside its network namespace on loopback. A port
// nothing listens on is errdefs.ErrUnreachable (502).
func (b *Backend) DialPort(ctx context.Context, sb *sandbox.Sandbox, port int) (net.Conn, error) {
	if b.caps(sb).PortsViaAgent {
		c, err := b.agentFor(sb.ID).DialPort(ctx, port)
		if err != nil {
			return nil, egress.PortError(sb.ID, port, err)
		}
		return c, nil
	}
	if sb.Spec.Network == "egress" {
		return b.egress.Dial(ctx, sb.ID, port)
	}
	pid, err := b.initPid(sb.ID)
	if err != nil {
		return nil, err
	}
	c, err := egress.DialInNetns(ctx, pid, "127.0.0.1:"+strconv.Itoa(port))
	if err != nil {
		return nil, egress.PortError(sb.ID, port, err)
	}
	return c, nil
}
