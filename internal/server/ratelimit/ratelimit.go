// Package ratelimit is the per-API-key request rate of the HTTP API: a
// token bucket per key (golang.org/x/time/rate), at the daemon's default
// rate or the key's tenant's key_rate, read from its quota and kept for
// TenantTTL. Buckets live in memory, per daemon.
package ratelimit

import (
	"context"
	"sync"
	"time"

	"golang.org/x/time/rate"

	"github.com/berth-sh/berth/internal/errdefs"
)

// Rate is a request rate per API key: Rate a second, Burst at once. Zero
// Rate: no limit.
type Rate struct {
	Rate  float64
	Burst int
}

// TenantTTL is how long a tenant's key_rate read from its quota is used
// before it is read again (Forget applies a change at once).
const TenantTTL = 10 * time.Second

// Keys are the per-key token buckets.
type Keys struct {
	mu      sync.Mutex
	keys    map[string]*bucket
	tenants map[string]cached
}

type bucket struct {
	r   Rate
	lim *rate.Limiter
}

type cached struct {
	r  Rate
	at time.Time
}

// Forget drops the cached rate of tenant (its quota changed).
func (k *Keys) Forget(tenant string) {
	k.mu.Lock()
	delete(k.tenants, tenant)
	k.mu.Unlock()
}

// rateFor is key's rate: its tenant's (read through tenantRate, cached)
// when set, else def.
func (k *Keys) rateFor(ctx context.Context, tenant string, def Rate, tenantRate func(context.Context, string) (Rate, error)) (Rate, error) {
	now := time.Now()
	k.mu.Lock()
	tr, ok := k.tenants[tenant]
	k.mu.Unlock()
	if !ok || now.Sub(tr.at) > TenantTTL {
		r, err := tenantRate(ctx, tenant)
		if err != nil {
			return Rate{}, err
		}
		tr = cached{r: r, at: now}
		k.mu.Lock()
		if k.tenants == nil {
			k.tenants = map[string]cached{}
		}
		k.tenants[tenant] = tr
		k.mu.Unlock()
	}
	if tr.r.Rate > 0 {
		return tr.r, nil
	}
	return def, nil
}

// Take takes one token of keyID's bucket (of tenant, at def unless the
// tenant's own rate says otherwise). Over the rate it is 429
// rate_limited with the Retry-After after which the bucket has the token
// (honest: the same request then passes unless the key spent it
// meanwhile).
func (k *Keys) Take(ctx context.Context, keyID, tenant string, def Rate, tenantRate func(context.Context, string) (Rate, error)) error {
	kr, err := k.rateFor(ctx, tenant, def, tenantRate)
	if err != nil || kr.Rate <= 0 {
		return err
	}
	burst := max(kr.Burst, 1)
	k.mu.Lock()
	if k.keys == nil {
		k.keys = map[string]*bucket{}
	}
	b := k.keys[keyID]
	if b == nil || b.r != kr {
		b = &bucket{r: kr, lim: rate.NewLimiter(rate.Limit(kr.Rate), burst)}
		k.keys[keyID] = b
	}
	k.mu.Unlock()
	now := time.Now()
	res := b.lim.ReserveN(now, 1)
	if d := res.DelayFrom(now); !res.OK() || d > 0 {
		res.CancelAt(now)
		return errdefs.RateLimited(d, "API key %s: over its rate of %g requests a second (burst %d)", keyID, kr.Rate, burst)
	}
	return nil
}
