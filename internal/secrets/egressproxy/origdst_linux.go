package egressproxy

import (
	"encoding/binary"
	"errors"
	"net"
	"net/netip"
	"syscall"

	"golang.org/x/sys/unix"
)

// OriginalDst is the destination of a connection nftables redirected
// (SO_ORIGINAL_DST, IPv4).
func OriginalDst(c net.Conn) (netip.AddrPort, error) {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return netip.AddrPort{}, errors.New("not a socket")
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return netip.AddrPort{}, err
	}
	var out netip.AddrPort
	var gerr error
	err = rc.Control(func(fd uintptr) {
		// struct sockaddr_in is 16 bytes; GetsockoptIPv6Mreq reads 20,
		// the usual way to get it through x/sys without cgo.
		m, e := unix.GetsockoptIPv6Mreq(int(fd), unix.SOL_IP, unix.SO_ORIGINAL_DST)
		if e != nil {
			gerr = e
			return
		}
		port := binary.BigEndian.Uint16(m.Multiaddr[2:4])
		out = netip.AddrPortFrom(netip.AddrFrom4([4]byte(m.Multiaddr[4:8])), port)
	})
	if err != nil {
		return netip.AddrPort{}, err
	}
	return out, gerr
}
