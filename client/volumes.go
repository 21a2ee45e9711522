package client

import (
	"context"
	"net/http"

	"github.com/berth-sh/berth/api"
)

func volumePath(name string) string { return "/v1/volumes/" + pathEscape(name) }

// CreateVolume creates a named, quota-limited volume that sandboxes can
// attach at create (api.CreateSandboxRequest.Volumes).
func (c *Client) CreateVolume(ctx context.Context, req api.CreateVolumeRequest) (*api.Volume, error) {
	var v api.Volume
	if err := c.doIdempotent(ctx, http.MethodPost, "/v1/volumes", req, &v); err != nil {
		return nil, err
	}
	return &v, nil
}

// ListVolumes lists the caller's volumes with their usage.
func (c *Client) ListVolumes(ctx context.Context) ([]api.Volume, error) {
	return listAll[api.Volume](ctx, c, "/v1/volumes", nil)
}

// GetVolume returns one volume by name.
func (c *Client) GetVolume(ctx context.Context, name string) (*api.Volume, error) {
	var v api.Volume
	if err := c.do(ctx, http.MethodGet, volumePath(name), nil, nil, &v); err != nil {
		return nil, err
	}
	return &v, nil
}

// DeleteVolume deletes a volume and its data. It fails with a conflict error
// while the volume is attached to a sandbox that is not deleted.
func (c *Client) DeleteVolume(ctx context.Context, name string) error {
	return c.do(ctx, http.MethodDelete, volumePath(name), nil, nil, nil)
}
