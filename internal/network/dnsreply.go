package network

import (
	"context"
	"errors"
	"net/netip"
	"time"

	"github.com/miekg/dns"
)

// The message plumbing both of berth's resolvers share (this package's
// for local egress sandboxes, internal/node/kube's for pods): a refusal,
// the forward to the upstreams and the write of the answer. What each
// decides — who asks, what is allowed, what is pinned — stays its own.

// Reply answers req with rcode and nothing else.
func Reply(w dns.ResponseWriter, req *dns.Msg, rcode int) {
	m := new(dns.Msg)
	m.SetRcode(req, rcode)
	m.RecursionAvailable = true
	_ = w.WriteMsg(m)
}

// Forward sends m to the upstreams in order, each for at most timeout,
// over proto (TCP again when a UDP answer is truncated), and returns the
// first answer.
func Forward(ctx context.Context, m *dns.Msg, proto string, upstreams []netip.AddrPort, timeout time.Duration) (*dns.Msg, error) {
	last := errors.New("no upstream resolver configured")
	for _, up := range upstreams {
		uctx, cancel := context.WithTimeout(ctx, timeout)
		c := &dns.Client{Net: proto, Timeout: timeout}
		resp, _, err := c.ExchangeContext(uctx, m, up.String())
		if err == nil && resp.Truncated && proto == "udp" {
			c.Net = "tcp"
			resp, _, err = c.ExchangeContext(uctx, m, up.String())
		}
		cancel()
		if err == nil {
			return resp, nil
		}
		last = err
	}
	return nil, last
}

// WriteAnswer writes resp as the answer to req: req's id, compressed,
// and over UDP cut to the size the asker can take.
func WriteAnswer(w dns.ResponseWriter, req, resp *dns.Msg, proto string) {
	resp.Id = req.Id
	resp.Compress = true
	if proto == "udp" {
		size := dns.MinMsgSize
		if o := req.IsEdns0(); o != nil {
			size = int(o.UDPSize())
		}
		resp.Truncate(size)
	}
	_ = w.WriteMsg(resp)
}
