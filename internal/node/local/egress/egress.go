// Package egress is the local backend's glue to package network: the
// daemon's network made lazily on the first egress sandbox, with the
// subnet its data dir's sandboxes have addresses in kept across restarts;
// a sandbox's attach, detach, rules and recovery after a restart; and the
// dial of a sandbox's port over the bridge or inside its netns.
//
// It is separate from package local because it is the one part of the
// backend that changes the host's network, and it needs of a sandbox only
// its record: keeping it apart shows that a daemon that never runs an
// egress sandbox never touches the host's network.
//
// Mode none (the default) is a network namespace with only loopback,
// which touches nothing on the host. Mode egress attaches the sandbox to
// this daemon's bridge with default-deny egress (package network); the
// bridge, nftables table and DNS resolver are set up on first use.
package egress

import (
	"context"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"sync"

	"github.com/berth-sh/berth/internal/atomicfile"
	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/internal/network"
	"github.com/berth-sh/berth/internal/network/egressrule"
	"github.com/berth-sh/berth/internal/sandbox"
)

// Config configures a daemon's egress network.
type Config struct {
	// Instance names the daemon's bridge and tables.
	Instance string
	// Subnet is the configured IPv4 subnet; zero: the kept one, else
	// network's default.
	Subnet netip.Prefix
	// DataDir is where network.json keeps the subnet in use.
	DataDir string
	Logger  *slog.Logger
	// OnFlow receives each flow (and must not block).
	OnFlow func(id string, f network.Flow)
	// Upstream are the resolvers berth's resolver forwards to; empty:
	// the host's /etc/resolv.conf.
	Upstream []netip.AddrPort
	// ProxyPort is the egress proxy's port on the IPv4 gateway (secrets
	// injected at egress); 0: DefaultProxyPort.
	ProxyPort uint16
	// Roots verify the servers the egress proxy dials; nil: the system's.
	Roots *x509.CertPool
}

// Net is a daemon's egress network, made on first use.
type Net struct {
	cfg Config
	mu  sync.Mutex
	n   *network.Network
	px  proxy // the egress proxy of secrets injected at egress (proxy.go)
}

// New returns the egress network of cfg, not yet set up.
func New(cfg Config) *Net {
	if cfg.ProxyPort == 0 {
		cfg.ProxyPort = DefaultProxyPort
	}
	return &Net{cfg: cfg}
}

// Up returns the network if it has been set up, else nil.
func (e *Net) Up() *network.Network {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.n
}

// Get returns the network, setting it up first if need be.
func (e *Net) Get(ctx context.Context) (*network.Network, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.n != nil {
		return e.n, nil
	}
	kept := e.keptSubnet()
	sub := e.cfg.Subnet
	if !sub.IsValid() {
		sub = kept
	} else if kept.IsValid() && kept != sub {
		e.cfg.Logger.Warn("egress subnet changed: sandboxes recorded with addresses of the old one will not start", "was", kept, "now", sub)
	}
	n, err := network.New(ctx, network.Config{
		Instance:  e.cfg.Instance,
		Subnet4:   sub,
		Logger:    e.cfg.Logger.With("component", "network"),
		OnFlow:    e.cfg.OnFlow,
		Upstream:  e.cfg.Upstream,
		ProxyPort: e.cfg.ProxyPort,
	})
	if err != nil {
		return nil, fmt.Errorf("network: %w", err)
	}
	if err := e.startProxy(n); err != nil {
		n.Close()
		return nil, fmt.Errorf("egress proxy: %w", err)
	}
	if got := n.Subnet4(); got != kept {
		data, _ := json.Marshal(netState{Subnet4: got.String()})
		if err := atomicfile.Write(e.statePath(), data, 0o600); err != nil {
			e.stopProxy()
			n.Close()
			return nil, fmt.Errorf("network: recording the subnet: %w", err)
		}
	}
	e.n = n
	return n, nil
}

// netState is what <data-dir>/network.json keeps: the subnet this data
// dir's sandboxes have addresses in, so that a restart (with another
// daemon's bridge on the default meanwhile, or without it) keeps it.
type netState struct {
	Subnet4 string `json:"subnet4"`
}

func (e *Net) statePath() string { return filepath.Join(e.cfg.DataDir, "network.json") }

// keptSubnet returns the subnet network.json records, or the zero prefix.
func (e *Net) keptSubnet() netip.Prefix {
	data, err := os.ReadFile(e.statePath())
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

// Close stops the network's resolver and flow log and, unless keep (a
// sandbox of this daemon with egress still runs, is paused or
// quarantined), removes its bridge and nft tables from the host; they
// come back with the next egress sandbox.
func (e *Net) Close(keep bool) {
	if n := e.Up(); n != nil {
		e.stopProxy()
		n.Close()
	}
	if keep {
		e.cfg.Logger.Info("leaving the network in place for egress sandboxes that keep running")
		return
	}
	if err := network.Destroy(e.cfg.Instance); err != nil {
		e.cfg.Logger.Warn("removing the network", "err", err)
	}
}

// Allocate assigns new egress sandbox id's addresses.
func (e *Net) Allocate(ctx context.Context, id string, used func(string) bool) (string, string, error) {
	n, err := e.Get(ctx)
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
	a := network.Attachment{ID: sb.ID, Mode: network.ModeEgress, Rules: rules, Redirect: redirectHosts(sb)}
	a.IPv4, _ = netip.ParseAddr(sb.Spec.IPv4)
	a.IPv6, _ = netip.ParseAddr(sb.Spec.IPv6)
	return a
}

// ResolvConf writes at path the resolv.conf an egress sandbox gets,
// pointing at berth's resolver.
func (e *Net) ResolvConf(ctx context.Context, path string) error {
	n, err := e.Get(ctx)
	if err != nil {
		return err
	}
	return os.WriteFile(path, []byte(n.ResolvConf()), 0o644)
}

// Attach connects a started egress sandbox (init pid) to the bridge.
func (e *Net) Attach(ctx context.Context, sb *sandbox.Sandbox, pid int) error {
	if sb.Spec.Network != "egress" {
		return nil
	}
	return e.attach(ctx, sb, fmt.Sprintf("/proc/%d/ns/net", pid))
}

// attach connects the network namespace at netnsPath as egress sandbox sb.
func (e *Net) attach(ctx context.Context, sb *sandbox.Sandbox, netnsPath string) error {
	n, err := e.Get(ctx)
	if err != nil {
		return err
	}
	rules, err := egressrule.ParseAll(sb.Spec.Allow)
	if err != nil {
		return err
	}
	if sb.State == sandbox.StateQuarantined {
		rules = nil
	}
	if err := e.register(sb); err != nil {
		return err
	}
	if err := n.Attach(ctx, attachment(sb, rules), netnsPath); err != nil {
		e.unregister(sb)
		return err
	}
	return nil
}

// Detach removes a sandbox's host network side. Idempotent.
func (e *Net) Detach(ctx context.Context, sb *sandbox.Sandbox) error {
	if sb.Spec.Network != "egress" {
		return nil
	}
	n, err := e.Get(ctx)
	if err != nil {
		return err
	}
	e.unregister(sb)
	return n.Detach(ctx, sb.ID)
}

// Recover re-registers running egress sandboxes after a restart and
// removes network leftovers of sandboxes that are gone.
func (e *Net) Recover(ctx context.Context, live []*sandbox.Sandbox) error {
	any := false
	for _, sb := range live {
		if sb.Spec.Network == "egress" {
			any = true
		}
	}
	if !any && !network.Exists(e.cfg.Instance) {
		return nil
	}
	n, err := e.Get(ctx)
	if err != nil {
		return err
	}
	running := map[string]bool{}
	for _, sb := range live {
		if sb.Spec.Network != "egress" || (sb.State != sandbox.StateRunning && sb.State != sandbox.StatePaused && sb.State != sandbox.StateQuarantined) {
			continue
		}
		rules, _ := egressrule.ParseAll(sb.Spec.Allow)
		if sb.State == sandbox.StateQuarantined {
			rules = nil
		}
		if err := e.register(sb); err != nil {
			e.cfg.Logger.Warn("registering sandbox with the egress proxy", "sandbox", sb.ID, "err", err)
		}
		if err := n.Adopt(ctx, attachment(sb, rules)); err != nil {
			e.unregister(sb)
			e.cfg.Logger.Warn("adopting sandbox network", "sandbox", sb.ID, "err", err)
			continue
		}
		running[sb.ID] = true
	}
	removed, err := n.Prune(ctx, func(id string) bool { return running[id] })
	if len(removed) > 0 {
		e.cfg.Logger.Info("removed network leftovers", "sandboxes", removed)
	}
	return err
}

// SetRules applies sb's egress rules to its attachment now, or none at
// all (cut: a quarantine). A sandbox that is not attached (stopped) has
// nothing to change.
func (e *Net) SetRules(sb *sandbox.Sandbox, cut bool) error {
	n := e.Up()
	if sb.Spec.Network != "egress" || n == nil {
		return nil
	}
	var rules []network.Rule
	if !cut {
		var err error
		if rules, err = egressrule.ParseAll(sb.Spec.Allow); err != nil {
			return errdefs.Invalid("%v", err)
		}
	}
	err := n.SetRules(sb.ID, rules)
	if err == network.ErrNotAttached {
		return nil
	}
	return err
}

// Dial connects to port of egress sandbox id over the bridge.
func (e *Net) Dial(ctx context.Context, id string, port int) (net.Conn, error) {
	n, err := e.Get(ctx)
	if err != nil {
		return nil, err
	}
	c, err := n.Dial(ctx, id, uint16(port))
	if err != nil {
		return nil, PortError(id, port, err)
	}
	return c, nil
}
