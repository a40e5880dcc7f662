package client

import (
	"context"
	"net/http"
	"strconv"
)

// GetNetwork describes a sandbox's network: its address, egress policy,
// refusal and traffic counters, and exposed ports.
func (c *Client) GetNetwork(ctx context.Context, sandbox string) (NetworkInfo, error) {
	var n NetworkInfo
	err := c.do(ctx, http.MethodGet, sandboxPath(sandbox, "/network"), nil, nil, &n)
	return n, err
}

// SetNetwork replaces a sandbox's egress policy. It applies at once to a
// running sandbox (no restart) and is kept across stop/start, snapshot
// and fork.
func (c *Client) SetNetwork(ctx context.Context, sandbox string, p NetworkPolicy) (NetworkInfo, error) {
	var n NetworkInfo
	err := c.do(ctx, http.MethodPut, sandboxPath(sandbox, "/network"), nil, p, &n)
	return n, err
}

// ListPorts lists a sandbox's exposed ports.
func (c *Client) ListPorts(ctx context.Context, sandbox string) ([]Port, error) {
	list, err := listAll[Port](ctx, c, sandboxPath(sandbox, "/ports"), nil)
	return list, err
}

// ExposePort exposes a port of a sandbox through the daemon's port proxy.
// A private port's answer carries its access token (exposing it again
// rotates the token).
func (c *Client) ExposePort(ctx context.Context, sandbox string, port int, req ExposePortRequest) (ExposedPort, error) {
	var p ExposedPort
	err := c.do(ctx, http.MethodPut, sandboxPath(sandbox, "/ports/"+strconv.Itoa(port)), nil, req, &p)
	return p, err
}

// UnexposePort stops exposing a port; its token stops working.
func (c *Client) UnexposePort(ctx context.Context, sandbox string, port int) error {
	return c.do(ctx, http.MethodDelete, sandboxPath(sandbox, "/ports/"+strconv.Itoa(port)), nil, nil, nil)
}
