// Package nftexpr builds the nftables expressions berth's rules are made
// of: meta, payload, conntrack and interface-name matches, address and
// prefix compares, verdicts. The functions are pure (they only build
// values of github.com/google/nftables/expr), so they sit apart from
// package network, which talks to the kernel.
package nftexpr

import (
	"encoding/binary"
	"net"
	"net/netip"
	"slices"

	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"
)

// BE16 is v in network byte order.
func BE16(v uint16) []byte { b := make([]byte, 2); binary.BigEndian.PutUint16(b, v); return b }

// MetaCmp matches meta key against data.
func MetaCmp(key expr.MetaKey, data []byte) []expr.Any {
	return []expr.Any{
		&expr.Meta{Key: key, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: data},
	}
}

// NFProto matches the protocol family: IPv4 (is4) or IPv6.
func NFProto(is4 bool) []expr.Any {
	if is4 {
		return MetaCmp(expr.MetaKeyNFPROTO, []byte{unix.NFPROTO_IPV4})
	}
	return MetaCmp(expr.MetaKeyNFPROTO, []byte{unix.NFPROTO_IPV6})
}

// IfnameBytes is name as the kernel compares interface names.
func IfnameBytes(name string) []byte {
	b := make([]byte, 16)
	copy(b, name)
	return b
}

// IfnameCmp compares the interface name of key with name by op.
func IfnameCmp(key expr.MetaKey, op expr.CmpOp, name string) []expr.Any {
	return []expr.Any{
		&expr.Meta{Key: key, Register: 1},
		&expr.Cmp{Op: op, Register: 1, Data: IfnameBytes(name)},
	}
}

// AddrMatch matches the source (src) or destination address against p,
// with op Eq or Neq. The caller checks the protocol family first.
func AddrMatch(src bool, p netip.Prefix, op expr.CmpOp) []expr.Any {
	a := p.Masked().Addr()
	var off, ln uint32
	if a.Is4() {
		off, ln = 16, 4
		if src {
			off = 12
		}
	} else {
		off, ln = 24, 16
		if src {
			off = 8
		}
	}
	out := []expr.Any{&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: off, Len: ln}}
	if p.Bits() < a.BitLen() {
		mask := net.CIDRMask(p.Bits(), a.BitLen())
		out = append(out, &expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: ln, Mask: mask, Xor: make([]byte, ln)})
	}
	return append(out, &expr.Cmp{Op: op, Register: 1, Data: a.AsSlice()})
}

// L4Proto matches the transport protocol p.
func L4Proto(p uint8) []expr.Any { return MetaCmp(expr.MetaKeyL4PROTO, []byte{p}) }

// DPort matches the transport destination port p.
func DPort(p uint16) []expr.Any {
	return []expr.Any{
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: BE16(p)},
	}
}

// CTState matches a conntrack state among bits.
func CTState(bits uint32) []expr.Any {
	mask := make([]byte, 4)
	binary.NativeEndian.PutUint32(mask, bits)
	return []expr.Any{
		&expr.Ct{Register: 1, Key: expr.CtKeySTATE},
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4, Mask: mask, Xor: make([]byte, 4)},
		&expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: make([]byte, 4)},
	}
}

// Accept, Drop, Jump and Goto are the verdicts.
func Accept() *expr.Verdict           { return &expr.Verdict{Kind: expr.VerdictAccept} }
func Drop() *expr.Verdict             { return &expr.Verdict{Kind: expr.VerdictDrop} }
func Jump(chain string) *expr.Verdict { return &expr.Verdict{Kind: expr.VerdictJump, Chain: chain} }
func Goto(c string) *expr.Verdict     { return &expr.Verdict{Kind: expr.VerdictGoto, Chain: c} }

// Reject answers a refused packet at once instead of dropping it: a TCP
// segment with a reset, anything else with ICMP (v4 or v6) "administratively
// prohibited", so a client's connect fails immediately instead of waiting
// for its own timeout. The answer goes only to the packet's sender (the
// sandbox), never anywhere else. It is two rules: the TCP one first.
func Reject() [][]expr.Any {
	return [][]expr.Any{
		Cat(L4Proto(unix.IPPROTO_TCP), One(&expr.Reject{Type: unix.NFT_REJECT_TCP_RST})),
		One(&expr.Reject{Type: unix.NFT_REJECT_ICMPX_UNREACH, Code: unix.NFT_REJECT_ICMPX_ADMIN_PROHIBITED}),
	}
}

// Cat joins expression lists into one.
func Cat(parts ...[]expr.Any) []expr.Any { return slices.Concat(parts...) }

// One is the list of the single expression e.
func One(e expr.Any) []expr.Any { return []expr.Any{e} }
