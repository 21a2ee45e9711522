package server

// Per-tenant shares of what the daemon holds for long-running requests:
// no tenant takes all of it. Event streams have theirs (package events), MCP
// sessions theirs (internal/mcp, MaxSessionsPerTenant); uploads — request
// bodies streamed into the daemon's disk or a sandbox's (file writes,
// template archives, imports and builds) — are capped here, per tenant,
// while they run. The host's own (tenant "") are not capped by tenant.

import (
	"sync"

	"github.com/berth-sh/berth/internal/errdefs"
)

// maxUploadsPerTenant caps the uploads one tenant's credentials run at
// once (a variable, so tests may lower it).
var maxUploadsPerTenant = 16

// uploadShares counts the running uploads of each tenant.
type uploadShares struct {
	mu   sync.Mutex
	open map[string]int
}

// admit counts an upload of tenant, refusing one over its share.
func (u *uploadShares) admit(tenant string) (release func(), err error) {
	if tenant == "" {
		return func() {}, nil
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.open == nil {
		u.open = map[string]int{}
	}
	if u.open[tenant] >= maxUploadsPerTenant {
		return nil, errdefs.Exhausted("%d uploads are running in tenant %s already; wait for one to end", maxUploadsPerTenant, tenant)
	}
	u.open[tenant]++
	var once sync.Once
	return func() {
		once.Do(func() {
			u.mu.Lock()
			defer u.mu.Unlock()
			if u.open[tenant]--; u.open[tenant] <= 0 {
				delete(u.open, tenant)
			}
		})
	}, nil
}
