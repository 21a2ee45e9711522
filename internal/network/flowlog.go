package network

import (
	"strings"

	"net/netip"
	"time"

	"github.com/berth-sh/berth/internal/network/nflog"
)

// Flow is one entry of a sandbox's flow log: a new connection attempt seen
// by the kernel (Kind "conn") or a query to berth's resolver (Kind "dns").
type Flow struct {
	Seq      uint64         `json:"seq"`
	Time     time.Time      `json:"time"`
	Kind     string         `json:"kind"`  // "conn" | "dns"
	Proto    string         `json:"proto"` // "tcp", "udp", "icmp", "icmpv6" or a number
	Src      netip.AddrPort `json:"src"`
	Dst      netip.AddrPort `json:"dst"`
	Name     string         `json:"name,omitempty"` // DNS: the query; conn: the name the address was resolved from
	Decision string         `json:"decision"`       // "allow" | "deny"
	// Rule is the allow rule that matched (its String form), or for a
	// denial the reason: "norule", "protected", "dns" (another resolver),
	// "host", "inbound", "notallowed" (DNS name outside the rules).
	Rule string `json:"rule"`
	// Answers are the addresses a DNS answer pinned.
	Answers []netip.Addr `json:"answers,omitempty"`
}

// Decisions.
const (
	Allow = "allow"
	Deny  = "deny"
)

// ring is a bounded flow log.
type ring struct {
	buf  []Flow
	next uint64 // seq of the next record
	n    int
}

func newRing(size int) *ring { return &ring{buf: make([]Flow, size), next: 1} }

func (r *ring) add(f Flow) Flow {
	f.Seq = r.next
	r.next++
	r.buf[int(f.Seq%uint64(len(r.buf)))] = f
	if r.n < len(r.buf) {
		r.n++
	}
	return f
}

// after returns up to limit records with Seq > afterSeq, oldest first.
func (r *ring) after(afterSeq uint64, limit int) []Flow {
	if limit <= 0 || limit > r.n {
		limit = r.n
	}
	first := r.next - uint64(r.n) // oldest kept seq
	if afterSeq+1 > first {
		first = afterSeq + 1
	}
	var out []Flow
	for s := first; s < r.next && len(out) < limit; s++ {
		out = append(out, r.buf[int(s%uint64(len(r.buf)))])
	}
	return out
}

// record appends f to the sandbox's ring and calls OnFlow.
func (n *Network) record(id string, f Flow) {
	n.mu.Lock()
	r := n.rings[id]
	if r == nil {
		n.mu.Unlock()
		return
	}
	f = r.add(f)
	n.mu.Unlock()
	if n.cfg.OnFlow != nil {
		n.cfg.OnFlow(id, f)
	}
}

// FlowLog returns up to limit flow records of the sandbox with Seq after
// afterSeq, oldest first (limit <= 0: all kept). The ring lives from
// Attach to Detach; hand records to durable storage through
// Config.OnFlow to keep them longer.
func (n *Network) FlowLog(id string, afterSeq uint64, limit int) []Flow {
	n.mu.Lock()
	defer n.mu.Unlock()
	r := n.rings[id]
	if r == nil {
		return nil
	}
	return r.after(afterSeq, limit)
}

// handleLog turns a logged packet into a flow record of its sandbox.
func (n *Network) handleLog(p nflog.Packet) {
	rest, ok := strings.CutPrefix(p.Prefix, logPrefix)
	if !ok {
		return
	}
	decision, what, _ := strings.Cut(rest, " ")
	f := Flow{Time: p.Time, Kind: "conn", Proto: nflog.ProtoName(p.Proto), Src: p.Src, Dst: p.Dst}
	// The sandbox is the source, except for inbound traffic. Source
	// addresses are trustworthy: the bridge table drops spoofed ones.
	key := p.Src.Addr()
	if what == reasonInbound {
		key = p.Dst.Addr()
	}
	n.mu.Lock()
	sb := n.byAddr[key]
	var id string
	if sb != nil {
		id = sb.id
		f.Name = sb.names[p.Dst.Addr()]
		if decision == "a" {
			f.Decision = Allow
			f.Rule = "rule " + what
			for _, r := range sb.rules {
				if r.Tag() == what {
					f.Rule = r.String()
					break
				}
			}
		} else {
			f.Decision = Deny
			f.Rule = what
		}
	}
	n.mu.Unlock()
	if id != "" {
		n.record(id, f)
	}
}
