package network

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"

	"github.com/berth-sh/berth/internal/network/egressrule"
	"github.com/google/nftables"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// Sandbox network modes.
const (
	ModeNone   = "none"   // loopback only
	ModeEgress = "egress" // veth to the bridge, default-deny egress with allow rules
)

// Attachment is what the caller persists about a sandbox's network.
type Attachment struct {
	ID   string
	Mode string // ModeNone | ModeEgress
	// IPv4 and IPv6 come from Allocate and stay the sandbox's addresses
	// for its life (a persistent sandbox keeps them across stop/start).
	IPv4, IPv6 netip.Addr
	Rules      []Rule
	// Redirect are the allowed host names whose TCP 443 traffic goes to
	// the egress proxy (Config.ProxyPort on the IPv4 gateway) instead:
	// the hosts of the sandbox's egress secrets. IPv4 only.
	Redirect []string
}

// ErrNotAttached is returned for a sandbox the network does not know.
var ErrNotAttached = errors.New("network: sandbox not attached")

// aliasPrefix marks a host veth's alias with its sandbox id.
const aliasPrefix = "berth-sandbox "

// Allocate picks addresses for sandbox id: the first free host address of
// Subnet4 scanning from a point derived from id (so an id tends to get the
// same address back), and the IPv6 address with the same offset in
// Subnet6. taken reports addresses the caller already handed out (its
// persisted attachments); addresses of attached sandboxes are skipped too.
// Allocate records nothing: persist the result before the next call.
func (n *Network) Allocate(id string, taken func(netip.Addr) bool) (v4, v6 netip.Addr, err error) {
	if taken == nil {
		taken = func(netip.Addr) bool { return false }
	}
	hostBits := 32 - n.cfg.Subnet4.Bits()
	size := uint64(1) << hostBits
	span := size - 3 // skip network, gateway and broadcast
	h := sha256.Sum256([]byte(id))
	start := binary.BigEndian.Uint64(h[:8]) % span
	base4 := n.cfg.Subnet4.Addr().As4()
	b4 := uint64(binary.BigEndian.Uint32(base4[:]))
	n.mu.Lock()
	defer n.mu.Unlock()
	for i := uint64(0); i < span; i++ {
		off := 2 + (start+i)%span
		var a4 [4]byte
		binary.BigEndian.PutUint32(a4[:], uint32(b4+off))
		v4 = netip.AddrFrom4(a4)
		v6 = addOffset6(n.cfg.Subnet6.Addr(), off)
		if n.byAddr[v4] != nil || n.byAddr[v6] != nil || taken(v4) || taken(v6) {
			continue
		}
		return v4, v6, nil
	}
	return netip.Addr{}, netip.Addr{}, fmt.Errorf("network: subnet %s is full", n.cfg.Subnet4)
}

func addOffset6(base netip.Addr, off uint64) netip.Addr {
	b := base.As16()
	lo := binary.BigEndian.Uint64(b[8:]) + off
	binary.BigEndian.PutUint64(b[8:], lo)
	return netip.AddrFrom16(b)
}

// macFor is the sandbox's deterministic, locally administered MAC.
func macFor(v4 netip.Addr) net.HardwareAddr {
	a := v4.As4()
	return net.HardwareAddr{0x02, 0xb7, a[0], a[1], a[2], a[3]}
}

func (n *Network) validateAttachment(a Attachment) error {
	if a.ID == "" {
		return errors.New("network: attachment without id")
	}
	switch a.Mode {
	case ModeNone:
		return nil
	case ModeEgress:
	default:
		return fmt.Errorf("network: mode %q: want none or egress", a.Mode)
	}
	if !a.IPv4.Is4() || !n.cfg.Subnet4.Contains(a.IPv4) || a.IPv4 == n.gw4 || a.IPv4 == n.cfg.Subnet4.Addr() {
		return fmt.Errorf("network: IPv4 %s is not a host address of %s", a.IPv4, n.cfg.Subnet4)
	}
	if !a.IPv6.Is6() || !n.cfg.Subnet6.Contains(a.IPv6) || a.IPv6 == n.gw6 || a.IPv6 == n.cfg.Subnet6.Addr() {
		return fmt.Errorf("network: IPv6 %s is not a host address of %s", a.IPv6, n.cfg.Subnet6)
	}
	return egressrule.ValidateAll(a.Rules)
}

// Attach connects the network namespace at netnsPath (for a container,
// /proc/<init pid>/ns/net) as sandbox a. Mode none brings up lo and does
// nothing else. Mode egress creates a veth pair whose sandbox end is eth0
// with a.IPv4/32 and a.IPv6/128 and default routes via the gateway, and
// programs the sandbox's nft chain, sets and anti-spoofing before the
// host end comes up. Attaching an attached id replaces its state.
func (n *Network) Attach(ctx context.Context, a Attachment, netnsPath string) error {
	if err := n.validateAttachment(a); err != nil {
		return err
	}
	ns, err := netns.GetFromPath(netnsPath)
	if err != nil {
		return fmt.Errorf("network: opening netns %s: %w", netnsPath, err)
	}
	defer ns.Close()
	h, err := netlink.NewHandleAt(ns)
	if err != nil {
		return fmt.Errorf("network: netlink in %s: %w", netnsPath, err)
	}
	defer h.Close()
	lo, err := h.LinkByName("lo")
	if err != nil {
		return fmt.Errorf("network: lo in sandbox: %w", err)
	}
	if err := h.LinkSetUp(lo); err != nil {
		return fmt.Errorf("network: lo up in sandbox: %w", err)
	}
	if a.Mode == ModeNone {
		return nil
	}
	if err := ctx.Err(); err != nil {
		return err
	}

	n.mu.Lock()
	defer n.mu.Unlock()
	tag := sandboxTag(a.ID)
	for _, other := range n.sandboxes {
		if other.id != a.ID && other.tag == tag {
			return fmt.Errorf("network: sandbox %s collides with %s (tag %s)", a.ID, other.id, tag)
		}
	}
	for _, ip := range []netip.Addr{a.IPv4, a.IPv6} {
		if o := n.byAddr[ip]; o != nil && o.id != a.ID {
			return fmt.Errorf("network: address %s belongs to sandbox %s", ip, o.id)
		}
	}
	if err := n.detachLocked(tag, a.ID); err != nil {
		return err
	}
	sb := &sandbox{
		id: a.ID, tag: tag, mode: a.Mode, v4: a.IPv4, v6: a.IPv6, mac: macFor(a.IPv4),
		rules: slices.Clone(a.Rules), names: map[netip.Addr]string{}, pins: pins{},
		redirect: slices.Clone(a.Redirect),
	}
	if err := n.attachLocked(ns, h, sb); err != nil {
		if derr := n.detachLocked(tag, a.ID); derr != nil {
			n.log.Error("cleaning up failed attach", "sandbox", a.ID, "err", derr)
		}
		return err
	}
	return nil
}

func (n *Network) attachLocked(ns netns.NsHandle, h *netlink.Handle, sb *sandbox) error {
	br, err := netlink.LinkByName(n.nm.bridge)
	if err != nil {
		return fmt.Errorf("network: bridge %s: %w", n.nm.bridge, err)
	}
	hostName := n.nm.veth(sb.tag)
	veth := &netlink.Veth{
		LinkAttrs:        netlink.LinkAttrs{Name: hostName, MTU: n.cfg.MTU, MasterIndex: br.Attrs().Index},
		PeerName:         "eth0",
		PeerHardwareAddr: sb.mac,
		PeerNamespace:    netlink.NsFd(int(ns)),
		PeerMTU:          uint32(n.cfg.MTU),
	}
	if err := netlink.LinkAdd(veth); err != nil {
		return fmt.Errorf("network: creating veth %s: %w", hostName, err)
	}
	host, err := netlink.LinkByName(hostName)
	if err != nil {
		return fmt.Errorf("network: veth %s: %w", hostName, err)
	}
	if err := netlink.LinkSetAlias(host, aliasPrefix+sb.id); err != nil {
		return fmt.Errorf("network: alias of %s: %w", hostName, err)
	}
	// Isolated bridge ports cannot talk to each other at L2 at all;
	// sandboxes reach each other only through the routed (filtered) path.
	if err := netlink.LinkSetIsolated(host, true); err != nil {
		return fmt.Errorf("network: isolating port %s: %w", hostName, err)
	}
	// Filters first, then the link.
	if err := n.programSandbox(sb, true); err != nil {
		return err
	}
	n.sandboxes[sb.id] = sb
	n.byAddr[sb.v4] = sb
	n.byAddr[sb.v6] = sb
	n.rings[sb.id] = newRing(n.cfg.FlowLogSize)

	if err := n.setNeighbours(br, sb); err != nil {
		return err
	}
	eth0, err := h.LinkByName("eth0")
	if err != nil {
		return fmt.Errorf("network: eth0 in sandbox: %w", err)
	}
	for _, ad := range []*netlink.Addr{
		{IPNet: prefixNet(netip.PrefixFrom(sb.v4, 32))},
		{IPNet: prefixNet(netip.PrefixFrom(sb.v6, 128)), Flags: unix.IFA_F_NODAD},
	} {
		if err := h.AddrAdd(eth0, ad); err != nil {
			return fmt.Errorf("network: address %s in sandbox: %w", ad.IPNet, err)
		}
	}
	if err := h.LinkSetUp(eth0); err != nil {
		return fmt.Errorf("network: eth0 up: %w", err)
	}
	idx := eth0.Attrs().Index
	for _, r := range []*netlink.Route{
		{LinkIndex: idx, Dst: prefixNet(netip.PrefixFrom(n.gw4, 32)), Scope: netlink.SCOPE_LINK},
		{LinkIndex: idx, Gw: ipOf(n.gw4)},
		{LinkIndex: idx, Dst: prefixNet(netip.PrefixFrom(n.gw6, 128)), Scope: netlink.SCOPE_LINK},
		{LinkIndex: idx, Gw: ipOf(n.gw6)},
	} {
		if err := h.RouteReplace(r); err != nil {
			return fmt.Errorf("network: route %v in sandbox: %w", r, err)
		}
	}
	if err := netlink.LinkSetUp(host); err != nil {
		return fmt.Errorf("network: %s up: %w", hostName, err)
	}
	return nil
}

// setNeighbours installs permanent neighbour entries for the sandbox on
// the bridge: the host never needs ARP or ND answers from a sandbox.
func (n *Network) setNeighbours(br netlink.Link, sb *sandbox) error {
	for _, ip := range []netip.Addr{sb.v4, sb.v6} {
		if err := netlink.NeighSet(&netlink.Neigh{
			LinkIndex: br.Attrs().Index, IP: ipOf(ip), HardwareAddr: sb.mac,
			State: netlink.NUD_PERMANENT, Family: familyOf(ip),
		}); err != nil {
			return fmt.Errorf("network: neighbour %s: %w", ip, err)
		}
	}
	return nil
}

func familyOf(a netip.Addr) int {
	if a.Is4() {
		return netlink.FAMILY_V4
	}
	return netlink.FAMILY_V6
}

// Adopt re-registers a sandbox attached by an earlier daemon (whose veth
// still exists) after a restart: its nft state is rewritten from a and
// the resolver serves it again. Connections are not disturbed.
func (n *Network) Adopt(ctx context.Context, a Attachment) error {
	if err := n.validateAttachment(a); err != nil {
		return err
	}
	if a.Mode == ModeNone {
		return nil
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	sb := &sandbox{
		id: a.ID, tag: sandboxTag(a.ID), mode: a.Mode, v4: a.IPv4, v6: a.IPv6, mac: macFor(a.IPv4),
		rules: slices.Clone(a.Rules), names: map[netip.Addr]string{}, pins: pins{},
		redirect: slices.Clone(a.Redirect),
	}
	l, err := netlink.LinkByName(n.nm.veth(sb.tag))
	if err != nil || l.Attrs().Alias != aliasPrefix+a.ID {
		return fmt.Errorf("%w: %s has no veth (attach it again)", ErrNotAttached, a.ID)
	}
	if err := n.programSandbox(sb, true); err != nil {
		return err
	}
	br, err := netlink.LinkByName(n.nm.bridge)
	if err != nil {
		return fmt.Errorf("network: bridge %s: %w", n.nm.bridge, err)
	}
	if err := n.setNeighbours(br, sb); err != nil {
		return err
	}
	n.sandboxes[sb.id] = sb
	n.byAddr[sb.v4] = sb
	n.byAddr[sb.v6] = sb
	if n.rings[sb.id] == nil {
		n.rings[sb.id] = newRing(n.cfg.FlowLogSize)
	}
	return nil
}

// SetRules replaces the sandbox's allow rules in one nft transaction; new
// connections see them at once, established ones are not cut. Pins of
// domain rules that stay are kept.
func (n *Network) SetRules(id string, rules []Rule) error {
	if err := egressrule.ValidateAll(rules); err != nil {
		return err
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	sb := n.sandboxes[id]
	if sb == nil {
		return fmt.Errorf("%w: %s", ErrNotAttached, id)
	}
	old := sb.rules
	sb.rules = slices.Clone(rules)
	if err := n.programSandbox(sb, false); err != nil {
		sb.rules = old
		return err
	}
	return nil
}

// Rules returns the sandbox's current allow rules.
func (n *Network) Rules(id string) ([]Rule, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	sb := n.sandboxes[id]
	if sb == nil {
		return nil, fmt.Errorf("%w: %s", ErrNotAttached, id)
	}
	return slices.Clone(sb.rules), nil
}

// Detach removes everything of the sandbox: the host veth (and with it
// eth0 if the namespace still exists), its nft chains, sets and map
// elements, neighbour and conntrack entries, and its flow ring. It is
// idempotent and works without the namespace (after the sandbox died).
func (n *Network) Detach(ctx context.Context, id string) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.detachLocked(sandboxTag(id), id)
}

// detachLocked removes the objects of tag; id, when known, guards against
// removing a colliding sandbox's veth.
func (n *Network) detachLocked(tag, id string) error {
	var errs []error
	if l, err := netlink.LinkByName(n.nm.veth(tag)); err == nil {
		alias := l.Attrs().Alias
		if id != "" && strings.HasPrefix(alias, aliasPrefix) && alias != aliasPrefix+id {
			return fmt.Errorf("network: %s belongs to %s, not %s", l.Attrs().Name, strings.TrimPrefix(alias, aliasPrefix), id)
		}
		if err := netlink.LinkDel(l); err != nil && !isNotFound(err) {
			errs = append(errs, fmt.Errorf("network: deleting %s: %w", l.Attrs().Name, err))
		}
	} else if !isNotFound(err) {
		errs = append(errs, err)
	}
	addrs, err := n.removeSandboxNFT(tag)
	if err != nil {
		errs = append(errs, err)
	}
	if sb := n.sandboxes[id]; sb != nil {
		addrs = append(addrs, sb.v4, sb.v6)
		delete(n.byAddr, sb.v4)
		delete(n.byAddr, sb.v6)
		delete(n.sandboxes, id)
	}
	delete(n.rings, id)
	if br, err := netlink.LinkByName(n.nm.bridge); err == nil {
		slices.SortFunc(addrs, netip.Addr.Compare)
		for _, ip := range slices.Compact(addrs) {
			err := netlink.NeighDel(&netlink.Neigh{LinkIndex: br.Attrs().Index, IP: ipOf(ip), Family: familyOf(ip)})
			if err != nil && !isNotFound(err) {
				errs = append(errs, fmt.Errorf("network: neighbour %s: %w", ip, err))
			}
		}
		n.flushConntrack(addrs)
	}
	return errors.Join(errs...)
}

// flushConntrack drops the conntrack entries of addrs so that a later
// sandbox with one of them inherits no flows. A conntrack dump costs ~10ms,
// so it runs in the background; Close waits for it.
func (n *Network) flushConntrack(addrs []netip.Addr) {
	if len(addrs) == 0 {
		return
	}
	n.bg.Add(1)
	go func() {
		defer n.bg.Done()
		for _, fam := range []netlink.InetFamily{unix.AF_INET, unix.AF_INET6} {
			var filters []netlink.CustomConntrackFilter
			for _, ip := range addrs {
				if ip.Is4() == (fam == unix.AF_INET) {
					f := &netlink.ConntrackFilter{}
					_ = f.AddIP(netlink.ConntrackOrigSrcIP, ipOf(ip))
					filters = append(filters, f)
				}
			}
			if len(filters) > 0 {
				_, _ = netlink.ConntrackDeleteFilters(netlink.ConntrackTable, fam, filters...)
			}
		}
	}()
}

// Prune detaches every sandbox of this instance found on the host whose
// id live rejects (or whose id cannot be told), and returns the ids (or
// tags) removed. Use it after adopting the live sandboxes at start.
func (n *Network) Prune(ctx context.Context, live func(id string) bool) ([]string, error) {
	found, err := n.found()
	if err != nil {
		return nil, err
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	var removed []string
	var errs []error
	for tag, id := range found {
		if id != "" && live(id) {
			continue
		}
		if err := n.detachLocked(tag, id); err != nil {
			errs = append(errs, err)
			continue
		}
		if id == "" {
			id = "tag:" + tag
		}
		removed = append(removed, id)
	}
	slices.Sort(removed)
	return removed, errors.Join(errs...)
}

// found maps the tags of sandboxes present on the host to their ids ("" if
// unknown), from veth aliases and chain rule user data.
func (n *Network) found() (map[string]string, error) {
	out := map[string]string{}
	links, err := Dump(netlink.LinkList)
	if err != nil {
		return nil, err
	}
	for _, l := range links {
		name := l.Attrs().Name
		if strings.HasPrefix(name, n.nm.prefix) && name != n.nm.bridge {
			out[strings.TrimPrefix(name, n.nm.prefix)] = strings.TrimPrefix(l.Attrs().Alias, aliasPrefix)
		}
	}
	c, err := n.conn()
	if err != nil {
		return nil, err
	}
	chains, err := c.ListChains()
	if err != nil {
		return nil, err
	}
	for _, ch := range chains {
		if ch.Table.Name != n.nm.table {
			continue
		}
		tag, ok := strings.CutPrefix(ch.Name, "sb-")
		if !ok {
			tag, ok = strings.CutPrefix(ch.Name, "sp-")
		}
		if !ok {
			continue
		}
		if out[tag] != "" {
			continue
		}
		out[tag] = ""
		t := n.nm.inet()
		if ch.Table.Family == nftables.TableFamilyBridge {
			t = n.nm.brTable()
		}
		rules, err := c.GetRules(t, &nftables.Chain{Table: t, Name: ch.Name})
		if err == nil {
			for _, r := range rules {
				if id, ok := strings.CutPrefix(string(r.UserData), "berth:"); ok {
					out[tag] = id
					break
				}
			}
		}
	}
	return out, nil
}

// Resources lists what of this instance exists on the host: interfaces
// (the bridge and every veth) and nft objects ("set:<family>/<name>",
// "chain:<family>/<name>" for every chain, "elem:<map>/<key>" for the
// dispatch and port map elements). For leak checks and doctor.
func (n *Network) Resources() (ifaces []string, sets []string, err error) {
	links, err := Dump(netlink.LinkList)
	if err != nil {
		return nil, nil, err
	}
	for _, l := range links {
		if strings.HasPrefix(l.Attrs().Name, n.nm.prefix) {
			ifaces = append(ifaces, l.Attrs().Name)
		}
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	c, err := n.conn()
	if err != nil {
		return nil, nil, err
	}
	fam := map[nftables.TableFamily]string{nftables.TableFamilyINet: "inet", nftables.TableFamilyBridge: "bridge"}
	for _, t := range []*nftables.Table{n.nm.inet(), n.nm.brTable()} {
		if _, err := c.ListTableOfFamily(t.Name, t.Family); err != nil {
			continue
		}
		ss, err := c.GetSets(t)
		if err != nil {
			return nil, nil, err
		}
		for _, s := range ss {
			sets = append(sets, "set:"+fam[t.Family]+"/"+s.Name)
			if s.Name == mapSB4 || s.Name == mapSB6 || s.Name == mapPorts || s.Name == mapRD4 {
				els, err := c.GetSetElements(s)
				if err != nil {
					return nil, nil, err
				}
				for _, e := range els {
					sets = append(sets, fmt.Sprintf("elem:%s/%x", s.Name, e.Key))
				}
			}
		}
	}
	chains, err := c.ListChains()
	if err != nil {
		return nil, nil, err
	}
	for _, ch := range chains {
		if ch.Table.Name == n.nm.table {
			if f, ok := fam[ch.Table.Family]; ok {
				sets = append(sets, "chain:"+f+"/"+ch.Name)
			}
		}
	}
	slices.Sort(ifaces)
	slices.Sort(sets)
	return ifaces, sets, nil
}
