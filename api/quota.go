package api

// Quota is a tenant's limits (GET/PUT /v1/tenants/{tenant}/quota); 0 in a
// limit means unlimited. Usage is what the tenant holds now.
type Quota struct {
	Tenant string `json:"tenant"`
	QuotaRequest
	// Default is true when the tenant has no quota of its own and the
	// daemon's default (berth serve --default-quota-*) applies.
	Default bool        `json:"default"`
	Usage   *QuotaUsage `json:"usage,omitempty"`
}

// QuotaRequest sets a tenant's limits (PUT replaces all of them).
type QuotaRequest struct {
	MaxSandboxes int64   `json:"max_sandboxes"`     // live sandboxes at once
	MaxCPUs      float64 `json:"max_cpus"`          // sum of CPU quotas, cores (millicore precision)
	MaxMemory    int64   `json:"max_memory_bytes"`  // sum of memory limits
	MaxStorage   int64   `json:"max_storage_bytes"` // sum of disk caps, volume sizes and own template layers
	CreateRate   int64   `json:"create_rate_per_minute"`
	CreateBurst  int64   `json:"create_burst"` // 0: max(1, create_rate_per_minute)
	KeyRate      int64   `json:"key_rate_per_second"`
	KeyBurst     int64   `json:"key_burst"` // 0: max(1, key_rate_per_second)
}

// QuotaUsage is what a tenant's live sandboxes and volumes reserve, with
// its own templates' layers and its running import in Storage.
type QuotaUsage struct {
	Sandboxes int64   `json:"sandboxes"`
	CPUs      float64 `json:"cpus"`
	Memory    int64   `json:"memory_bytes"`
	Storage   int64   `json:"storage_bytes"`
}
