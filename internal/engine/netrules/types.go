package netrules

import "time"

// Request adds and removes egress rules.
type Request struct {
	Allow []string
	Deny  []string
	// Replace makes Allow (less Deny) the whole list, the rules there
	// before dropped: the E2B door's updateNetwork.
	Replace bool
}

// NetworkRules is a sandbox's network identity and egress rules.
type NetworkRules struct {
	Mode  string
	IPv4  string
	IPv6  string
	Allow []string
}

// Flow is one connection attempt or DNS query of a sandbox.
type Flow struct {
	Seq      uint64
	Time     time.Time
	Kind     string // conn | dns
	Proto    string
	Src      string
	Dst      string
	Name     string
	Decision string // allow | deny
	Rule     string
}
