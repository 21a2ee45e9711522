package nflog

import (
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
)

// NFLOG over nfnetlink (include/uapi/linux/netfilter/nfnetlink_log.h); the
// constants are not in x/sys/unix.
const (
	nfulnlMsgPacket  = 0
	nfulnlMsgConfig  = 1
	nfulaCfgCmd      = 1
	nfulaCfgMode     = 2
	nfulaCfgTimeout  = 4
	nfulaCfgQThresh  = 5
	nfulnlCmdBind    = 1
	nfulnlCopyPacket = 2
	nfulaTimestamp   = 3
	nfulaPayload     = 9
	nfulaPrefix      = 10
)

// IP protocol numbers of Packet.Proto that ProtoName names.
const (
	protoICMP   = 1
	protoTCP    = 6
	protoUDP    = 17
	protoICMPv6 = 58
)

// Packet is one packet the kernel logged.
type Packet struct {
	Prefix  string
	Time    time.Time
	Proto   uint8
	Src     netip.AddrPort
	Dst     netip.AddrPort
	IsValid bool
}

// Reader reads the instance's NFLOG group. NFLOG (rather than
// conntrack events) because one mechanism then reports both decisions:
// denied packets never create a conntrack entry, and the log prefix
// carries the reason or the allowing rule.
type Reader struct {
	c    *netlink.Conn
	wg   sync.WaitGroup
	once sync.Once
}

func nfgenmsg(family uint8, resID uint16) []byte {
	b := []byte{family, 0, 0, 0}
	binary.BigEndian.PutUint16(b[2:], resID)
	return b
}

// Start binds NFLOG group and calls handle, from one goroutine, with
// every packet the kernel logs to it, until Close.
func Start(group uint16, handle func(Packet), log *slog.Logger) (*Reader, error) {
	c, err := netlink.Dial(unix.NETLINK_NETFILTER, nil)
	if err != nil {
		return nil, fmt.Errorf("network: nflog socket: %w", err)
	}
	_ = c.SetReadBuffer(4 << 20)
	send := func(attrs []netlink.Attribute) error {
		ad, err := netlink.MarshalAttributes(attrs)
		if err != nil {
			return err
		}
		_, err = c.Execute(netlink.Message{
			Header: netlink.Header{
				Type:  netlink.HeaderType(unix.NFNL_SUBSYS_ULOG<<8 | nfulnlMsgConfig),
				Flags: netlink.Request | netlink.Acknowledge,
			},
			Data: append(nfgenmsg(unix.AF_UNSPEC, group), ad...),
		})
		return err
	}
	if err := send([]netlink.Attribute{{Type: nfulaCfgCmd, Data: []byte{nfulnlCmdBind}}}); err != nil {
		c.Close()
		return nil, fmt.Errorf("network: binding NFLOG group %d (another daemon on it? set LogGroup): %w", group, err)
	}
	mode := make([]byte, 6)
	binary.BigEndian.PutUint32(mode, 128)
	mode[4] = nfulnlCopyPacket
	if err := send([]netlink.Attribute{{Type: nfulaCfgMode, Data: mode}}); err != nil {
		c.Close()
		return nil, fmt.Errorf("network: NFLOG copy mode: %w", err)
	}
	// Deliver every packet at once (the kernel default batches 100 or 1s).
	one := make([]byte, 4)
	binary.BigEndian.PutUint32(one, 1)
	if err := send([]netlink.Attribute{{Type: nfulaCfgQThresh, Data: one}, {Type: nfulaCfgTimeout, Data: one}}); err != nil {
		c.Close()
		return nil, fmt.Errorf("network: NFLOG queue threshold: %w", err)
	}
	r := &Reader{c: c}
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		for {
			msgs, err := c.Receive()
			if err != nil {
				if errors.Is(err, unix.ENOBUFS) {
					log.Warn("flow log: kernel dropped log messages (reader too slow)")
					continue
				}
				if isClosed(err) {
					return
				}
				log.Warn("flow log: reading NFLOG", "err", err)
				time.Sleep(100 * time.Millisecond)
				continue
			}
			for _, m := range msgs {
				if m.Header.Type != netlink.HeaderType(unix.NFNL_SUBSYS_ULOG<<8|nfulnlMsgPacket) {
					continue
				}
				if p, ok := parseLogMessage(m.Data); ok {
					handle(p)
				}
			}
		}
	}()
	return r, nil
}

func isClosed(err error) bool {
	return errors.Is(err, unix.EBADF) || strings.Contains(err.Error(), "use of closed")
}

// Close stops the reader and waits for its goroutine.
func (r *Reader) Close() {
	r.once.Do(func() {
		r.c.Close()
		r.wg.Wait()
	})
}

// parseLogMessage decodes one NFULNL_MSG_PACKET message.
func parseLogMessage(data []byte) (Packet, bool) {
	if len(data) < 4 {
		return Packet{}, false
	}
	family := data[0]
	ad, err := netlink.NewAttributeDecoder(data[4:])
	if err != nil {
		return Packet{}, false
	}
	ad.ByteOrder = binary.BigEndian
	var p Packet
	var payload []byte
	for ad.Next() {
		switch ad.Type() {
		case nfulaPrefix:
			p.Prefix = strings.TrimRight(string(ad.Bytes()), "\x00")
		case nfulaPayload:
			payload = ad.Bytes()
		case nfulaTimestamp:
			if b := ad.Bytes(); len(b) == 16 {
				sec := binary.BigEndian.Uint64(b[:8])
				usec := binary.BigEndian.Uint64(b[8:])
				p.Time = time.Unix(int64(sec), int64(usec)*1000)
			}
		}
	}
	if p.Time.IsZero() {
		p.Time = time.Now()
	}
	p.Proto, p.Src, p.Dst, p.IsValid = parseL3(family, payload)
	return p, p.IsValid
}

// parseL3 reads protocol, addresses and ports of an IPv4 or IPv6 packet.
func parseL3(family uint8, b []byte) (proto uint8, src, dst netip.AddrPort, ok bool) {
	var sa, da netip.Addr
	var l4 []byte
	switch {
	case len(b) >= 20 && b[0]>>4 == 4:
		ihl := int(b[0]&0x0f) * 4
		if ihl < 20 || len(b) < ihl {
			return
		}
		proto = b[9]
		sa = netip.AddrFrom4([4]byte(b[12:16]))
		da = netip.AddrFrom4([4]byte(b[16:20]))
		if binary.BigEndian.Uint16(b[6:8])&0x1fff == 0 { // first fragment
			l4 = b[ihl:]
		}
	case len(b) >= 40 && b[0]>>4 == 6:
		proto = b[6]
		sa = netip.AddrFrom16([16]byte(b[8:24]))
		da = netip.AddrFrom16([16]byte(b[24:40]))
		l4 = b[40:]
		// Skip the common extension headers.
		for i := 0; i < 4 && len(l4) >= 8; i++ {
			switch proto {
			case 0, 43, 60: // hop-by-hop, routing, destination options
				proto = l4[0]
				l4 = l4[(int(l4[1])+1)*8:]
				continue
			}
			break
		}
	default:
		_ = family
		return
	}
	var sp, dp uint16
	if (proto == protoTCP || proto == protoUDP) && len(l4) >= 4 {
		sp = binary.BigEndian.Uint16(l4[0:2])
		dp = binary.BigEndian.Uint16(l4[2:4])
	}
	return proto, netip.AddrPortFrom(sa, sp), netip.AddrPortFrom(da, dp), true
}

// ProtoName names an IP protocol number: "tcp", "udp", "icmp",
// "icmpv6", or the number.
func ProtoName(p uint8) string {
	switch p {
	case protoTCP:
		return "tcp"
	case protoUDP:
		return "udp"
	case protoICMP:
		return "icmp"
	case protoICMPv6:
		return "icmpv6"
	}
	return strconv.Itoa(int(p))
}
