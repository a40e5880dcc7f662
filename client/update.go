package client

import (
	"context"
	"net/http"
)

// UpdateSandbox changes settings of an existing sandbox (its idle
// timeout and what happens at it) and returns it as it is now.
func (c *Client) UpdateSandbox(ctx context.Context, id string, req UpdateSandboxRequest) (Sandbox, error) {
	var sb Sandbox
	err := c.do(ctx, http.MethodPatch, sandboxPath(id, ""), nil, req, &sb)
	return sb, err
}
