package api

import (
	"context"
	"net/http"

	"github.com/danielgtaylor/huma/v2"

	"github.com/stead-dev/stead/client"
)

// registerSandboxSnapshots adds GET /v1/sandboxes/{id}/snapshots: one
// sandbox's snapshots under the sandbox's own path, so that a key scoped
// to the sandbox (which may not call GET /v1/snapshots) can list the
// snapshots it may roll back to. It answers as GET /v1/snapshots?sandbox=.
func (s *server) registerSandboxSnapshots(b SnapshotBackend) {
	list := s.op(http.MethodGet, "/v1/sandboxes/{id}/snapshots", "list-sandbox-snapshots",
		"List one sandbox's snapshots, oldest first", "snapshots", 0)
	list.Description = "Lists the local snapshots taken of the sandbox, oldest first, as GET /v1/snapshots?sandbox= does; " +
		"a key scoped to the sandbox may call it."
	huma.Register(s.api, list, func(ctx context.Context, in *struct{ SandboxRef }) (*out[[]client.Snapshot], error) {
		const op = "list sandbox snapshots"
		p, err := principal(ctx)
		if err != nil {
			return nil, s.fail(ctx, op, err)
		}
		snaps, err := b.ListSnapshots(ctx, p.TenantID, in.ID)
		if err != nil {
			return nil, s.fail(ctx, op, err)
		}
		if snaps == nil {
			snaps = []client.Snapshot{}
		}
		return &out[[]client.Snapshot]{Body: snaps}, nil
	})
}
