package nflog

import (
	"encoding/binary"
	"net/netip"
	"testing"
)

func TestParseL3(t *testing.T) {
	p := make([]byte, 28)
	p[0] = 0x45
	p[9] = protoTCP
	copy(p[12:16], []byte{100, 96, 0, 5})
	copy(p[16:20], []byte{203, 0, 113, 10})
	binary.BigEndian.PutUint16(p[20:], 40000)
	binary.BigEndian.PutUint16(p[22:], 443)
	proto, src, dst, ok := parseL3(2, p)
	if !ok || proto != protoTCP || src.String() != "100.96.0.5:40000" || dst.String() != "203.0.113.10:443" {
		t.Fatalf("%v %v %v %v", proto, src, dst, ok)
	}
	q := make([]byte, 48)
	q[0] = 0x60
	q[6] = protoUDP
	a := netip.MustParseAddr("2001:db8::1").As16()
	copy(q[24:40], a[:])
	binary.BigEndian.PutUint16(q[42:], 53)
	proto, _, dst, ok = parseL3(10, q)
	if !ok || proto != protoUDP || dst.String() != "[2001:db8::1]:53" {
		t.Fatalf("%v %v %v", proto, dst, ok)
	}
	if _, _, _, ok := parseL3(2, []byte{0x45}); ok {
		t.Fatal("short packet parsed")
	}
}
