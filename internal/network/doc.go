// Package network is the host side of sandbox networking: one bridge and
// two nftables tables per berth instance, a veth per sandbox, a DNS
// resolver that is the sandboxes' only way to turn names into reachable
// addresses, and a flow log of what each sandbox tried to reach.
//
// # Threat model
//
// Code in a sandbox is hostile. It is root in its own user namespace but
// holds no CAP_NET_ADMIN or CAP_NET_RAW there (see internal/runtime), so
// it cannot change its addresses or routes; the design does not rely on
// that: everything below is enforced on the host, outside the sandbox's
// reach. It may try to reach the host (the control API, the resolver's
// upstream, sshd), the cloud metadata service, other sandboxes, any
// address on the internet, and to exfiltrate data through DNS or through
// an allowed name whose DNS it controls. It may spoof source addresses and
// ARP. Allowed: exactly what its rules name.
//
// # Topology
//
// Names derive from Config.Instance: interfaces are "b<6 hex>-..." (the
// bridge "b<6 hex>-br", a sandbox's host veth "b<6 hex>-<7 hex of the id>",
// alias "berth-sandbox <id>"), both nft tables are named Instance. The
// bridge holds the gateway addresses (first address of Subnet4 and of
// Subnet6) and a fixed MAC (a bridge that inherits its ports' MACs changes
// address as ports come and go, which flushes the neighbour table). A
// sandbox's eth0 gets one /32 and one /128 with routes to the gateway
// only, so every packet it sends, even to another sandbox, is routed by
// the host through the inet forward hook. The host end is an isolated
// bridge port (no L2 path between sandboxes), and the host has permanent
// neighbour entries for the sandbox addresses.
//
// # Filtering (table inet <Instance>)
//
//   - forward: from the bridge → from_sb, to the bridge → to_sb.
//     from_sb: established/related accepted; invalid dropped; then a verdict
//     map on the source address (sb4, sb6) jumps to the sandbox's chain
//     sb-<tag>; an unknown source is logged and dropped.
//     to_sb: established/related only (nothing may open a connection to a
//     sandbox through the forward path).
//   - sb-<tag>, in order: CIDR rules that lie inside a protected range (the
//     explicit exceptions), jump guard_protected (metadata addresses
//     169.254.0.0/16 incl. 169.254.169.254 and 169.254.170.2,
//     100.100.100.200, 168.63.129.16, fd00:ec2::/32, link-local, loopback,
//     multicast, both sandbox subnets, Config.Protected → dropped), CIDR
//     rules naming port 53 or 853, jump guard_dns (any other DNS or DoT
//     → dropped), the other CIDR rules, the domain rules (lookups in
//     per-rule sets d4-/d6-<tag>-<rule tag> with timeouts), and finally
//     deny. Each allow logs "berth a <rule tag>", each deny
//     "berth d <reason>" (rate-limited) to NFLOG group Config.LogGroup.
//     A denied packet is rejected, not dropped (TCP: reset; else ICMP
//     administratively prohibited), so the client fails at once.
//   - input from the bridge: established/related, ICMPv6 neighbour
//     discovery, and udp/tcp 53 to the gateway addresses; everything else
//     (the control API, sshd, any host address) is logged and rejected.
//   - postrouting (nat): masquerade of both subnets out of any other link.
//
// The table's base chains have policy accept and act only on the bridge,
// so other forwarding on the host is untouched. br_netfilter is not used.
//
// # Anti-spoofing (table bridge <Instance>)
//
// A prerouting chain maps each port (by name, map "ports") to the
// sandbox's chain sp-<tag>, which drops frames whose source MAC, IPv4
// source, ARP sender or IPv6 source (other than link-local and ::) is not
// the sandbox's own, and any ethertype but IPv4, ARP and IPv6. Frames from
// a port of the instance that is not in the map are dropped. Source
// addresses seen by the inet table and the resolver are therefore proof
// of which sandbox sent a packet.
//
// # Names
//
// The resolver (github.com/miekg/dns) listens on the gateway addresses,
// port 53, UDP and TCP. It identifies the sandbox by source address,
// answers NXDOMAIN for names outside its domain rules (exact, or
// "*.suffix" for every name strictly below suffix) without asking
// anyone, forwards allowed names to Config.Upstream, and before replying
// adds every A/AAAA address of the answer to the sets of the matching
// rules with a timeout of the record's TTL (at least PinMinTTL, at most
// PinMaxTTL, and the TTL handed to the sandbox is capped to the pin). A
// name whose address changes is followed: the old address expires, the
// new one is pinned at the next lookup. Every query is a flow record.
//
// The resolver also keeps, per sandbox and bounded, which name each
// address was answered for and until when (Pinned): the domain sets are
// per rule, so a wildcard's set does not say which name an address
// belongs to, and the egress proxy must dial only an address the named
// host resolved to.
//
// # Egress-proxy redirect
//
// With Config.ProxyPort set, a sandbox whose Attachment.Redirect names
// hosts (the hosts of its egress secrets) gets an element in map rd4
// (source IPv4 → its chain rd-<tag>) under a nat prerouting chain: TCP 443
// to an address in the domain set of a rule covering a redirect name is
// DNATed to the gateway's ProxyPort, where the daemon's proxy reads the
// original destination (SO_ORIGINAL_DST). The in_sb chain accepts that
// port only for connections whose destination was NATed, so no sandbox
// reaches the proxy by its own address. Port 80 and IPv6 are not
// redirected (IPv6 to such a host goes out with the placeholder).
//
// # Flow log
//
// NFLOG (netlink, group Config.LogGroup) rather than conntrack events: the
// kernel reports allowed and denied attempts through one mechanism, the
// log prefix carries the rule or the reason, and denied packets never
// create conntrack entries. Allowed connections are logged once (only
// new connections reach a sandbox chain); denied packets are logged at
// most 200/s per deny chain. Records go to a bounded ring per sandbox
// (FlowLog) and to Config.OnFlow.
//
// # Lifecycle
//
// New is idempotent and adopts an existing bridge and tables, rewriting
// only the global chains. After a daemon restart call Adopt for each
// running sandbox and Prune for the rest; Detach is idempotent and
// removes the veth, both chains, the sets, the map elements, the
// neighbour and conntrack entries. Destroy removes the instance entirely.
// The host reaches a sandbox's ports directly (Dial): host-originated
// traffic passes the output hook, which berth does not filter.
package network
