package client

import (
	"context"
	"net/http"
	"net/url"
	"strconv"

	"github.com/berth-sh/berth/api"
)

// Network returns a sandbox's network mode, addresses and egress rules.
func (c *Client) Network(ctx context.Context, id string) (*api.NetworkRules, error) {
	var nr api.NetworkRules
	if err := c.do(ctx, http.MethodGet, sandboxPath(id, "network"), nil, nil, &nr); err != nil {
		return nil, err
	}
	return &nr, nil
}

// UpdateNetwork adds and removes egress rules of a sandbox in mode
// egress; a running sandbox gets them at once, without a restart.
func (c *Client) UpdateNetwork(ctx context.Context, id string, req api.NetworkRulesRequest) (*api.NetworkRules, error) {
	var nr api.NetworkRules
	if err := c.do(ctx, http.MethodPost, sandboxPath(id, "network"), nil, req, &nr); err != nil {
		return nil, err
	}
	return &nr, nil
}

// Flows returns a sandbox's flow log (connection attempts and DNS
// queries, allowed and denied) after sequence number after.
func (c *Client) Flows(ctx context.Context, id string, after uint64) ([]api.Flow, error) {
	fs := []api.Flow{}
	q := url.Values{}
	if after > 0 {
		q.Set("after", strconv.FormatUint(after, 10))
	}
	if err := c.do(ctx, http.MethodGet, sandboxPath(id, "flows"), q, nil, &fs); err != nil {
		return nil, err
	}
	return fs, nil
}
