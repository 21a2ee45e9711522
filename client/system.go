package client

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/berth-sh/berth/api"
)

// Health returns nil if the daemon answers GET /healthz with 200.
func (c *Client) Health(ctx context.Context) error {
	req, err := c.newRequest(ctx, http.MethodGet, "/healthz", nil, nil)
	if err != nil {
		return err
	}
	resp, err := c.send(req)
	if err != nil {
		return err
	}
	defer closeBody(resp.Body)
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1024))
	if s := strings.TrimSpace(string(body)); s != "ok" {
		return fmt.Errorf("daemon unhealthy: %q", s)
	}
	return nil
}

// Version returns the daemon's version.
func (c *Client) Version(ctx context.Context) (*api.Version, error) {
	var v api.Version
	if err := c.do(ctx, http.MethodGet, "/v1/version", nil, nil, &v); err != nil {
		return nil, err
	}
	return &v, nil
}

// WhoAmI returns the caller's own credential as the daemon sees it: its
// tenant, scopes and role (GET /v1/whoami).
func (c *Client) WhoAmI(ctx context.Context) (*api.WhoAmI, error) {
	var v api.WhoAmI
	if err := c.do(ctx, http.MethodGet, "/v1/whoami", nil, nil, &v); err != nil {
		return nil, err
	}
	return &v, nil
}

// OpenAPI returns the daemon's OpenAPI document.
func (c *Client) OpenAPI(ctx context.Context) ([]byte, error) {
	req, err := c.newRequest(ctx, http.MethodGet, "/v1/openapi.json", nil, nil)
	if err != nil {
		return nil, err
	}
	resp, err := c.send(req)
	if err != nil {
		return nil, err
	}
	defer closeBody(resp.Body)
	return io.ReadAll(resp.Body)
}

// Doctor looks for orphans and leaks (mounts, cgroups, runtime state,
// directories, processes, records) and checks the runtime. With fix, the
// daemon also reclaims what it found.
func (c *Client) Doctor(ctx context.Context, fix bool) (*api.DoctorReport, error) {
	method, path := http.MethodGet, "/v1/doctor"
	if fix {
		method, path = http.MethodPost, "/v1/doctor/fix"
	}
	var r api.DoctorReport
	if err := c.do(ctx, method, path, nil, nil, &r); err != nil {
		return nil, err
	}
	if r.Findings == nil {
		r.Findings = []api.DoctorFinding{}
	}
	return &r, nil
}
