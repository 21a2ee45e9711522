package server

import (
	"context"
	"sync"
	"time"

	"golang.org/x/time/rate"

	"github.com/berth-sh/berth/internal/auth"
	"github.com/berth-sh/berth/internal/errdefs"
)

// KeyRate is a request rate per API key: Rate a second, Burst at once.
// Zero Rate: no limit.
type KeyRate struct {
	Rate  float64
	Burst int
}

// keyRateTTL is how long a tenant's key_rate read from its quota is used
// before it is read again (a change through this daemon applies at once).
const keyRateTTL = 10 * time.Second

// keyRates are the per-key token buckets, in memory: the daemon's
// default (Server.KeyRate), or the key's tenant's key_rate.
type keyRates struct {
	mu      sync.Mutex
	keys    map[string]*keyBucket
	tenants map[string]tenantRate
}

type keyBucket struct {
	r   KeyRate
	lim *rate.Limiter
}

type tenantRate struct {
	r  KeyRate
	at time.Time
}

// forget drops the cached key rate of tenant (its quota changed).
func (k *keyRates) forget(tenant string) {
	k.mu.Lock()
	delete(k.tenants, tenant)
	k.mu.Unlock()
}

// rateFor is the rate of p's key: its tenant's key_rate when set, else
// the daemon's default.
func (s *Server) rateFor(ctx context.Context, p auth.Principal) (KeyRate, error) {
	k := &s.keyRates
	now := time.Now()
	k.mu.Lock()
	tr, ok := k.tenants[p.Tenant]
	k.mu.Unlock()
	if !ok || now.Sub(tr.at) > keyRateTTL {
		q, err := s.m.Quota(ctx, p.Tenant)
		if err != nil {
			return KeyRate{}, err
		}
		tr = tenantRate{at: now}
		if q.KeyRate > 0 {
			tr.r = KeyRate{Rate: float64(q.KeyRate), Burst: int(max(q.KeyBurst, 1, q.KeyRate))}
			if q.KeyBurst > 0 {
				tr.r.Burst = int(q.KeyBurst)
			}
		}
		k.mu.Lock()
		if k.tenants == nil {
			k.tenants = map[string]tenantRate{}
		}
		k.tenants[p.Tenant] = tr
		k.mu.Unlock()
	}
	if tr.r.Rate > 0 {
		return tr.r, nil
	}
	return s.KeyRate, nil
}

// rateLimit takes one token of p's key's bucket. Over the rate it is 429
// rate_limited with the Retry-After after which the bucket has the token
// (honest: the same request then passes unless the key spent it
// meanwhile). Only API keys are limited: the unix socket's admin and
// lease tokens (one sandbox's own calls) are not.
func (s *Server) rateLimit(ctx context.Context, p auth.Principal) error {
	if p.KeyID == "" || s.m == nil { // s.m is nil only in the route-table tests
		return nil
	}
	kr, err := s.rateFor(ctx, p)
	if err != nil || kr.Rate <= 0 {
		return err
	}
	burst := max(kr.Burst, 1)
	k := &s.keyRates
	k.mu.Lock()
	if k.keys == nil {
		k.keys = map[string]*keyBucket{}
	}
	b := k.keys[p.KeyID]
	if b == nil || b.r != kr {
		b = &keyBucket{r: kr, lim: rate.NewLimiter(rate.Limit(kr.Rate), burst)}
		k.keys[p.KeyID] = b
	}
	k.mu.Unlock()
	now := time.Now()
	res := b.lim.ReserveN(now, 1)
	if d := res.DelayFrom(now); !res.OK() || d > 0 {
		res.CancelAt(now)
		return errdefs.RateLimited(d, "API key %s: over its rate of %g requests a second (burst %d)", p.KeyID, kr.Rate, burst)
	}
	return nil
}
