package client

import (
	"context"
	"net/http"

	"github.com/berth-sh/berth/api"
)

// CreateTenant creates a tenant (the host's administrator only).
func (c *Client) CreateTenant(ctx context.Context, name string) (*api.Tenant, error) {
	var t api.Tenant
	if err := c.do(ctx, http.MethodPost, "/v1/tenants", nil, api.CreateTenantRequest{Name: name}, &t); err != nil {
		return nil, err
	}
	return &t, nil
}

// ListTenants lists the tenants by name (the host's administrator only).
func (c *Client) ListTenants(ctx context.Context) ([]api.Tenant, error) {
	var ts []api.Tenant
	if err := c.do(ctx, http.MethodGet, "/v1/tenants", nil, nil, &ts); err != nil {
		return nil, err
	}
	return ts, nil
}

// DeleteTenant deletes a tenant that owns no live sandbox, volume or
// snapshot, revoking its keys and leases.
func (c *Client) DeleteTenant(ctx context.Context, name string) error {
	return c.do(ctx, http.MethodDelete, "/v1/tenants/"+pathEscape(name), nil, nil, nil)
}
