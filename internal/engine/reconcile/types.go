package reconcile

import "github.com/berth-sh/berth/internal/leader"

// Report is what doctor found.
type Report struct {
	Findings []Finding
	Runtime  string
	Healthy  bool
	// Leases are the node's and the store-wide lease as this daemon sees
	// them: whether it is the replica running the background work.
	Leases []leader.Status
}

// Finding is one orphan or leak.
type Finding struct {
	Kind   string // mount | cgroup | runtime | dir | process | record | template
	ID     string // the sandbox it belongs to, if known
	Detail string
	Fixed  bool
	Error  string
}
