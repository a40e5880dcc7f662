package client

import (
	"context"
	"net/http"
	"net/url"
	"strconv"
)

// CreateSandbox creates a sandbox; it is started unless req.NoStart.
func (c *Client) CreateSandbox(ctx context.Context, req CreateSandboxRequest) (Sandbox, error) {
	var sb Sandbox
	err := c.do(ctx, http.MethodPost, "/v1/sandboxes", nil, req, &sb)
	return sb, err
}

// GetSandbox returns a sandbox by id or name.
func (c *Client) GetSandbox(ctx context.Context, id string) (Sandbox, error) {
	var sb Sandbox
	err := c.do(ctx, http.MethodGet, sandboxPath(id, ""), nil, nil, &sb)
	return sb, err
}

// ListSandboxes lists the tenant's sandboxes; all includes soft-deleted ones.
func (c *Client) ListSandboxes(ctx context.Context, all bool) ([]Sandbox, error) {
	var q url.Values
	if all {
		q = url.Values{"all": {"true"}}
	}
	list, err := listAll[Sandbox](ctx, c, "/v1/sandboxes", q)
	return list, err
}

// action posts a lifecycle action to a sandbox.
func (c *Client) action(ctx context.Context, id, action string, body any) (Sandbox, error) {
	var sb Sandbox
	err := c.do(ctx, http.MethodPost, sandboxPath(id, "/"+action), nil, body, &sb)
	return sb, err
}

// Connect brings a sandbox back for use, as E2B's and Daytona's connect
// do: a stopped sandbox is started and a paused one resumed; a running one
// is returned as it is.
func (c *Client) Connect(ctx context.Context, id string) (Sandbox, error) {
	sb, err := c.GetSandbox(ctx, id)
	if err != nil {
		return Sandbox{}, err
	}
	if sb.State == "running" {
		return sb, nil
	}
	started, err := c.StartSandbox(ctx, id)
	if IsConflict(err) {
		// Started by someone else meanwhile ("already running")?
		if now, gerr := c.GetSandbox(ctx, id); gerr == nil && now.State == "running" {
			return now, nil
		}
	}
	return started, err
}

// StartSandbox starts a stopped (or archived) sandbox, or resumes a paused
// one. A running sandbox is a 409 (IsConflict): it was already started and
// nothing was done (Connect takes a sandbox as it is).
func (c *Client) StartSandbox(ctx context.Context, id string) (Sandbox, error) {
	return c.action(ctx, id, "start", nil)
}

// StopSandbox stops a sandbox: its files persist, its processes and /tmp do not.
func (c *Client) StopSandbox(ctx context.Context, id string) (Sandbox, error) {
	return c.action(ctx, id, "stop", nil)
}

// PauseSandbox freezes every process of a running sandbox.
func (c *Client) PauseSandbox(ctx context.Context, id string) (Sandbox, error) {
	return c.action(ctx, id, "pause", nil)
}

// ResumeSandbox thaws a paused sandbox; any other state is a 409
// (IsConflict), a running one included.
func (c *Client) ResumeSandbox(ctx context.Context, id string) (Sandbox, error) {
	return c.action(ctx, id, "resume", nil)
}

// UndeleteSandbox brings back a soft-deleted sandbox, stopped.
func (c *Client) UndeleteSandbox(ctx context.Context, id string) (Sandbox, error) {
	return c.action(ctx, id, "undelete", nil)
}

// ResizeSandbox changes the limits of a stopped sandbox.
func (c *Client) ResizeSandbox(ctx context.Context, id string, req ResizeRequest) (Sandbox, error) {
	return c.action(ctx, id, "resize", req)
}

// DeleteSandbox soft-deletes a sandbox (recoverable with UndeleteSandbox
// until its purge_at), or with purge destroys it for good.
func (c *Client) DeleteSandbox(ctx context.Context, id string, purge bool) (Sandbox, error) {
	var q url.Values
	if purge {
		q = url.Values{"purge": {strconv.FormatBool(purge)}}
	}
	var sb Sandbox
	err := c.do(ctx, http.MethodDelete, sandboxPath(id, ""), q, nil, &sb)
	return sb, err
}
