package client

import (
	"context"
	"net/http"

	"github.com/berth-sh/berth/api"
)

func quotaPath(tenant string) string { return "/v1/tenants/" + pathEscape(tenant) + "/quota" }

// GetQuota returns a tenant's quota and what it uses now (host admin).
func (c *Client) GetQuota(ctx context.Context, tenant string) (*api.Quota, error) {
	var q api.Quota
	if err := c.do(ctx, http.MethodGet, quotaPath(tenant), nil, nil, &q); err != nil {
		return nil, err
	}
	return &q, nil
}

// GetOwnQuota returns the quota and usage of the tenant whose key the
// client holds (the host's administrator: the default tenant's).
func (c *Client) GetOwnQuota(ctx context.Context) (*api.Quota, error) {
	var q api.Quota
	if err := c.do(ctx, http.MethodGet, "/v1/quota", nil, nil, &q); err != nil {
		return nil, err
	}
	return &q, nil
}

// SetQuota replaces a tenant's limits (0: unlimited) and returns the
// quota with its usage (host admin).
func (c *Client) SetQuota(ctx context.Context, tenant string, req api.QuotaRequest) (*api.Quota, error) {
	var q api.Quota
	if err := c.do(ctx, http.MethodPut, quotaPath(tenant), nil, req, &q); err != nil {
		return nil, err
	}
	return &q, nil
}
