package client

import (
	"context"
	"net/http"
	"net/url"

	"github.com/berth-sh/berth/api"
)

// CreateSandbox creates a sandbox and returns it once it is running. Like
// every create, it sends an Idempotency-Key and retries a request that got
// no answer with the same key (see IdempotencyHeader).
func (c *Client) CreateSandbox(ctx context.Context, req api.CreateSandboxRequest) (*api.Sandbox, error) {
	var sb api.Sandbox
	if err := c.doIdempotent(ctx, http.MethodPost, "/v1/sandboxes", req, &sb); err != nil {
		return nil, err
	}
	return &sb, nil
}

// GetSandbox returns a sandbox by id or name.
func (c *Client) GetSandbox(ctx context.Context, id string) (*api.Sandbox, error) {
	var sb api.Sandbox
	if err := c.do(ctx, http.MethodGet, sandboxPath(id), nil, nil, &sb); err != nil {
		return nil, err
	}
	return &sb, nil
}

// ListSandboxes lists the caller's sandboxes; all includes the tombstones of
// deleted ones.
func (c *Client) ListSandboxes(ctx context.Context, all bool) ([]api.Sandbox, error) {
	return listAll[api.Sandbox](ctx, c, "/v1/sandboxes", sandboxesQuery(all))
}

// DeleteSandbox destroys a sandbox and returns its tombstone. force deletes
// it whatever its state.
func (c *Client) DeleteSandbox(ctx context.Context, id string, force bool) (*api.Sandbox, error) {
	var q url.Values
	if force {
		q = url.Values{"force": {"true"}}
	}
	var sb api.Sandbox
	if err := c.do(ctx, http.MethodDelete, sandboxPath(id), q, nil, &sb); err != nil {
		return nil, err
	}
	return &sb, nil
}

// Events returns the recorded events of a sandbox, oldest first.
func (c *Client) Events(ctx context.Context, id string) ([]api.Event, error) {
	return listAll[api.Event](ctx, c, sandboxPath(id, "events"), nil)
}
