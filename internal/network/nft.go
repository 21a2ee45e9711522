package network

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"

	"github.com/berth-sh/berth/internal/network/egressrule"
	"github.com/berth-sh/berth/internal/network/nftexpr"
)

// Object names inside the instance's tables.
const (
	chForward        = "forward"
	chInput          = "input"
	chNAT            = "postrouting"
	chFromSB         = "from_sb"
	chToSB           = "to_sb"
	chInSB           = "in_sb"
	chGuardProtected = "guard_protected"
	chGuardDNS       = "guard_dns"
	chDenyProtected  = "deny_protected"
	chDenyDNS        = "deny_dns"
	chDenyNoRule     = "deny_norule"
	mapSB4           = "sb4"
	mapRD4           = "rd4" // source address → the sandbox's egress-proxy redirect chain
	chPreNAT         = "prerouting"
	mapSB6           = "sb6"
	chBrPre          = "pre"
	mapPorts         = "ports"
)

// Log prefixes: "berth <decision> <reason or rule tag>".
const (
	logPrefix        = "berth "
	reasonNoRule     = "norule"
	reasonProtected  = "protected"
	reasonDNS        = "dns"
	reasonHost       = "host"
	reasonInbound    = "inbound"
	reasonUnknown    = "unknown"
	reasonNotAllowed = "notallowed" // DNS: name not allowed
)

// deny logs are rate limited per chain so a flood cannot swamp the reader.
const denyLogRate, denyLogBurst = 200, 400

func (n *Network) conn() (*nftables.Conn, error) { return nftables.New() }

// nftBatchRules is how many rules of a sandbox's chain go in one netlink
// batch: well inside the default socket send buffer (212992 bytes) at
// about 1 KiB a rule with its log expression.
const nftBatchRules = 64

// ---- expression helpers: see package nftexpr ----

func (n *Network) logTo(prefix string) *expr.Log {
	return &expr.Log{
		Key:     1<<unix.NFTA_LOG_GROUP | 1<<unix.NFTA_LOG_PREFIX | 1<<unix.NFTA_LOG_SNAPLEN,
		Group:   n.cfg.LogGroup,
		Snaplen: 128,
		Data:    []byte(prefix),
	}
}

func limited() *expr.Limit {
	return &expr.Limit{Type: expr.LimitTypePkts, Rate: denyLogRate, Unit: expr.LimitTimeSecond, Burst: denyLogBurst}
}

// ---- global objects ----

func (n *Network) dispatchMaps() (sb4, sb6 *nftables.Set) {
	t := n.nm.inet()
	return &nftables.Set{Table: t, Name: mapSB4, KeyType: nftables.TypeIPAddr, DataType: nftables.TypeVerdict, IsMap: true},
		&nftables.Set{Table: t, Name: mapSB6, KeyType: nftables.TypeIP6Addr, DataType: nftables.TypeVerdict, IsMap: true}
}

func (n *Network) redirectMap() *nftables.Set {
	return &nftables.Set{Table: n.nm.inet(), Name: mapRD4, KeyType: nftables.TypeIPAddr, DataType: nftables.TypeVerdict, IsMap: true}
}

// ctDNAT matches a connection whose destination was NATed.
func ctDNAT() []expr.Any {
	const ipsDstNAT = 1 << 5 // IPS_DST_NAT of nf_conntrack_common.h
	mask := make([]byte, 4)
	binary.NativeEndian.PutUint32(mask, ipsDstNAT)
	return []expr.Any{
		&expr.Ct{Register: 1, Key: expr.CtKeySTATUS},
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4, Mask: mask, Xor: make([]byte, 4)},
		&expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: make([]byte, 4)},
	}
}

// redirects reports whether domain rule r covers one of sb's redirect
// names.
func redirects(sb *sandbox, r Rule) bool { return redirectsRule(sb.redirect, r) }

// redirectsRule reports whether domain rule r covers one of the redirect
// host names.
func redirectsRule(redirect []string, r Rule) bool {
	if r.Domain == "" {
		return false
	}
	for _, h := range redirect {
		if egressrule.MatchDomain(r.Domain, egressrule.NormDomain(h)) {
			return true
		}
	}
	return false
}

func (n *Network) portsMap() *nftables.Set {
	return &nftables.Set{Table: n.nm.brTable(), Name: mapPorts, KeyType: nftables.TypeIFName, DataType: nftables.TypeVerdict, IsMap: true}
}

// ensureTables creates or refreshes the instance's tables, maps and global
// chains in one transaction. Per-sandbox chains, sets and map elements are
// left alone (adoption). Caller holds n.mu.
func (n *Network) ensureTables() error {
	c, err := n.conn()
	if err != nil {
		return err
	}
	inet, brt := n.nm.inet(), n.nm.brTable()
	c.AddTable(inet)
	c.AddTable(brt)
	if err := c.Flush(); err != nil {
		return fmt.Errorf("network: creating nft tables %s: %w", n.nm.table, err)
	}
	existing := map[string]bool{}
	for _, t := range []*nftables.Table{inet, brt} {
		sets, err := c.GetSets(t)
		if err != nil {
			return fmt.Errorf("network: listing nft sets: %w", err)
		}
		for _, s := range sets {
			existing[fmt.Sprint(t.Family, s.Name)] = true
		}
	}
	sb4, sb6 := n.dispatchMaps()
	ports := n.portsMap()
	rd4 := n.redirectMap()
	for _, s := range []*nftables.Set{sb4, sb6, ports, rd4} {
		if !existing[fmt.Sprint(s.Table.Family, s.Name)] {
			if err := c.AddSet(s, nil); err != nil {
				return err
			}
		}
	}

	policy := nftables.ChainPolicyAccept
	base := func(t *nftables.Table, name string, typ nftables.ChainType, hook *nftables.ChainHook, prio *nftables.ChainPriority) *nftables.Chain {
		ch := c.AddChain(&nftables.Chain{Table: t, Name: name, Type: typ, Hooknum: hook, Priority: prio, Policy: &policy})
		c.FlushChain(ch)
		return ch
	}
	reg := func(t *nftables.Table, name string) *nftables.Chain {
		ch := c.AddChain(&nftables.Chain{Table: t, Name: name})
		c.FlushChain(ch)
		return ch
	}
	rule := func(ch *nftables.Chain, e ...[]expr.Any) {
		c.AddRule(&nftables.Rule{Table: ch.Table, Chain: ch, Exprs: nftexpr.Cat(e...)})
	}
	br := n.nm.bridge

	// Regular chains first: base chains jump to them.
	fromSB := reg(inet, chFromSB)
	toSB := reg(inet, chToSB)
	inSB := reg(inet, chInSB)
	guardP := reg(inet, chGuardProtected)
	guardD := reg(inet, chGuardDNS)
	denyP := reg(inet, chDenyProtected)
	denyD := reg(inet, chDenyDNS)
	denyN := reg(inet, chDenyNoRule)

	fwd := base(inet, chForward, nftables.ChainTypeFilter, nftables.ChainHookForward, nftables.ChainPriorityFilter)
	rule(fwd, nftexpr.IfnameCmp(expr.MetaKeyIIFNAME, expr.CmpOpEq, br), nftexpr.One(nftexpr.Jump(chFromSB)))
	rule(fwd, nftexpr.IfnameCmp(expr.MetaKeyOIFNAME, expr.CmpOpEq, br), nftexpr.One(nftexpr.Jump(chToSB)))

	in := base(inet, chInput, nftables.ChainTypeFilter, nftables.ChainHookInput, nftables.ChainPriorityFilter)
	rule(in, nftexpr.IfnameCmp(expr.MetaKeyIIFNAME, expr.CmpOpEq, br), nftexpr.One(nftexpr.Jump(chInSB)))

	nat := base(inet, chNAT, nftables.ChainTypeNAT, nftables.ChainHookPostrouting, nftables.ChainPriorityNATSource)
	for _, s := range []netip.Prefix{n.cfg.Subnet4, n.cfg.Subnet6} {
		rule(nat, nftexpr.NFProto(s.Addr().Is4()), nftexpr.AddrMatch(true, s, expr.CmpOpEq),
			nftexpr.IfnameCmp(expr.MetaKeyOIFNAME, expr.CmpOpNeq, br), nftexpr.One(&expr.Masq{}))
	}

	// Egress-proxy redirects: a sandbox with egress secrets has an
	// element in rd4 jumping to its rd-<tag> chain of DNAT rules.
	dnat := base(inet, chPreNAT, nftables.ChainTypeNAT, nftables.ChainHookPrerouting, nftables.ChainPriorityNATDest)
	rule(dnat, nftexpr.IfnameCmp(expr.MetaKeyIIFNAME, expr.CmpOpEq, br), nftexpr.NFProto(true),
		nftexpr.One(&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: 12, Len: 4}),
		nftexpr.One(&expr.Lookup{SourceRegister: 1, SetName: mapRD4, SetID: rd4.ID, DestRegister: 0, IsDestRegSet: true}))

	established := nftexpr.CTState(expr.CtStateBitESTABLISHED | expr.CtStateBitRELATED)
	rule(fromSB, established, nftexpr.One(nftexpr.Accept()))
	rule(fromSB, nftexpr.CTState(expr.CtStateBitINVALID), nftexpr.One(nftexpr.Drop()))
	rule(fromSB, nftexpr.NFProto(true),
		nftexpr.One(&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: 12, Len: 4}),
		nftexpr.One(&expr.Lookup{SourceRegister: 1, SetName: mapSB4, SetID: sb4.ID, DestRegister: 0, IsDestRegSet: true}))
	rule(fromSB, nftexpr.NFProto(false),
		nftexpr.One(&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: 8, Len: 16}),
		nftexpr.One(&expr.Lookup{SourceRegister: 1, SetName: mapSB6, SetID: sb6.ID, DestRegister: 0, IsDestRegSet: true}))
	rule(fromSB, nftexpr.One(limited()), nftexpr.One(n.logTo(logPrefix+"d "+reasonUnknown)))
	rule(fromSB, nftexpr.One(nftexpr.Drop()))

	rule(toSB, established, nftexpr.One(nftexpr.Accept()))
	rule(toSB, nftexpr.One(limited()), nftexpr.One(n.logTo(logPrefix+"d "+reasonInbound)))
	rule(toSB, nftexpr.One(nftexpr.Drop()))

	rule(inSB, established, nftexpr.One(nftexpr.Accept()))
	// Neighbour discovery with the gateway.
	for _, typ := range []byte{135, 136} {
		rule(inSB, nftexpr.NFProto(false), nftexpr.L4Proto(protoICMPv6),
			nftexpr.One(&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: 0, Len: 1}),
			nftexpr.One(&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{typ}}), nftexpr.One(nftexpr.Accept()))
	}
	for _, gw := range []netip.Addr{n.gw4, n.gw6} {
		for _, p := range []uint8{protoUDP, protoTCP} {
			rule(inSB, nftexpr.NFProto(gw.Is4()), nftexpr.AddrMatch(false, netip.PrefixFrom(gw, gw.BitLen()), expr.CmpOpEq),
				nftexpr.L4Proto(p), nftexpr.DPort(53), nftexpr.One(nftexpr.Accept()))
		}
	}
	if n.cfg.ProxyPort != 0 {
		// The egress proxy, reached only through a redirect (a
		// connection straight to the gateway's port is dropped).
		rule(inSB, nftexpr.NFProto(true), nftexpr.AddrMatch(false, netip.PrefixFrom(n.gw4, 32), expr.CmpOpEq),
			nftexpr.L4Proto(protoTCP), nftexpr.DPort(n.cfg.ProxyPort), ctDNAT(), nftexpr.One(nftexpr.Accept()))
	}
	rule(inSB, nftexpr.One(limited()), nftexpr.One(n.logTo(logPrefix+"d "+reasonHost)))
	for _, e := range nftexpr.Reject() {
		rule(inSB, e)
	}

	for _, p := range slices.Concat(n.protected4, n.protected6) {
		rule(guardP, nftexpr.NFProto(p.Addr().Is4()), nftexpr.AddrMatch(false, p, expr.CmpOpEq), nftexpr.One(nftexpr.Goto(chDenyProtected)))
	}
	for _, p := range []uint8{protoUDP, protoTCP} {
		for _, port := range []uint16{53, 853} {
			rule(guardD, nftexpr.L4Proto(p), nftexpr.DPort(port), nftexpr.One(nftexpr.Goto(chDenyDNS)))
		}
	}
	for ch, reason := range map[*nftables.Chain]string{denyP: reasonProtected, denyD: reasonDNS, denyN: reasonNoRule} {
		// Denied egress is rejected, not dropped: the sandbox's client
		// fails at once (connection refused / unreachable) rather than
		// hanging until its own timeout; the log rule above still records
		// it as denied.
		rule(ch, nftexpr.One(limited()), nftexpr.One(n.logTo(logPrefix+"d "+reason)))
		for _, e := range nftexpr.Reject() {
			rule(ch, e)
		}
	}

	// Bridge family: per-port anti-spoofing, and nothing from a port of
	// this bridge that is not a known sandbox.
	pre := base(brt, chBrPre, nftables.ChainTypeFilter, nftables.ChainHookPrerouting, nftables.ChainPriorityRef(-200))
	rule(pre, nftexpr.One(&expr.Meta{Key: expr.MetaKeyIIFNAME, Register: 1}),
		nftexpr.One(&expr.Lookup{SourceRegister: 1, SetName: mapPorts, SetID: ports.ID, DestRegister: 0, IsDestRegSet: true}))
	// Every port of the bridge is a veth of this instance (name prefix);
	// one that is not in the map (being set up or torn down) sends nothing.
	rule(pre, nftexpr.One(&expr.Meta{Key: expr.MetaKeyIIFNAME, Register: 1}),
		nftexpr.One(&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte(n.nm.prefix)}), nftexpr.One(nftexpr.Drop()))

	if err := c.Flush(); err != nil {
		return fmt.Errorf("network: programming nft tables %s: %w", n.nm.table, err)
	}
	return nil
}

// ---- per-sandbox objects ----

func domainSetKey(fam int) nftables.SetDatatype {
	if fam == 4 {
		return nftables.TypeIPAddr
	}
	return nftables.TypeIP6Addr
}

func (n *Network) domainSet(fam int, tag, rtag string) *nftables.Set {
	return &nftables.Set{Table: n.nm.inet(), Name: n.nm.domainSet(fam, tag, rtag), KeyType: domainSetKey(fam), HasTimeout: true}
}

// ruleOrder splits CIDR rules into the three places they go in a
// sandbox's chain (see the package doc) and returns the domain rules.
func (n *Network) ruleOrder(rules []Rule) (explicitProtected, explicitDNS, plain, domains []Rule) {
	for _, r := range rules {
		switch {
		case r.Domain != "":
			domains = append(domains, r)
		case n.insideProtected(r.CIDR):
			explicitProtected = append(explicitProtected, r)
		case slices.Contains(r.Ports, 53) || slices.Contains(r.Ports, 853):
			explicitDNS = append(explicitDNS, r)
		default:
			plain = append(plain, r)
		}
	}
	return
}

// allowRules returns the nft rule bodies for one allow rule: match is the
// address match for one family (CIDR compare or domain set lookup).
func (n *Network) allowExprs(r Rule, match []expr.Any) [][]expr.Any {
	lg := n.logTo(logPrefix + "a " + r.Tag())
	var out [][]expr.Any
	protos := r.L4()
	if protos == nil {
		return [][]expr.Any{nftexpr.Cat(match, nftexpr.One(lg), nftexpr.One(nftexpr.Accept()))}
	}
	for _, p := range protos {
		if len(r.Ports) == 0 {
			out = append(out, nftexpr.Cat(match, nftexpr.L4Proto(p), nftexpr.One(lg), nftexpr.One(nftexpr.Accept())))
			continue
		}
		ps := slices.Clone(r.Ports)
		slices.Sort(ps)
		for _, port := range slices.Compact(ps) {
			out = append(out, nftexpr.Cat(match, nftexpr.L4Proto(p), nftexpr.DPort(port), nftexpr.One(lg), nftexpr.One(nftexpr.Accept())))
		}
	}
	return out
}

// programSandbox (re)writes the sandbox's chain in the inet table, creates
// missing domain sets and deletes stale ones, and (when withDispatch)
// adds the dispatch-map elements and the bridge anti-spoofing chain, all
// in one transaction. Caller holds n.mu.
func (n *Network) programSandbox(sb *sandbox, withDispatch bool) error {
	c, err := n.conn()
	if err != nil {
		return err
	}
	inet := n.nm.inet()
	existingSets := map[string]bool{}
	if sets, err := c.GetSets(inet); err == nil {
		for _, s := range sets {
			existingSets[s.Name] = true
		}
	} else {
		return fmt.Errorf("network: listing nft sets: %w", err)
	}
	ch := c.AddChain(&nftables.Chain{Table: inet, Name: n.nm.sbChain(sb.tag)})
	c.FlushChain(ch)
	ud := []byte("berth:" + sb.id)
	// One netlink batch holds what the socket's send buffer does (about
	// 145 allow rules with their logging): a chain of more is sent in
	// batches of nftBatchRules. Rules are appended in their final order,
	// so between two batches the chain is a prefix of what it will be:
	// its accepts a subset of the final ones, the rest falling through to
	// the dispatch rule's drop (fail closed). The dispatch elements go in
	// the last batch, so a new sandbox's traffic reaches the chain only
	// when it is whole.
	var batchErr error
	queued := 0
	step := func() { // after each queued object
		if queued++; queued%nftBatchRules == 0 && batchErr == nil {
			if err := c.Flush(); err != nil {
				batchErr = fmt.Errorf("network: programming nft for sandbox %s (objects %d-%d): %w", sb.id, queued-nftBatchRules+1, queued, err)
			}
		}
	}
	add := func(e []expr.Any) {
		c.AddRule(&nftables.Rule{Table: inet, Chain: ch, Exprs: e, UserData: ud})
		step()
	}
	cidr := func(r Rule) {
		for _, e := range n.allowExprs(r, nftexpr.Cat(nftexpr.NFProto(r.CIDR.Addr().Is4()), nftexpr.AddrMatch(false, r.CIDR, expr.CmpOpEq))) {
			add(e)
		}
	}
	ep, ed, plain, domains := n.ruleOrder(sb.rules)
	for _, r := range ep {
		cidr(r)
	}
	add(nftexpr.One(nftexpr.Jump(chGuardProtected)))
	for _, r := range ed {
		cidr(r)
	}
	add(nftexpr.One(nftexpr.Jump(chGuardDNS)))
	for _, r := range plain {
		cidr(r)
	}
	wantSets := map[string]bool{}
	for _, r := range domains {
		for _, fam := range []int{4, 6} {
			s := n.domainSet(fam, sb.tag, r.Tag())
			if wantSets[s.Name] {
				continue
			}
			wantSets[s.Name] = true
			if !existingSets[s.Name] {
				if err := c.AddSet(s, nil); err != nil {
					return err
				}
				step()
			}
			var off, ln uint32 = 16, 4
			if fam == 6 {
				off, ln = 24, 16
			}
			match := nftexpr.Cat(nftexpr.NFProto(fam == 4),
				nftexpr.One(&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: off, Len: ln}),
				nftexpr.One(&expr.Lookup{SourceRegister: 1, SetName: s.Name, SetID: s.ID}))
			for _, e := range n.allowExprs(r, match) {
				add(e)
			}
		}
	}
	add(nftexpr.One(nftexpr.Goto(chDenyNoRule)))
	var rd *nftables.Chain
	if len(sb.redirect) > 0 && n.cfg.ProxyPort != 0 {
		// TCP 443 to the addresses pinned for a redirect name's rule goes
		// to the proxy (every name of a wildcard rule: the proxy serves
		// the others unchanged).
		rd = c.AddChain(&nftables.Chain{Table: inet, Name: n.nm.rdChain(sb.tag)})
		c.FlushChain(rd)
		for _, r := range domains {
			if !redirects(sb, r) {
				continue
			}
			s := n.domainSet(4, sb.tag, r.Tag())
			c.AddRule(&nftables.Rule{Table: inet, Chain: rd, UserData: ud, Exprs: nftexpr.Cat(nftexpr.NFProto(true),
				nftexpr.One(&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: 16, Len: 4}),
				nftexpr.One(&expr.Lookup{SourceRegister: 1, SetName: s.Name, SetID: s.ID}),
				nftexpr.L4Proto(protoTCP), nftexpr.DPort(443),
				nftexpr.One(&expr.Immediate{Register: 1, Data: n.gw4.AsSlice()}),
				nftexpr.One(&expr.Immediate{Register: 2, Data: nftexpr.BE16(n.cfg.ProxyPort)}),
				nftexpr.One(&expr.NAT{Type: expr.NATTypeDestNAT, Family: unix.NFPROTO_IPV4, RegAddrMin: 1, RegProtoMin: 2, Specified: true}))})
			step()
		}
	}
	// Domain sets of rules that are gone (after the flush above, nothing
	// references them).
	prefix4, prefix6 := "d4-"+sb.tag+"-", "d6-"+sb.tag+"-"
	for name := range existingSets {
		if (strings.HasPrefix(name, prefix4) || strings.HasPrefix(name, prefix6)) && !wantSets[name] {
			c.DelSet(&nftables.Set{Table: inet, Name: name})
			step()
		}
	}
	if batchErr != nil {
		return batchErr
	}
	if withDispatch {
		sb4, sb6 := n.dispatchMaps()
		if err := c.SetAddElements(sb4, []nftables.SetElement{{Key: sb.v4.AsSlice(), VerdictData: nftexpr.Jump(ch.Name), Comment: elemComment(sb.tag)}}); err != nil {
			return err
		}
		if err := c.SetAddElements(sb6, []nftables.SetElement{{Key: sb.v6.AsSlice(), VerdictData: nftexpr.Jump(ch.Name), Comment: elemComment(sb.tag)}}); err != nil {
			return err
		}
		n.addSpoofChain(c, sb)
		if rd != nil {
			if err := c.SetAddElements(n.redirectMap(), []nftables.SetElement{{Key: sb.v4.AsSlice(), VerdictData: nftexpr.Jump(rd.Name), Comment: elemComment(sb.tag)}}); err != nil {
				return err
			}
		}
	}
	if err := c.Flush(); err != nil {
		return fmt.Errorf("network: programming nft for sandbox %s: %w", sb.id, err)
	}
	return nil
}

// addSpoofChain queues the bridge-family chain that lets frames from the
// sandbox's port in only with its own MAC and addresses.
func (n *Network) addSpoofChain(c *nftables.Conn, sb *sandbox) {
	brt := n.nm.brTable()
	ch := c.AddChain(&nftables.Chain{Table: brt, Name: n.nm.spChain(sb.tag)})
	c.FlushChain(ch)
	ud := []byte("berth:" + sb.id)
	rule := func(e ...[]expr.Any) {
		c.AddRule(&nftables.Rule{Table: brt, Chain: ch, Exprs: nftexpr.Cat(e...), UserData: ud})
	}
	ethType := func(t uint16) []expr.Any { return nftexpr.MetaCmp(expr.MetaKeyPROTOCOL, nftexpr.BE16(t)) }
	payloadNeq := func(base expr.PayloadBase, off uint32, data []byte) []expr.Any {
		return []expr.Any{
			&expr.Payload{DestRegister: 1, Base: base, Offset: off, Len: uint32(len(data))},
			&expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: data},
		}
	}
	rule(payloadNeq(expr.PayloadBaseLLHeader, 6, sb.mac), nftexpr.One(nftexpr.Drop()))
	rule(ethType(unix.ETH_P_IP), nftexpr.AddrMatch(true, netip.PrefixFrom(sb.v4, 32), expr.CmpOpNeq), nftexpr.One(nftexpr.Drop()))
	rule(ethType(unix.ETH_P_IP), nftexpr.One(nftexpr.Accept()))
	rule(ethType(unix.ETH_P_ARP), payloadNeq(expr.PayloadBaseNetworkHeader, 14, sb.v4.AsSlice()), nftexpr.One(nftexpr.Drop()))
	rule(ethType(unix.ETH_P_ARP), payloadNeq(expr.PayloadBaseNetworkHeader, 8, sb.mac), nftexpr.One(nftexpr.Drop()))
	rule(ethType(unix.ETH_P_ARP), nftexpr.One(nftexpr.Accept()))
	rule(ethType(unix.ETH_P_IPV6), nftexpr.AddrMatch(true, netip.PrefixFrom(sb.v6, 128), expr.CmpOpNeq),
		nftexpr.AddrMatch(true, netip.MustParsePrefix("fe80::/10"), expr.CmpOpNeq),
		nftexpr.AddrMatch(true, netip.MustParsePrefix("::/128"), expr.CmpOpNeq), nftexpr.One(nftexpr.Drop()))
	rule(ethType(unix.ETH_P_IPV6), nftexpr.One(nftexpr.Accept()))
	rule(nftexpr.One(nftexpr.Drop()))
	_ = c.SetAddElements(n.portsMap(), []nftables.SetElement{{Key: nftexpr.IfnameBytes(n.nm.veth(sb.tag)), VerdictData: nftexpr.Jump(ch.Name), Comment: elemComment(sb.tag)}})
}

// removeSandboxNFT deletes every nft object of the sandbox with tag:
// dispatch elements (found by their verdict), bridge port element, both
// chains and the domain sets. Missing objects are fine. Caller holds n.mu.
func (n *Network) removeSandboxNFT(tag string) (addrs []netip.Addr, err error) {
	c, err := n.conn()
	if err != nil {
		return nil, err
	}
	inet, brt := n.nm.inet(), n.nm.brTable()
	sbChain, spChain := n.nm.sbChain(tag), n.nm.spChain(tag)
	// Fast path: the chains are created in the same transaction as every
	// other object of the sandbox, so without them there is nothing.
	_, err1 := c.GetRules(inet, &nftables.Chain{Table: inet, Name: sbChain})
	_, err2 := c.GetRules(brt, &nftables.Chain{Table: brt, Name: spChain})
	if err1 != nil && err2 != nil && isNFTNotFound(err1) && isNFTNotFound(err2) {
		return nil, nil
	}
	sb4, sb6 := n.dispatchMaps()
	for _, m := range []*nftables.Set{sb4, sb6, n.redirectMap()} {
		els, err := c.GetSetElements(m)
		if err != nil {
			if isNFTNotFound(err) {
				continue
			}
			return nil, fmt.Errorf("network: listing %s: %w", m.Name, err)
		}
		var del []nftables.SetElement
		for _, e := range els {
			if e.Comment == elemComment(tag) {
				del = append(del, nftables.SetElement{Key: e.Key})
				if a, ok := netip.AddrFromSlice(e.Key); ok {
					addrs = append(addrs, a)
				}
			}
		}
		if len(del) > 0 {
			if err := c.SetDeleteElements(m, del); err != nil {
				return nil, err
			}
		}
	}
	ports := n.portsMap()
	if els, err := c.GetSetElements(ports); err == nil {
		var del []nftables.SetElement
		for _, e := range els {
			if e.Comment == elemComment(tag) {
				del = append(del, nftables.SetElement{Key: e.Key})
			}
		}
		if len(del) > 0 {
			if err := c.SetDeleteElements(ports, del); err != nil {
				return nil, err
			}
		}
	}
	chains, err := c.ListChains()
	if err != nil {
		return nil, fmt.Errorf("network: listing chains: %w", err)
	}
	for _, ch := range chains {
		if ch.Table.Name != n.nm.table {
			continue
		}
		if (ch.Table.Family == nftables.TableFamilyINet && (ch.Name == sbChain || ch.Name == n.nm.rdChain(tag))) ||
			(ch.Table.Family == nftables.TableFamilyBridge && ch.Name == spChain) {
			t := inet
			if ch.Table.Family == nftables.TableFamilyBridge {
				t = brt
			}
			x := &nftables.Chain{Table: t, Name: ch.Name}
			c.FlushChain(x)
			c.DelChain(x)
		}
	}
	sets, err := c.GetSets(inet)
	if err != nil && !isNFTNotFound(err) {
		return nil, fmt.Errorf("network: listing sets: %w", err)
	}
	for _, s := range sets {
		if strings.HasPrefix(s.Name, "d4-"+tag+"-") || strings.HasPrefix(s.Name, "d6-"+tag+"-") {
			c.DelSet(&nftables.Set{Table: inet, Name: s.Name})
		}
	}
	if err := c.Flush(); err != nil {
		return nil, fmt.Errorf("network: removing nft objects of %s: %w", tag, err)
	}
	return addrs, nil
}

// elemComment marks dispatch and port map elements with the sandbox tag
// (the library does not decode verdicts of listed elements).
func elemComment(tag string) string { return "sb-" + tag }

func isNFTNotFound(err error) bool {
	return errors.Is(err, unix.ENOENT) || strings.Contains(err.Error(), "no such file")
}

// pin allows addrs for the sandbox under the domain rules rtags until ttl
// passes: each address goes into the rule's set with that timeout. An
// address already pinned gets the new timeout (delete and re-add in one
// transaction). Caller holds n.mu.
func (n *Network) pin(sb *sandbox, rtags []string, addrs []netip.Addr, ttl time.Duration) error {
	if len(addrs) == 0 || len(rtags) == 0 {
		return nil
	}
	build := func(refresh bool) error {
		c, err := n.conn()
		if err != nil {
			return err
		}
		for _, rt := range rtags {
			for _, fam := range []int{4, 6} {
				var els []nftables.SetElement
				for _, a := range addrs {
					if a.Is4() == (fam == 4) {
						els = append(els, nftables.SetElement{Key: a.AsSlice(), Timeout: ttl})
					}
				}
				if len(els) == 0 {
					continue
				}
				s := n.domainSet(fam, sb.tag, rt)
				if err := c.SetAddElements(s, els); err != nil {
					return err
				}
				if refresh {
					keys := make([]nftables.SetElement, len(els))
					for i, e := range els {
						keys[i] = nftables.SetElement{Key: e.Key}
					}
					if err := c.SetDeleteElements(s, keys); err != nil {
						return err
					}
					if err := c.SetAddElements(s, els); err != nil {
						return err
					}
				}
			}
		}
		return c.Flush()
	}
	if err := build(true); err != nil {
		// An element expiring inside the transaction can make the delete
		// fail; a plain add is then correct.
		if err2 := build(false); err2 != nil {
			return fmt.Errorf("network: pinning %v for %s: %w", addrs, sb.id, err2)
		}
	}
	return nil
}
