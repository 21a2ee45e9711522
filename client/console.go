package client

import (
	"context"
	"net/http"

	"github.com/berth-sh/berth/api"
)

// ConsoleCode asks the daemon for a one-time sign-in code for its web
// console (the host admin's alone: over the unix socket, `berth console`).
func (c *Client) ConsoleCode(ctx context.Context) (*api.ConsoleCode, error) {
	var out api.ConsoleCode
	if err := c.do(ctx, http.MethodPost, "/v1/console/codes", nil, struct{}{}, &out); err != nil {
		return nil, err
	}
	return &out, nil
}
