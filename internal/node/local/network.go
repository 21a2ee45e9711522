package local

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/internal/network"
	"github.com/berth-sh/berth/internal/node"
	"github.com/berth-sh/berth/internal/node/local/agentchan"
	"github.com/berth-sh/berth/internal/sandbox"
)

// Sandbox networking. Mode none (the default) is a network namespace with
// only loopback, which touches nothing on the host. Mode egress attaches
// the sandbox to this daemon's bridge with default-deny egress (package
// network); the bridge, nftables table and DNS resolver are set up on
// first use, so a daemon that never runs an egress sandbox never changes
// the host's network.

// netIfUp returns the network if it has been set up, else nil.
func (b *Backend) netIfUp() *network.Network {
	b.netMu.Lock()
	defer b.netMu.Unlock()
	return b.network
}

func (b *Backend) net(ctx context.Context) (*network.Network, error) {
	b.netMu.Lock()
	defer b.netMu.Unlock()
	if b.network != nil {
		return b.network, nil
	}
	kept := b.keptSubnet()
	sub := b.cfg.EgressSubnet
	if !sub.IsValid() {
		sub = kept
	} else if kept.IsValid() && kept != sub {
		b.log.Warn("egress subnet changed: sandboxes recorded with addresses of the old one will not start", "was", kept, "now", sub)
	}
	n, err := network.New(ctx, network.Config{
		Instance: b.cfg.Instance,
		Subnet4:  sub,
		Logger:   b.log.With("component", "network"),
		OnFlow:   b.onFlow,
	})
	if err != nil {
		return nil, fmt.Errorf("network: %w", err)
	}
	if got := n.Subnet4(); got != kept {
		data, _ := json.Marshal(netState{Subnet4: got.String()})
		if err := agentchan.WriteFileAtomic(b.netStatePath(), data); err != nil {
			n.Close()
			return nil, fmt.Errorf("network: recording the subnet: %w", err)
		}
	}
	b.network = n
	return n, nil
}

// netState is what <data-dir>/network.json keeps: the subnet this data
// dir's sandboxes have addresses in, so that a restart (with another
// daemon's bridge on the default meanwhile, or without it) keeps it.
type netState struct {
	Subnet4 string `json:"subnet4"`
}

func (b *Backend) netStatePath() string { return filepath.Join(b.cfg.DataDir, "network.json") }

// keptSubnet returns the subnet network.json records, or the zero prefix.
func (b *Backend) keptSubnet() netip.Prefix {
	data, err := os.ReadFile(b.netStatePath())
	if err != nil {
		return netip.Prefix{}
	}
	var st netState
	if json.Unmarshal(data, &st) != nil {
		return netip.Prefix{}
	}
	p, err := netip.ParsePrefix(st.Subnet4)
	if err != nil {
		return netip.Prefix{}
	}
	return p
}

// closeNetwork stops the network's resolver and flow log and, unless
// keep (a sandbox of this daemon with egress still runs, is paused or
// quarantined), removes its bridge and nft tables from the host; they
// come back with the next egress sandbox.
func (b *Backend) closeNetwork(keep bool) {
	if n := b.netIfUp(); n != nil {
		n.Close()
	}
	if keep {
		b.log.Info("leaving the network in place for egress sandboxes that keep running")
		return
	}
	if err := network.Destroy(b.cfg.Instance); err != nil {
		b.log.Warn("removing the network", "err", err)
	}
}

// onFlow hands a flow to the engine (which must not block).
func (b *Backend) onFlow(id string, f network.Flow) {
	b.hooks.Flow(node.Flow{SandboxID: id, Time: f.Time, Kind: f.Kind, Proto: f.Proto,
		Src: f.Src.String(), Dst: f.Dst.String(), Name: f.Name, Decision: f.Decision, Rule: f.Rule})
}

// CheckRules validates egress rules.
func (b *Backend) CheckRules(allow []string) error {
	if _, err := network.ParseRules(allow); err != nil {
		return errdefs.Invalid("%v", err)
	}
	return nil
}

// CanonicalRule returns rule as the network package prints it.
func (b *Backend) CanonicalRule(rule string) (string, error) {
	r, err := network.ParseRule(rule)
	if err != nil {
		return "", errdefs.Invalid("%v", err)
	}
	return r.String(), nil
}

// Allocate assigns new egress sandbox id's addresses.
func (b *Backend) Allocate(ctx context.Context, id string, used func(string) bool) (string, string, error) {
	n, err := b.net(ctx)
	if err != nil {
		return "", "", err
	}
	v4, v6, err := n.Allocate(id, func(a netip.Addr) bool { return used(a.String()) })
	if err != nil {
		return "", "", errdefs.Exhausted("no free sandbox address: %v", err)
	}
	return v4.String(), v6.String(), nil
}

func attachment(sb *sandbox.Sandbox, rules []network.Rule) network.Attachment {
	a := network.Attachment{ID: sb.ID, Mode: network.ModeEgress, Rules: rules}
	a.IPv4, _ = netip.ParseAddr(sb.Spec.IPv4)
	a.IPv6, _ = netip.ParseAddr(sb.Spec.IPv6)
	return a
}

// resolvConf writes the resolv.conf an egress sandbox gets, pointing at
// berth's resolver, and returns its path for a bind mount.
func (b *Backend) resolvConf(ctx context.Context, sb *sandbox.Sandbox) (string, error) {
	n, err := b.net(ctx)
	if err != nil {
		return "", err
	}
	path := b.resolvConfPath(sb.ID)
	return path, os.WriteFile(path, []byte(n.ResolvConf()), 0o644)
}

// attachNetwork connects a started egress sandbox (init pid) to the bridge.
func (b *Backend) attachNetwork(ctx context.Context, sb *sandbox.Sandbox, pid int) error {
	if sb.Spec.Network != "egress" {
		return nil
	}
	n, err := b.net(ctx)
	if err != nil {
		return err
	}
	rules, err := network.ParseRules(sb.Spec.Allow)
	if err != nil {
		return err
	}
	if sb.State == sandbox.StateQuarantined {
		rules = nil
	}
	return n.Attach(ctx, attachment(sb, rules), fmt.Sprintf("/proc/%d/ns/net", pid))
}

// detachNetwork removes a sandbox's host network side. Idempotent.
func (b *Backend) detachNetwork(ctx context.Context, sb *sandbox.Sandbox) error {
	if sb.Spec.Network != "egress" {
		return nil
	}
	n, err := b.net(ctx)
	if err != nil {
		return err
	}
	return n.Detach(ctx, sb.ID)
}

// Recover re-registers running egress sandboxes after a restart and
// removes network leftovers of sandboxes that are gone.
func (b *Backend) Recover(ctx context.Context, live []*sandbox.Sandbox) error {
	any := false
	for _, sb := range live {
		if sb.Spec.Network == "egress" {
			any = true
		}
	}
	if !any && !network.Exists(b.cfg.Instance) {
		return nil
	}
	n, err := b.net(ctx)
	if err != nil {
		return err
	}
	running := map[string]bool{}
	for _, sb := range live {
		if sb.Spec.Network != "egress" || (sb.State != sandbox.StateRunning && sb.State != sandbox.StatePaused && sb.State != sandbox.StateQuarantined) {
			continue
		}
		rules, _ := network.ParseRules(sb.Spec.Allow)
		if sb.State == sandbox.StateQuarantined {
			rules = nil
		}
		if err := n.Adopt(ctx, attachment(sb, rules)); err != nil {
			b.log.Warn("adopting sandbox network", "sandbox", sb.ID, "err", err)
			continue
		}
		running[sb.ID] = true
	}
	removed, err := n.Prune(ctx, func(id string) bool { return running[id] })
	if len(removed) > 0 {
		b.log.Info("removed network leftovers", "sandboxes", removed)
	}
	return err
}

// SetRules applies sb's egress rules to its attachment now, or none at
// all (cut: a quarantine). A sandbox that is not attached (stopped) has
// nothing to change.
func (b *Backend) SetRules(ctx context.Context, sb *sandbox.Sandbox, cut bool) error {
	n := b.netIfUp()
	if sb.Spec.Network != "egress" || n == nil {
		return nil
	}
	var rules []network.Rule
	if !cut {
		var err error
		if rules, err = network.ParseRules(sb.Spec.Allow); err != nil {
			return errdefs.Invalid("%v", err)
		}
	}
	err := n.SetRules(sb.ID, rules)
	if err == network.ErrNotAttached {
		return nil
	}
	return err
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
			return nil, portError(sb.ID, port, err)
		}
		return c, nil
	}
	if sb.Spec.Network == "egress" {
		n, err := b.net(ctx)
		if err != nil {
			return nil, err
		}
		c, err := n.Dial(ctx, sb.ID, uint16(port))
		if err != nil {
			return nil, portError(sb.ID, port, err)
		}
		return c, nil
	}
	pid, err := b.initPid(sb.ID)
	if err != nil {
		return nil, err
	}
	c, err := dialInNetns(ctx, pid, "127.0.0.1:"+strconv.Itoa(port))
	if err != nil {
		return nil, portError(sb.ID, port, err)
	}
	return c, nil
}

// portError categorises a failed dial of a sandbox's port: nothing
// listening (refused, or the agent's unreachable) is 502 unreachable;
// anything else (the agent or the namespace gone) 503 unavailable.
func portError(id string, port int, err error) error {
	if errors.Is(err, errdefs.ErrUnreachable) || errors.Is(err, syscall.ECONNREFUSED) {
		return &errdefs.Error{Category: errdefs.ErrUnreachable,
			Msg: fmt.Sprintf("sandbox %s port %d: nothing listens there", id, port), Err: err}
	}
	return errdefs.Unavailable("sandbox %s port %d: %v", id, port, err)
}

// dialInNetns dials addr from inside the network namespace of pid. The
// socket is created while this OS thread is in that namespace and keeps
// it; the thread then returns to its own (or is discarded if it cannot).
func dialInNetns(ctx context.Context, pid int, addr string) (net.Conn, error) {
	type result struct {
		c   net.Conn
		err error
	}
	ch := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		self, err := os.Open("/proc/thread-self/ns/net")
		if err != nil {
			runtime.UnlockOSThread()
			ch <- result{nil, err}
			return
		}
		defer self.Close()
		target, err := os.Open(fmt.Sprintf("/proc/%d/ns/net", pid))
		if err != nil {
			runtime.UnlockOSThread()
			ch <- result{nil, err}
			return
		}
		defer target.Close()
		if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
			runtime.UnlockOSThread()
			ch <- result{nil, err}
			return
		}
		d := net.Dialer{Timeout: 5 * time.Second}
		c, err := d.DialContext(ctx, "tcp", addr)
		if unix.Setns(int(self.Fd()), unix.CLONE_NEWNET) == nil {
			runtime.UnlockOSThread()
		} // else: the locked thread exits with this goroutine
		ch <- result{c, err}
	}()
	r := <-ch
	return r.c, r.err
}
