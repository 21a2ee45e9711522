package client

import (
	"context"
	"io"
	"net/http"

	"github.com/berth-sh/berth/api"
)

// SetPool sets the warm pool of a template: min ready sandboxes are kept
// for it (0: none, the default template's automatic pool included).
func (c *Client) SetPool(ctx context.Context, template string, min int) (*api.Pool, error) {
	var p api.Pool
	if err := c.do(ctx, http.MethodPut, poolPath(template), nil, api.PoolRequest{Min: min}, &p); err != nil {
		return nil, err
	}
	return &p, nil
}

// ClearPool forgets the size set for a template's pool: the default
// template's is the daemon's automatic pool again, any other has none.
func (c *Client) ClearPool(ctx context.Context, template string) (*api.Pool, error) {
	var p api.Pool
	if err := c.do(ctx, http.MethodPut, poolPath(template), nil, api.PoolRequest{Auto: true}, &p); err != nil {
		return nil, err
	}
	return &p, nil
}

// GetPool returns the warm pool of a template.
func (c *Client) GetPool(ctx context.Context, template string) (*api.Pool, error) {
	var p api.Pool
	if err := c.do(ctx, http.MethodGet, poolPath(template), nil, nil, &p); err != nil {
		return nil, err
	}
	return &p, nil
}

// ListPools lists the warm pools of every template that has one.
func (c *Client) ListPools(ctx context.Context) ([]api.Pool, error) {
	ps := []api.Pool{}
	if err := c.do(ctx, http.MethodGet, "/v1/pools", nil, nil, &ps); err != nil {
		return nil, err
	}
	if ps == nil {
		ps = []api.Pool{}
	}
	return ps, nil
}

func poolPath(template string) string { return "/v1/templates/" + pathEscape(template) + "/pool" }

// Apply builds a declarative template: req.Spec is the template file (YAML
// or JSON) and req.Files a tar of the local files its copy steps name. Only
// the steps whose inputs changed are built again. Build output is written to
// progress (if non-nil) as it is produced; the template is returned when the
// build succeeds.
func (c *Client) Apply(ctx context.Context, req api.ApplyRequest, progress io.Writer) (*api.Template, error) {
	return c.buildStream(ctx, "/v1/apply", req, progress)
}
