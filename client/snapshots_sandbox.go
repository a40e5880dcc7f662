package client

import (
	"context"
	"net/http"
)

// SandboxSnapshots lists the snapshots taken of one sandbox (id or name),
// oldest first, like ListSnapshots(ctx, sandbox), through the sandbox's own
// route (GET /v1/sandboxes/{id}/snapshots), which a key scoped to the
// sandbox may call.
func (c *Client) SandboxSnapshots(ctx context.Context, sandbox string) ([]Snapshot, error) {
	var list []Snapshot
	err := c.do(ctx, http.MethodGet, sandboxPath(sandbox, "/snapshots"), nil, nil, &list)
	return list, err
}
