package server

import (
	"context"

	"github.com/berth-sh/berth/internal/auth"
	"github.com/berth-sh/berth/internal/server/ratelimit"
)

// KeyRate is a request rate per API key (ratelimit.Rate).
type KeyRate = ratelimit.Rate

// rateLimit takes one token of p's key's bucket (internal/server/ratelimit):
// 429 rate_limited over the rate. Only API keys are limited: the unix
// socket's admin and lease tokens (one sandbox's own calls) are not.
func (s *Server) rateLimit(ctx context.Context, p auth.Principal) error {
	if p.KeyID == "" || s.m == nil { // s.m is nil only in the route-table tests
		return nil
	}
	return s.keyRates.Take(ctx, p.KeyID, p.Tenant, s.KeyRate, s.tenantKeyRate)
}

// tenantKeyRate is tenant's key_rate from its quota (zero: none set).
func (s *Server) tenantKeyRate(ctx context.Context, tenant string) (KeyRate, error) {
	q, err := s.m.Quota(ctx, tenant)
	if err != nil || q.KeyRate <= 0 {
		return KeyRate{}, err
	}
	r := KeyRate{Rate: float64(q.KeyRate), Burst: int(max(q.KeyBurst, 1, q.KeyRate))}
	if q.KeyBurst > 0 {
		r.Burst = int(q.KeyBurst)
	}
	return r, nil
}
