package network

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/berth-sh/berth/internal/network/nflog"
	"github.com/google/nftables"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// Config configures one instance's sandbox network.
type Config struct {
	// Instance names everything this network creates on the host: the
	// bridge and veths (prefix "b<6 hex of sha256(Instance)>-"), the nft
	// tables (inet and bridge family, both named Instance) and the NFLOG
	// group. Two daemons with different instances never touch each other's
	// objects. Letters, digits, '-', '_' and '.', at most 64 characters.
	Instance string
	// Subnet4 is the sandboxes' IPv4 subnet; the gateway is its first
	// address, on the bridge. It must not overlap an address already on
	// the host. Default: 100.96.0.0/16, or, when that is taken (another
	// daemon's bridge, say), the first free /16 of 100.64.0.0/10 from one
	// derived from Instance on (see Network.Subnet4 for the one chosen).
	Subnet4 netip.Prefix
	// Subnet6 is the sandboxes' IPv6 subnet (a /64 or longer prefix
	// length up to /112); default a ULA /64 derived from Instance.
	Subnet6 netip.Prefix
	// Upstream are the resolvers berth forwards allowed names to; default
	// the nameservers of the host's /etc/resolv.conf.
	Upstream []netip.AddrPort
	// FlowLogSize is the flow ring size per sandbox (default 1000).
	FlowLogSize int
	// Protected are extra destinations no sandbox reaches unless one of
	// its CIDR rules lies inside them (e.g. the control API's address when
	// it is on another machine, or the host's LAN). Cloud metadata
	// addresses, link-local ranges, loopback, multicast and the sandbox
	// subnets are always protected.
	Protected []netip.Prefix
	// MTU of the bridge and veths; default the MTU of the link carrying
	// the host's default route, or 1500.
	MTU int
	// LogGroup is the NFLOG group the flow log reads; default derived from
	// Instance (1024 + hash mod 60000).
	LogGroup uint16
	// PinMinTTL is the shortest time a resolved address stays allowed
	// (records with a shorter TTL are pinned this long); default 5s.
	PinMinTTL time.Duration
	// PinMaxTTL caps a pin (and the TTL handed to the sandbox); default 1h.
	PinMaxTTL time.Duration
	// UpstreamTimeout bounds one upstream query; default 2s.
	UpstreamTimeout time.Duration
	// OnFlow, if set, is called for every flow record (from the flow-log
	// and DNS goroutines). It must not block: hand the record to a queue.
	OnFlow func(sandboxID string, f Flow)
	// Logger receives operational messages; default discards them.
	Logger *slog.Logger
	// ProxyPort, when set, is the TCP port of the egress proxy on the
	// IPv4 gateway: a sandbox's connections to port 443 of the addresses
	// pinned for its Attachment.Redirect names are DNATed there, and the
	// gateway accepts on that port only connections so redirected.
	ProxyPort uint16
}

// DefaultSubnet4 is the default IPv4 subnet of the sandboxes.
var DefaultSubnet4 = netip.MustParsePrefix("100.96.0.0/16")

// Network is the host side of sandbox networking for one instance.
type Network struct {
	cfg Config
	nm  names
	gw4 netip.Addr
	gw6 netip.Addr
	log *slog.Logger

	protected4, protected6 []netip.Prefix

	// mu guards the maps below and serialises every nft transaction
	// (github.com/google/nftables keeps a package-level set id counter).
	mu        sync.Mutex
	sandboxes map[string]*sandbox
	byAddr    map[netip.Addr]*sandbox
	rings     map[string]*ring

	dns   *resolver
	nflog *nflog.Reader
	bg    sync.WaitGroup // background conntrack flushes

	closeOnce sync.Once
	closeErr  error
}

// sandbox is the in-memory state of one attached sandbox.
type sandbox struct {
	id    string
	tag   string
	mode  string
	v4    netip.Addr
	v6    netip.Addr
	mac   net.HardwareAddr
	rules []Rule
	// names remembers the last name each pinned address was resolved
	// from, for the flow log (bounded).
	names map[netip.Addr]string
	// pins is which name resolved to which address, until when (Pinned).
	pins pins
	// redirect are the names whose TCP 443 goes to the egress proxy.
	redirect []string
}

// names derives every host object name from the instance string.
type names struct {
	instance string
	prefix   string // "b" + 6 hex + "-": every interface of the instance
	bridge   string
	table    string
	group    uint16
}

var instanceRE = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,64}$`)

func newNames(instance string) (names, error) {
	if !instanceRE.MatchString(instance) {
		return names{}, fmt.Errorf("network: invalid instance name %q", instance)
	}
	h := sha256.Sum256([]byte(instance))
	hx := hex.EncodeToString(h[:])
	p := "b" + hx[:6] + "-"
	return names{
		instance: instance,
		prefix:   p,
		bridge:   p + "br",
		table:    instance,
		group:    1024 + uint16(binary.BigEndian.Uint32(h[4:8])%60000),
	}, nil
}

// tag is the short per-sandbox identifier in object names.
func sandboxTag(id string) string {
	h := sha256.Sum256([]byte(id))
	return hex.EncodeToString(h[:])[:7]
}

func (nm names) veth(tag string) string    { return nm.prefix + tag } // 15 chars
func (nm names) sbChain(tag string) string { return "sb-" + tag }
func (nm names) spChain(tag string) string { return "sp-" + tag }
func (nm names) rdChain(tag string) string { return "rd-" + tag }
func (nm names) domainSet(fam int, tag, rtag string) string {
	return "d" + strconv.Itoa(fam) + "-" + tag + "-" + rtag
}

func (nm names) inet() *nftables.Table {
	return &nftables.Table{Name: nm.table, Family: nftables.TableFamilyINet}
}
func (nm names) brTable() *nftables.Table {
	return &nftables.Table{Name: nm.table, Family: nftables.TableFamilyBridge}
}

// ula derives a stable fdXX:XXXX:XXXX::/64 from the instance name.
func ula(instance string) netip.Prefix {
	h := sha256.Sum256([]byte("berth-ula:" + instance))
	var a [16]byte
	a[0] = 0xfd
	copy(a[1:6], h[:5])
	return netip.PrefixFrom(netip.AddrFrom16(a), 64)
}

// autoSubnet4 returns DefaultSubnet4 if no address of the host overlaps
// it, else the first free /16 of 100.64.0.0/10 (CGNAT space, which no
// sandbox needs to reach), starting from one derived from instance so that
// daemons started together tend to pick different ones.
func autoSubnet4(instance string, taken func(netip.Prefix) bool) (netip.Prefix, error) {
	if !taken(DefaultSubnet4) {
		return DefaultSubnet4, nil
	}
	h := sha256.Sum256([]byte("berth-subnet4:" + instance))
	start := int(h[0]) % 64
	for i := range 64 {
		p := netip.PrefixFrom(netip.AddrFrom4([4]byte{100, byte(64 + (start+i)%64), 0, 0}), 16)
		if !taken(p) {
			return p, nil
		}
	}
	return netip.Prefix{}, errors.New("network: every /16 of 100.64.0.0/10 overlaps an address of the host; configure a subnet")
}

func (c *Config) setDefaults() error {
	if !c.Subnet4.IsValid() {
		c.Subnet4 = DefaultSubnet4
	}
	if !c.Subnet6.IsValid() {
		c.Subnet6 = ula(c.Instance)
	}
	c.Subnet4, c.Subnet6 = c.Subnet4.Masked(), c.Subnet6.Masked()
	if !c.Subnet4.Addr().Is4() || c.Subnet4.Bits() > 29 || c.Subnet4.Bits() < 8 {
		return fmt.Errorf("network: Subnet4 %s: want an IPv4 prefix between /8 and /29", c.Subnet4)
	}
	if !c.Subnet6.Addr().Is6() || c.Subnet6.Addr().Is4In6() || c.Subnet6.Bits() < 48 || c.Subnet6.Bits() > 112 {
		return fmt.Errorf("network: Subnet6 %s: want an IPv6 prefix between /48 and /112", c.Subnet6)
	}
	if 128-c.Subnet6.Bits() < 32-c.Subnet4.Bits() {
		return fmt.Errorf("network: Subnet6 %s has fewer addresses than Subnet4 %s", c.Subnet6, c.Subnet4)
	}
	if len(c.Upstream) == 0 {
		ups, err := resolvConfServers("/etc/resolv.conf")
		if err != nil || len(ups) == 0 {
			return fmt.Errorf("network: no Upstream resolvers given and none in /etc/resolv.conf: %v", err)
		}
		c.Upstream = ups
	}
	if c.FlowLogSize <= 0 {
		c.FlowLogSize = 1000
	}
	if c.PinMinTTL <= 0 {
		c.PinMinTTL = 5 * time.Second
	}
	if c.PinMaxTTL <= 0 {
		c.PinMaxTTL = time.Hour
	}
	if c.PinMaxTTL < c.PinMinTTL {
		c.PinMaxTTL = c.PinMinTTL
	}
	if c.UpstreamTimeout <= 0 {
		c.UpstreamTimeout = 2 * time.Second
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	return nil
}

// resolvConfServers reads nameserver lines (port 53).
// ResolvConfServers are the nameservers of a resolv.conf file, port 53
// (the Kubernetes backend's resolver's default upstreams).
func ResolvConfServers(path string) ([]netip.AddrPort, error) { return resolvConfServers(path) }

func resolvConfServers(path string) ([]netip.AddrPort, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var out []netip.AddrPort
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) >= 2 && f[0] == "nameserver" {
			if a, err := netip.ParseAddr(f[1]); err == nil {
				out = append(out, netip.AddrPortFrom(a.WithZone(""), 53))
			}
		}
	}
	return out, nil
}

// New creates or adopts the instance's bridge and nft tables, enables
// forwarding, starts the flow-log reader and the DNS resolver on the
// gateway addresses, port 53. It is idempotent: per-sandbox state left by
// a previous daemon stays in the kernel until Adopt, Detach or Prune.
func New(ctx context.Context, cfg Config) (*Network, error) {
	nm, err := newNames(cfg.Instance)
	if err != nil {
		return nil, err
	}
	// Two daemons starting together would each see a subnet free before
	// either had put it on its bridge, and both take it: the choice, the
	// overlap check and the bridge's address are made under a lock every
	// daemon of the host takes.
	unlock, err := lockHostNetwork()
	if err != nil {
		return nil, err
	}
	defer unlock()
	if !cfg.Subnet4.IsValid() {
		// This instance's own bridge (left by an earlier run) is no
		// reason to move.
		host, err := hostPrefixes(nm.bridge)
		if err != nil {
			return nil, err
		}
		if cfg.Subnet4, err = autoSubnet4(cfg.Instance, func(p netip.Prefix) bool { return host.overlap(p) != "" }); err != nil {
			return nil, err
		}
	}
	if err := cfg.setDefaults(); err != nil {
		return nil, err
	}
	if cfg.LogGroup == 0 {
		cfg.LogGroup = nm.group
	}
	nm.group = cfg.LogGroup
	n := &Network{
		cfg:       cfg,
		nm:        nm,
		gw4:       cfg.Subnet4.Addr().Next(),
		gw6:       cfg.Subnet6.Addr().Next(),
		log:       cfg.Logger,
		sandboxes: map[string]*sandbox{},
		byAddr:    map[netip.Addr]*sandbox{},
		rings:     map[string]*ring{},
	}
	n.protected4, n.protected6 = protectedPrefixes(cfg)
	if n.cfg.MTU <= 0 {
		n.cfg.MTU = uplinkMTU()
	}
	if err := n.checkSubnets(); err != nil {
		return nil, err
	}
	if err := n.ensureBridge(); err != nil {
		return nil, err
	}
	if err := enableForwarding(); err != nil {
		return nil, err
	}
	n.mu.Lock()
	err = n.ensureTables()
	n.mu.Unlock()
	if err != nil {
		return nil, err
	}
	if n.nflog, err = nflog.Start(n.cfg.LogGroup, n.handleLog, n.log); err != nil {
		return nil, err
	}
	if n.dns, err = startResolver(n); err != nil {
		n.nflog.Close()
		return nil, err
	}
	n.log.Info("sandbox network ready", "instance", nm.instance, "bridge", nm.bridge,
		"subnet4", cfg.Subnet4, "subnet6", cfg.Subnet6, "log_group", cfg.LogGroup)
	return n, nil
}

// protectedPrefixes are the destinations that need an explicit rule.
func protectedPrefixes(cfg Config) (v4, v6 []netip.Prefix) {
	for _, s := range []string{
		"169.254.0.0/16",     // link-local: AWS/GCP/Azure/OCI/DO metadata .169.254, ECS .170.2, AWS DNS .169.253
		"100.100.100.200/32", // Alibaba Cloud metadata
		"168.63.129.16/32",   // Azure WireServer
		"127.0.0.0/8", "0.0.0.0/8", "224.0.0.0/4", "255.255.255.255/32",
	} {
		v4 = append(v4, netip.MustParsePrefix(s))
	}
	v4 = append(v4, cfg.Subnet4)
	for _, s := range []string{
		"fe80::/10",     // link-local
		"fd00:ec2::/32", // AWS metadata fd00:ec2::254, DNS ::23, NTP ::123
		"::1/128", "::/128", "ff00::/8", "::ffff:0:0/96",
	} {
		v6 = append(v6, netip.MustParsePrefix(s))
	}
	v6 = append(v6, cfg.Subnet6)
	for _, p := range cfg.Protected {
		p = p.Masked()
		if p.Addr().Is4() {
			v4 = append(v4, p)
		} else if p.IsValid() {
			v6 = append(v6, p)
		}
	}
	return v4, v6
}

// isProtected reports whether a CIDR rule lies inside a protected range
// (and so is an explicit exception to it).
func (n *Network) insideProtected(p netip.Prefix) bool {
	list := n.protected6
	if p.Addr().Is4() {
		list = n.protected4
	}
	for _, q := range list {
		if insidePrefix(p.Masked(), q) {
			return true
		}
	}
	return false
}

// uplinkMTU is the smallest MTU of the links carrying a default route.
func uplinkMTU() int {
	mtu := 0
	for _, fam := range []int{netlink.FAMILY_V4, netlink.FAMILY_V6} {
		routes, err := netlink.RouteListFiltered(fam, &netlink.Route{Table: unix.RT_TABLE_MAIN}, netlink.RT_FILTER_TABLE)
		if err != nil {
			continue
		}
		for _, r := range routes {
			if r.Dst != nil && !r.Dst.IP.IsUnspecified() {
				continue
			}
			if r.Dst != nil {
				if ones, _ := r.Dst.Mask.Size(); ones != 0 {
					continue
				}
			}
			if l, err := netlink.LinkByIndex(r.LinkIndex); err == nil {
				if m := l.Attrs().MTU; m >= 1280 && (mtu == 0 || m < mtu) {
					mtu = m
				}
			}
		}
	}
	if mtu == 0 {
		mtu = 1500
	}
	return mtu
}

// checkSubnets refuses subnets that overlap an address on another link.
func (n *Network) checkSubnets() error {
	host, err := hostPrefixes(n.nm.bridge)
	if err != nil {
		return err
	}
	for _, s := range []netip.Prefix{n.cfg.Subnet4, n.cfg.Subnet6} {
		if what := host.overlap(s); what != "" {
			return fmt.Errorf("network: subnet %s overlaps %s; configure another subnet", s, what)
		}
	}
	return nil
}

// hostNet is one of the host's addresses as a prefix, with its link.
type hostNet struct {
	p    netip.Prefix
	link string
}

// hostNets are the host's addresses.
type hostNets []hostNet

// hostPrefixes reads the addresses of every link but except (link-local
// ones left out: they never collide with a sandbox subnet).
func hostPrefixes(except string) (hostNets, error) {
	addrs, err := Dump(func() ([]netlink.Addr, error) { return netlink.AddrList(nil, netlink.FAMILY_ALL) })
	if err != nil {
		return nil, fmt.Errorf("network: listing host addresses: %w", err)
	}
	var out hostNets
	for _, a := range addrs {
		l, err := netlink.LinkByIndex(a.LinkIndex)
		if err != nil || l.Attrs().Name == except {
			continue
		}
		ip, ok := netip.AddrFromSlice(a.IP)
		if !ok {
			continue
		}
		ones, _ := a.Mask.Size()
		if p := netip.PrefixFrom(ip.Unmap(), ones).Masked(); !p.Addr().IsLinkLocalUnicast() {
			out = append(out, hostNet{p, l.Attrs().Name})
		}
	}
	return out, nil
}

// overlap names the host address that overlaps s, or returns "".
func (h hostNets) overlap(s netip.Prefix) string {
	for _, a := range h {
		if s.Overlaps(a.p) {
			return a.p.String() + " on " + a.link
		}
	}
	return ""
}

// Subnet4 returns the sandboxes' IPv4 subnet in use.
func (n *Network) Subnet4() netip.Prefix { return n.cfg.Subnet4 }

// ensureBridge creates or adopts the bridge with the gateway addresses.
func (n *Network) ensureBridge() error {
	l, err := netlink.LinkByName(n.nm.bridge)
	if err != nil {
		var nf netlink.LinkNotFoundError
		if !errors.As(err, &nf) {
			return fmt.Errorf("network: bridge %s: %w", n.nm.bridge, err)
		}
		// A fixed MAC: a bridge that takes its ports' lowest MAC changes
		// address as sandboxes come and go, and every change flushes the
		// neighbour table, permanent entries included.
		h := sha256.Sum256([]byte("berth-bridge:" + n.nm.instance))
		mac := net.HardwareAddr{0x02, 0xb8, h[0], h[1], h[2], h[3]}
		br := &netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: n.nm.bridge, MTU: n.cfg.MTU, HardwareAddr: mac}}
		if err := netlink.LinkAdd(br); err != nil && !errors.Is(err, unix.EEXIST) {
			return fmt.Errorf("network: creating bridge %s: %w", n.nm.bridge, err)
		}
		if l, err = netlink.LinkByName(n.nm.bridge); err != nil {
			return fmt.Errorf("network: bridge %s: %w", n.nm.bridge, err)
		}
	} else if l.Type() != "bridge" {
		return fmt.Errorf("network: %s exists and is a %s, not a bridge", n.nm.bridge, l.Type())
	}
	_ = netlink.LinkSetAlias(l, "berth "+n.nm.instance)
	// The host reaches sandboxes through static neighbour entries; it
	// never redirects one sandbox to another.
	_ = writeSysctl("net/ipv4/conf/"+n.nm.bridge+"/send_redirects", "0")
	_ = writeSysctl("net/ipv6/conf/"+n.nm.bridge+"/accept_ra", "0")
	for _, a := range []*netlink.Addr{
		{IPNet: prefixNet(netip.PrefixFrom(n.gw4, n.cfg.Subnet4.Bits()))},
		{IPNet: prefixNet(netip.PrefixFrom(n.gw6, n.cfg.Subnet6.Bits())), Flags: unix.IFA_F_NODAD},
	} {
		if err := netlink.AddrReplace(l, a); err != nil {
			return fmt.Errorf("network: address %s on %s: %w", a.IPNet, n.nm.bridge, err)
		}
	}
	if err := netlink.LinkSetUp(l); err != nil {
		return fmt.Errorf("network: bridge %s up: %w", n.nm.bridge, err)
	}
	return nil
}

func prefixNet(p netip.Prefix) *net.IPNet {
	a := p.Addr()
	return &net.IPNet{IP: net.IP(a.AsSlice()), Mask: net.CIDRMask(p.Bits(), a.BitLen())}
}

func ipOf(a netip.Addr) net.IP { return net.IP(a.AsSlice()) }

// writeSysctl writes /proc/sys/<key>. Network sysctls belong to the
// network namespace of the writing thread.
func writeSysctl(key, val string) error {
	return os.WriteFile(filepath.Join("/proc/sys", key), []byte(val), 0o644)
}

func readSysctl(key string) string {
	b, _ := os.ReadFile(filepath.Join("/proc/sys", key))
	return strings.TrimSpace(string(b))
}

// enableForwarding turns on IPv4 and IPv6 forwarding. Turning on IPv6
// forwarding makes the kernel ignore router advertisements on interfaces
// with accept_ra=1, which would cut a SLAAC-configured host off the
// network; those are moved to accept_ra=2 first (as Docker does).
func enableForwarding() error {
	if readSysctl("net/ipv6/conf/all/forwarding") != "1" {
		entries, _ := os.ReadDir("/proc/sys/net/ipv6/conf")
		for _, e := range entries {
			k := "net/ipv6/conf/" + e.Name() + "/accept_ra"
			if readSysctl(k) == "1" {
				_ = writeSysctl(k, "2")
			}
		}
		if err := writeSysctl("net/ipv6/conf/all/forwarding", "1"); err != nil {
			return fmt.Errorf("network: enabling IPv6 forwarding: %w", err)
		}
	}
	if readSysctl("net/ipv4/ip_forward") != "1" {
		if err := writeSysctl("net/ipv4/ip_forward", "1"); err != nil {
			return fmt.Errorf("network: enabling IPv4 forwarding: %w", err)
		}
	}
	return nil
}

// ResolvConf is the resolv.conf a sandbox in egress mode should see: the
// gateway resolver only.
func (n *Network) ResolvConf() string {
	return fmt.Sprintf("nameserver %s\nnameserver %s\noptions edns0\n", n.gw4, n.gw6)
}

// Gateways returns the gateway (and resolver) addresses on the bridge.
func (n *Network) Gateways() (v4, v6 netip.Addr) { return n.gw4, n.gw6 }

// Bridge returns the bridge interface name.
func (n *Network) Bridge() string { return n.nm.bridge }

// Dial connects from the host (the daemon's port proxy) to port on the
// sandbox id's IPv4 address. Host-originated connections pass the output
// hook, which berth does not filter; the replies are established traffic.
func (n *Network) Dial(ctx context.Context, id string, port uint16) (net.Conn, error) {
	n.mu.Lock()
	sb := n.sandboxes[id]
	n.mu.Unlock()
	if sb == nil || sb.mode != ModeEgress {
		return nil, fmt.Errorf("network: sandbox %s is not attached in egress mode", id)
	}
	var d net.Dialer
	return d.DialContext(ctx, "tcp", netip.AddrPortFrom(sb.v4, port).String())
}

// Close stops the resolver and the flow-log reader. The bridge, tables and
// per-sandbox state stay for the running sandboxes.
func (n *Network) Close() error {
	n.closeOnce.Do(func() {
		if n.dns != nil {
			n.closeErr = n.dns.close()
		}
		if n.nflog != nil {
			n.nflog.Close()
		}
		n.bg.Wait()
	})
	return n.closeErr
}

// Destroy removes everything instance ever created on this host: the nft
// tables (with every per-sandbox chain, set and element), the bridge and
// every veth of the instance. For tests and uninstall; running sandboxes
// lose their network.
func Destroy(instance string) error {
	nm, err := newNames(instance)
	if err != nil {
		return err
	}
	var errs []error
	c, err := nftables.New()
	if err != nil {
		return err
	}
	for _, t := range []*nftables.Table{nm.inet(), nm.brTable()} {
		if _, err := c.ListTableOfFamily(t.Name, t.Family); err == nil {
			c.DelTable(t)
		}
	}
	if err := c.Flush(); err != nil {
		errs = append(errs, fmt.Errorf("network: deleting tables: %w", err))
	}
	links, err := Dump(netlink.LinkList)
	if err != nil {
		errs = append(errs, err)
	}
	for _, l := range links {
		if strings.HasPrefix(l.Attrs().Name, nm.prefix) {
			if err := netlink.LinkDel(l); err != nil && !isNotFound(err) {
				errs = append(errs, fmt.Errorf("network: deleting %s: %w", l.Attrs().Name, err))
			}
		}
	}
	return errors.Join(errs...)
}

func isNotFound(err error) bool {
	var nf netlink.LinkNotFoundError
	return errors.As(err, &nf) || errors.Is(err, unix.ENODEV) || errors.Is(err, unix.ENOENT)
}

// Exists reports whether instance's bridge exists on this host (in this
// network namespace): whether a daemon of that instance ever set up egress.
func Exists(instance string) bool {
	nm, err := newNames(instance)
	if err != nil {
		return false
	}
	_, err = netlink.LinkByName(nm.bridge)
	return err == nil
}

// HostObjects are the host objects of one instance that exist in one
// network namespace: what Destroy would remove.
type HostObjects struct {
	Bridge string   // the bridge's name, "" when it does not exist
	Veths  []string // host ends of sandboxes' veths
	Tables []string // nft tables, as "<family>/<name>"
}

// Objects lists instance's host objects in the network namespace at
// netnsPath ("" = this process's), for leak checks: the same names
// Destroy removes, so a checker cannot disagree with it about what is
// this instance's.
func Objects(instance, netnsPath string) (HostObjects, error) {
	var out HostObjects
	nm, err := newNames(instance)
	if err != nil {
		return out, err
	}
	h := &netlink.Handle{} // this namespace's
	var nftOpts []nftables.ConnOption
	if netnsPath != "" {
		ns, err := netns.GetFromPath(netnsPath)
		if err != nil {
			return out, fmt.Errorf("network: %s: %w", netnsPath, err)
		}
		defer ns.Close()
		if h, err = netlink.NewHandleAt(ns); err != nil {
			return out, fmt.Errorf("network: netlink in %s: %w", netnsPath, err)
		}
		defer h.Close()
		nftOpts = append(nftOpts, nftables.WithNetNSFd(int(ns)))
	}
	links, err := Dump(h.LinkList)
	if err != nil {
		return out, err
	}
	for _, l := range links {
		switch name := l.Attrs().Name; {
		case name == nm.bridge:
			out.Bridge = name
		case strings.HasPrefix(name, nm.prefix):
			out.Veths = append(out.Veths, name)
		}
	}
	c, err := nftables.New(nftOpts...)
	if err != nil {
		return out, err
	}
	fam := map[nftables.TableFamily]string{nftables.TableFamilyINet: "inet", nftables.TableFamilyBridge: "bridge"}
	for _, t := range []*nftables.Table{nm.inet(), nm.brTable()} {
		if _, err := c.ListTableOfFamily(t.Name, t.Family); err == nil {
			out.Tables = append(out.Tables, fam[t.Family]+"/"+t.Name)
		}
	}
	return out, nil
}
