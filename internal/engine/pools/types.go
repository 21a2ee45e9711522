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
}
