package pools

// Pool is a template's warm pool: its size and what it holds now. Tenant
// owns the template ("" the host's shared catalogue).
type Pool struct {
	Tenant   string
	Template string
	Min      int
	Ready    int
	Starting int
	Hits     int64
	Misses   int64
	// Reason says why the pool is below Min (Ready+Starting < Min), ""
	// when it is not or nothing failed: the last refill's failure, with
	// its class first ("tenant quota reached: ...", "host capacity: ...",
	// "error: ..."), or that the template's runtime class cannot keep
	// members.
	Reason string
	// Auto: Min is the automatic pool's size, from recent demand (no
	// size was set for this template; auto.go).
	Auto bool
}
