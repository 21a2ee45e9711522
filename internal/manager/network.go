package manager

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
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/internal/network"
	"github.com/berth-sh/berth/internal/sandbox"
	"github.com/berth-sh/berth/internal/store"
)

// Sandbox networking. Mode none (the default) is a network namespace with
// only loopback, which touches nothing on the host. Mode egress attaches
// the sandbox to this daemon's bridge with default-deny egress (package
// network); the bridge, nftables table and DNS resolver are set up on
// first use, so a daemon that never runs an egress sandbox never changes
// the host's network.

// netIfUp returns the network if it has been set up, else nil.
func (m *Manager) netIfUp() *network.Network {
	m.netMu.Lock()
	defer m.netMu.Unlock()
	return m.network
}

func (m *Manager) net(ctx context.Context) (*network.Network, error) {
	m.netMu.Lock()
	defer m.netMu.Unlock()
	if m.network != nil {
		return m.network, nil
	}
	kept := m.keptSubnet()
	sub := m.cfg.EgressSubnet
	if !sub.IsValid() {
		sub = kept
	} else if kept.IsValid() && kept != sub {
		m.log.Warn("egress subnet changed: sandboxes recorded with addresses of the old one will not start", "was", kept, "now", sub)
	}
	n, err := network.New(ctx, network.Config{
		Instance: m.cfg.Instance,
		Subnet4:  sub,
		Logger:   m.log.With("component", "network"),
		OnFlow:   m.onFlow,
	})
	if err != nil {
		return nil, fmt.Errorf("network: %w", err)
	}
	if got := n.Subnet4(); got != kept {
		b, _ := json.Marshal(netState{Subnet4: got.String()})
		if err := writeFileAtomic(m.netStatePath(), b); err != nil {
			n.Close()
			return nil, fmt.Errorf("network: recording the subnet: %w", err)
		}
	}
	m.network = n
	return n, nil
}

// netState is what <data-dir>/network.json keeps: the subnet this data
// dir's sandboxes have addresses in, so that a restart (with another
// daemon's bridge on the default meanwhile, or without it) keeps it.
type netState struct {
	Subnet4 string `json:"subnet4"`
}

func (m *Manager) netStatePath() string { return filepath.Join(m.cfg.DataDir, "network.json") }

// keptSubnet returns the subnet network.json records, or the zero prefix.
func (m *Manager) keptSubnet() netip.Prefix {
	b, err := os.ReadFile(m.netStatePath())
	if err != nil {
		return netip.Prefix{}
	}
	var st netState
	if json.Unmarshal(b, &st) != nil {
		return netip.Prefix{}
	}
	p, err := netip.ParsePrefix(st.Subnet4)
	if err != nil {
		return netip.Prefix{}
	}
	return p
}

// closeNetwork stops the network's resolver and flow log and, when no
// sandbox of this daemon needs them any more (none with egress is
// running, paused or quarantined), removes its bridge and nft tables from
// the host; they come back with the next egress sandbox.
func (m *Manager) closeNetwork(ctx context.Context) {
	if n := m.netIfUp(); n != nil {
		n.Close()
	}
	live, _, err := m.store.ListSandboxes(ctx, store.SandboxFilter{Owner: store.AnyOwner, Node: m.cfg.Node}, store.Page{})
	if err != nil {
		m.log.Warn("leaving the network in place: listing sandboxes", "err", err)
		return
	}
	for _, sb := range live {
		if sb.Spec.Network == "egress" && sb.State != sandbox.StateStopped && sb.State != sandbox.StateDeleted &&
			sb.State != sandbox.StateFailed {
			m.log.Info("leaving the network in place for running egress sandboxes", "sandbox", sb.ID, "state", sb.State)
			return
		}
	}
	if err := network.Destroy(m.cfg.Instance); err != nil {
		m.log.Warn("removing the network", "err", err)
	}
}

// onFlow queues a flow for the store; denials also become events. It
// must not block: under a flood, what does not fit is dropped (and counted).
func (m *Manager) onFlow(id string, f network.Flow) {
	select {
	case m.flowEvents <- flowEvent{id, f}:
	default:
		m.flowsDropped.Add(1)
	}
}

type flowEvent struct {
	id string
	f  network.Flow
}

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
		case fe := <-m.flowEvents:
			f := fe.f
			batch = append(batch, &store.Flow{SandboxID: fe.id, Time: f.Time, Kind: f.Kind, Proto: f.Proto,
				Src: f.Src.String(), Dst: f.Dst.String(), Name: f.Name, Decision: f.Decision, Rule: f.Rule})
			if len(batch) >= 500 {
				flush()
			}
			if f.Decision != network.Deny {
				continue
			}
			if t, ok := last[fe.id]; ok && time.Since(t) < 200*time.Millisecond {
				continue
			}
			last[fe.id] = time.Now()
			dst := f.Dst.String()
			if f.Name != "" {
				dst = f.Name + " (" + dst + ")"
			}
			m.event(context.Background(), &sandbox.Event{SandboxID: fe.id, Type: "network.deny", Actor: "network",
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
	if _, err := network.ParseRules(sp.Allow); err != nil {
		return errdefs.Invalid("%v", err)
	}
	if sp.IPv4 != "" {
		return nil
	}
	n, err := m.net(ctx)
	if err != nil {
		return err
	}
	used, err := m.addressesInUse(ctx)
	if err != nil {
		return err
	}
	v4, v6, err := n.Allocate(id, func(a netip.Addr) bool { return used[a.String()] })
	if err != nil {
		return errdefs.Exhausted("no free sandbox address: %v", err)
	}
	sp.IPv4, sp.IPv6 = v4.String(), v6.String()
	return nil
}

func (m *Manager) addressesInUse(ctx context.Context) (map[string]bool, error) {
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

func attachment(sb *sandbox.Sandbox, rules []network.Rule) network.Attachment {
	a := network.Attachment{ID: sb.ID, Mode: network.ModeEgress, Rules: rules}
	a.IPv4, _ = netip.ParseAddr(sb.Spec.IPv4)
	a.IPv6, _ = netip.ParseAddr(sb.Spec.IPv6)
	return a
}

// resolvConf writes the resolv.conf an egress sandbox gets, pointing at
// berth's resolver, and returns its path for a bind mount.
func (m *Manager) resolvConf(ctx context.Context, sb *sandbox.Sandbox) (string, error) {
	n, err := m.net(ctx)
	if err != nil {
		return "", err
	}
	path := m.resolvConfPath(sb.ID)
	return path, os.WriteFile(path, []byte(n.ResolvConf()), 0o644)
}

// attachNetwork connects a started egress sandbox (init pid) to the bridge.
func (m *Manager) attachNetwork(ctx context.Context, sb *sandbox.Sandbox, pid int) error {
	if sb.Spec.Network != "egress" {
		return nil
	}
	n, err := m.net(ctx)
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
func (m *Manager) detachNetwork(ctx context.Context, sb *sandbox.Sandbox) error {
	if sb.Spec.Network != "egress" {
		return nil
	}
	n, err := m.net(ctx)
	if err != nil {
		return err
	}
	return n.Detach(ctx, sb.ID)
}

// recoverNetwork re-registers running egress sandboxes after a restart and
// removes network leftovers of sandboxes that are gone.
func (m *Manager) recoverNetwork(ctx context.Context, live []*sandbox.Sandbox) error {
	any := false
	for _, sb := range live {
		if sb.Spec.Network == "egress" {
			any = true
		}
	}
	if !any && !network.Exists(m.cfg.Instance) {
		return nil
	}
	n, err := m.net(ctx)
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
			m.log.Warn("adopting sandbox network", "sandbox", sb.ID, "err", err)
			continue
		}
		running[sb.ID] = true
	}
	removed, err := n.Prune(ctx, func(id string) bool { return running[id] })
	if len(removed) > 0 {
		m.log.Info("removed network leftovers", "sandboxes", removed)
	}
	return err
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
			r, err := network.ParseRule(a)
			if err != nil {
				return errdefs.Invalid("%v", err)
			}
			if !slices.ContainsFunc(allow, func(s string) bool { x, _ := network.ParseRule(s); return x.String() == r.String() }) {
				allow = append(allow, a)
			}
		}
		for _, d := range req.Deny {
			r, err := network.ParseRule(d)
			if err != nil {
				return errdefs.Invalid("%v", err)
			}
			allow = slices.DeleteFunc(allow, func(s string) bool { x, _ := network.ParseRule(s); return x.String() == r.String() })
		}
		rules, err := network.ParseRules(allow)
		if err != nil {
			return errdefs.Invalid("%v", err)
		}
		prev := sb.Spec.Allow
		sb.Spec.Allow = allow
		if err := m.store.UpdateSandbox(ctx, sb); err != nil {
			sb.Spec.Allow = prev
			return err
		}
		if sb.State == sandbox.StateRunning || sb.State == sandbox.StatePaused {
			if n, err := m.net(ctx); err == nil {
				if err := n.SetRules(sb.ID, rules); err != nil {
					return fmt.Errorf("applying rules: %w", err)
				}
			}
		}
		m.event(ctx, &sandbox.Event{SandboxID: sb.ID, Type: "network.rules", Actor: actor, Cause: sandbox.CauseUser,
			Outcome: "ok", Message: "allow: " + strings.Join(allow, ", ")})
		out = netRulesAPI(sb)
		return nil
	})
	return out, err
}

// setQuarantineNetwork cuts (or restores) a sandbox's egress.
func (m *Manager) setQuarantineNetwork(sb *sandbox.Sandbox, cut bool) error {
	n := m.netIfUp()
	if sb.Spec.Network != "egress" || n == nil {
		return nil
	}
	var rules []network.Rule
	if !cut {
		rules, _ = network.ParseRules(sb.Spec.Allow)
	}
	err := n.SetRules(sb.ID, rules)
	if err == network.ErrNotAttached {
		return nil // stopped: nothing to cut
	}
	return err
}

// Flows returns a sandbox's stored flow log after sequence number after.
func (m *Manager) Flows(ctx context.Context, ref string, after uint64, limit int) ([]api.Flow, error) {
	sb, err := m.Get(ctx, ref)
	if err != nil {
		return nil, err
	}
	fs, err := m.store.ListFlows(ctx, owner(ctx), sb.ID, int64(after), limit)
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

// DialPort connects to a port of a running sandbox: through its agent
// when its runtime's network cannot be entered from the host (the
// runtime has NetworkViaAgent: gVisor), over the bridge for egress
// sandboxes, else inside its network namespace on loopback. A port
// nothing listens on is errdefs.ErrUnreachable (502).
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
	if _, viaAgent := m.rtFor(sb).(interface{ NetworkViaAgent() }); viaAgent {
		c, err := m.agentFor(sb.ID).DialPort(ctx, port)
		if err != nil {
			return nil, nil, portError(sb.ID, port, err)
		}
		return c, sb, nil
	}
	if sb.Spec.Network == "egress" {
		n, err := m.net(ctx)
		if err != nil {
			return nil, nil, err
		}
		c, err := n.Dial(ctx, sb.ID, uint16(port))
		if err != nil {
			return nil, nil, portError(sb.ID, port, err)
		}
		return c, sb, nil
	}
	b, err := os.ReadFile(filepath.Join(m.paths(sb.ID).bundle, "init.pid"))
	if err != nil {
		return nil, nil, err
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	c, err := dialInNetns(ctx, pid, "127.0.0.1:"+strconv.Itoa(port))
	if err != nil {
		return nil, nil, portError(sb.ID, port, err)
	}
	return c, sb, nil
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
