package pools

// Pool is a template's warm pool: its size and what it holds now.
type Pool struct {
	Template string
	Min      int
	Ready    int
	Starting int
	Hits     int64
	Misses   int64
}
