package client

import (
	"context"
	"net/http"

	"github.com/berth-sh/berth/api"
)

func secretPath(name string) string { return "/v1/secrets/" + pathEscape(name) }

// SetSecret creates or replaces the caller's secret name. The value is
// sealed by the daemon and no call returns it.
func (c *Client) SetSecret(ctx context.Context, name, value string) (*api.Secret, error) {
	var s api.Secret
	if err := c.do(ctx, http.MethodPut, secretPath(name), nil, api.PutSecretRequest{Value: value}, &s); err != nil {
		return nil, err
	}
	return &s, nil
}

// ListSecrets lists the caller's secrets: names and times, never values.
func (c *Client) ListSecrets(ctx context.Context) ([]api.Secret, error) {
	return listAll[api.Secret](ctx, c, "/v1/secrets", nil)
}

// DeleteSecret removes a secret.
func (c *Client) DeleteSecret(ctx context.Context, name string) error {
	return c.do(ctx, http.MethodDelete, secretPath(name), nil, nil, nil)
}

// RotateSecretsKey makes key (standard base64 of 32 bytes) the daemon's
// master key, re-wrapping every secret while it serves (admin).
func (c *Client) RotateSecretsKey(ctx context.Context, key string) (*api.RotateSecretsKeyResponse, error) {
	var out api.RotateSecretsKeyResponse
	if err := c.do(ctx, http.MethodPost, "/v1/secrets/rotate-key", nil, api.RotateSecretsKeyRequest{Key: key}, &out); err != nil {
		return nil, err
	}
	return &out, nil
}
