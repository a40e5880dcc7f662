package client

import (
	"context"
	"net/http"
	"net/url"
)

// secretPath returns the escaped path of a secret.
func secretPath(name string) string { return "/v1/secrets/" + url.PathEscape(name) }

// SetSecret creates the tenant's secret name, or replaces its value (a
// rotation: running sandboxes see it in their next exec, and their service
// at their next start). The value is never returned.
func (c *Client) SetSecret(ctx context.Context, name, value string) (Secret, error) {
	var s Secret
	err := c.do(ctx, http.MethodPut, secretPath(name), nil, SetSecretRequest{Value: value}, &s)
	return s, err
}

// ListSecrets lists the tenant's secrets by name, with the sandboxes that
// reference each; never their values.
func (c *Client) ListSecrets(ctx context.Context) ([]Secret, error) {
	list, err := listAll[Secret](ctx, c, "/v1/secrets", nil)
	return list, err
}

// DeleteSecret deletes the tenant's secret name. It is refused
// (IsConflict, naming them) while a sandbox references it.
func (c *Client) DeleteSecret(ctx context.Context, name string) error {
	return c.do(ctx, http.MethodDelete, secretPath(name), nil, nil, nil)
}
