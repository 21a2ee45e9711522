package reconcile

// Report is what doctor found.
type Report struct {
	Findings []Finding
	Runtime  string
	Healthy  bool
}

// Finding is one orphan or leak.
type Finding struct {
	Kind   string // mount | cgroup | runtime | dir | process | record | template
	ID     string // the sandbox it belongs to, if known
	Detail string
	Fixed  bool
	Error  string
}
