package admin

import (
	"errors"
	"math"
	"net/http"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/internal/identity"
	"github.com/berth-sh/berth/internal/server/input"
	"github.com/berth-sh/berth/internal/server/rest"
	"github.com/berth-sh/berth/internal/store"
)

// maxQuotaCPUs bounds max_cpus so that its millicores fit an int64 with
// room; no host has that many.
const maxQuotaCPUs = 1 << 40

// tenantParam is the {tenant} path value: a tenant's name by the rule
// tenants are made with (CheckTenantName), of a tenant that exists — a
// quota is never set for a name no tenant has (nor for "../x").
func (h *Handlers) tenantParam(r *http.Request) (string, error) {
	t := r.PathValue("tenant")
	if err := CheckTenantName(t); err != nil {
		return "", err
	}
	if _, err := h.E.Store().GetTenant(r.Context(), t); err != nil {
		return "", err
	}
	return t, nil
}

// GetQuota serves GET /v1/tenants/{tenant}/quota.
func (h *Handlers) GetQuota(w http.ResponseWriter, r *http.Request) {
	tenant, err := h.tenantParam(r)
	if err != nil {
		rest.Error(w, err)
		return
	}
	h.writeQuota(w, r, tenant)
}

// GetOwnQuota is GET /v1/quota: the caller's own tenant's limits and
// usage, read from who the caller is (never from the request), so any key
// of a tenant sees its own quota and nothing of another's. The host's
// administrator gets the default tenant's.
func (h *Handlers) GetOwnQuota(w http.ResponseWriter, r *http.Request) {
	c, ok := identity.From(r.Context())
	if !ok || c.Lease != "" {
		rest.Error(w, errdefs.Permission("a tenant's quota is read with one of its API keys"))
		return
	}
	h.writeQuota(w, r, c.Tenant)
}

func (h *Handlers) writeQuota(w http.ResponseWriter, r *http.Request, tenant string) {
	q, err := h.E.Quota(r.Context(), tenant)
	if err != nil {
		rest.Error(w, err)
		return
	}
	_, rowErr := h.E.Store().GetTenantQuota(r.Context(), tenant)
	u, err := h.E.TenantUsage(r.Context(), tenant, "")
	if err != nil {
		rest.Error(w, err)
		return
	}
	out := quotaToAPI(q)
	out.Default = errors.Is(rowErr, errdefs.ErrNotFound)
	out.Usage = &api.QuotaUsage{Sandboxes: u.Sandboxes, CPUs: float64(u.CPUMillis) / 1000, Memory: u.Memory, Storage: u.Storage}
	rest.JSON(w, 200, out)
}

// PutQuota serves PUT /v1/tenants/{tenant}/quota.
func (h *Handlers) PutQuota(w http.ResponseWriter, r *http.Request) {
	tenant, err := h.tenantParam(r)
	if err != nil {
		rest.Error(w, err)
		return
	}
	var req api.QuotaRequest
	if err := input.Decode(r, &req); err != nil {
		rest.Error(w, err)
		return
	}
	q, err := quotaFromAPI(tenant, &req)
	if err != nil {
		rest.Error(w, err)
		return
	}
	if err := h.E.SetQuota(r.Context(), q); err != nil {
		rest.Error(w, err)
		return
	}
	if h.QuotaChanged != nil {
		h.QuotaChanged(tenant)
	}
	h.GetQuota(w, r)
}

// quotaFromAPI checks and converts a quota request.
func quotaFromAPI(tenant string, req *api.QuotaRequest) (*store.TenantQuota, error) {
	for name, v := range map[string]int64{"max_sandboxes": req.MaxSandboxes, "max_memory_bytes": req.MaxMemory,
		"max_storage_bytes": req.MaxStorage, "create_rate_per_minute": req.CreateRate, "create_burst": req.CreateBurst,
		"key_rate_per_second": req.KeyRate, "key_burst": req.KeyBurst} {
		if v < 0 {
			return nil, errdefs.Invalid("%s must not be negative (0: unlimited)", name)
		}
	}
	if math.IsNaN(req.MaxCPUs) || req.MaxCPUs < 0 || req.MaxCPUs > maxQuotaCPUs {
		return nil, errdefs.Invalid("max_cpus must be between 0 (unlimited) and %d", int64(maxQuotaCPUs))
	}
	milli := int64(math.Round(req.MaxCPUs * 1000))
	if req.MaxCPUs > 0 && milli == 0 {
		return nil, errdefs.Invalid("max_cpus %g is below a millicore", req.MaxCPUs)
	}
	for name, v := range map[string]int64{"create_burst": req.CreateBurst, "key_burst": req.KeyBurst} {
		if v > 1<<20 {
			return nil, errdefs.Invalid("%s must be at most %d", name, 1<<20)
		}
	}
	return &store.TenantQuota{Tenant: tenant, MaxSandboxes: req.MaxSandboxes, MaxCPUMillis: milli,
		MaxMemory: req.MaxMemory, MaxStorage: req.MaxStorage, CreateRate: req.CreateRate, CreateBurst: req.CreateBurst,
		KeyRate: req.KeyRate, KeyBurst: req.KeyBurst}, nil
}

func quotaToAPI(q *store.TenantQuota) api.Quota {
	return api.Quota{Tenant: q.Tenant, QuotaRequest: api.QuotaRequest{MaxSandboxes: q.MaxSandboxes,
		MaxCPUs: float64(q.MaxCPUMillis) / 1000, MaxMemory: q.MaxMemory, MaxStorage: q.MaxStorage,
		CreateRate: q.CreateRate, CreateBurst: q.CreateBurst, KeyRate: q.KeyRate, KeyBurst: q.KeyBurst}}
}
