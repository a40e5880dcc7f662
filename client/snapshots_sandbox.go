package client

import (
	"context"
)

// SandboxSnapshots lists the snapshots taken of one sandbox (id or name),
// oldest first, like ListSnapshots(ctx, sandbox), through the sandbox's own
// route (GET /v1/sandboxes/{id}/snapshots), which a key scoped to the
// sandbox may call.
func (c *Client) SandboxSnapshots(ctx context.Context, sandbox string) ([]Snapshot, error) {
	list, err := listAll[Snapshot](ctx, c, sandboxPath(sandbox, "/snapshots"), nil)
	return list, err
}
