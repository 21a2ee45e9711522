package client

import (
	"context"
	"net/http"
	"strconv"

	"github.com/berth-sh/berth/api"
)

// CreateAPIKey makes an API key; the answer is the only time its secret
// (Key) is shown.
func (c *Client) CreateAPIKey(ctx context.Context, req api.CreateAPIKeyRequest) (*api.CreatedAPIKey, error) {
	var k api.CreatedAPIKey
	if err := c.do(ctx, http.MethodPost, "/v1/keys", nil, req, &k); err != nil {
		return nil, err
	}
	return &k, nil
}

// ListAPIKeys lists the caller's tenant's keys (every tenant's for the
// host), without their secrets.
func (c *Client) ListAPIKeys(ctx context.Context) ([]api.APIKey, error) {
	return listAll[api.APIKey](ctx, c, "/v1/keys", nil)
}

// RevokeAPIKey revokes a key by its id or printable prefix; it and the
// leases it minted are refused from their next request.
func (c *Client) RevokeAPIKey(ctx context.Context, prefix string) (*api.APIKey, error) {
	var k api.APIKey
	if err := c.do(ctx, http.MethodDelete, "/v1/keys/"+pathEscape(prefix), nil, nil, &k); err != nil {
		return nil, err
	}
	return &k, nil
}

// CreateLease mints a lease token for sandbox id with scopes among exec,
// files and ports.
func (c *Client) CreateLease(ctx context.Context, id string, req api.CreateLeaseRequest) (*api.Lease, error) {
	var l api.Lease
	if err := c.do(ctx, http.MethodPost, sandboxPath(id)+"/leases", nil, req, &l); err != nil {
		return nil, err
	}
	return &l, nil
}

// RevokeLease revokes lease leaseID of sandbox id (the id CreateLease
// answered; the create-time lease's is "c-" and the sandbox id): it is
// refused from its next request, and connections it opened end.
func (c *Client) RevokeLease(ctx context.Context, id, leaseID string) error {
	return c.do(ctx, http.MethodDelete, sandboxPath(id)+"/leases/"+pathEscape(leaseID), nil, nil, nil)
}

// CreatePortToken mints a browser token for one port of sandbox id.
func (c *Client) CreatePortToken(ctx context.Context, id string, port int, req api.CreatePortTokenRequest) (*api.PortToken, error) {
	var t api.PortToken
	if err := c.do(ctx, http.MethodPost, sandboxPath(id)+"/ports/"+strconv.Itoa(port)+"/token", nil, req, &t); err != nil {
		return nil, err
	}
	return &t, nil
}

// ListPortTokens lists the port tokens of sandbox id, revoked and expired
// ones included, without their secrets.
func (c *Client) ListPortTokens(ctx context.Context, id string) ([]api.PortTokenInfo, error) {
	var out []api.PortTokenInfo
	if err := c.do(ctx, http.MethodGet, sandboxPath(id)+"/port-tokens", nil, nil, &out); err != nil {
		return nil, err
	}
	return out, nil
}

// RevokePortToken revokes port token tokenID of sandbox id: it is refused
// from its next request, and connections it opened end.
func (c *Client) RevokePortToken(ctx context.Context, id, tokenID string) (*api.PortTokenInfo, error) {
	var t api.PortTokenInfo
	if err := c.do(ctx, http.MethodDelete, sandboxPath(id)+"/port-tokens/"+pathEscape(tokenID), nil, nil, &t); err != nil {
		return nil, err
	}
	return &t, nil
}
