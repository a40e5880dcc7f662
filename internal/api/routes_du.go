package api

import (
	"context"
	"net/http"

	"github.com/danielgtaylor/huma/v2"

	"github.com/stead-dev/stead/client"
)

// DiskUsageBackend reports where the space went in a sandbox or a volume.
// NewHandler registers GET /v1/sandboxes/{id}/du and GET /v1/volumes/{id}/du
// only when the Backend implements it.
type DiskUsageBackend interface {
	// DiskUsage walks path in the sandbox (a path on a mounted volume
	// walks the volume); top bounds each list (0: the default).
	DiskUsage(ctx context.Context, tenant, id, path string, top int) (client.DiskUsage, error)
	// VolumeDiskUsage walks path in the volume.
	VolumeDiskUsage(ctx context.Context, tenant, id, path string, top int) (client.DiskUsage, error)
}

// DiskUsageQuery is the query of the du routes (exported only because
// huma ignores unexported embedded fields).
type DiskUsageQuery struct {
	Path string `query:"path" doc:"Path to walk (default /)"`
	Top  int    `query:"top" minimum:"0" maximum:"1000" doc:"Entries in each list (default 10)"`
}

// registerDiskUsage adds the du routes.
func (s *server) registerDiskUsage(b DiskUsageBackend) {
	const desc = "Where the space went, as du and ncdu tell it: the path's own entries largest first, the largest " +
		"files anywhere under it, and the directories whose own files take the most space; with the quota and " +
		"what the whole uses of it. Walked by the daemon on the running or stopped tree, never following a " +
		"symlink, hard links counted once. Not activity: it does not keep a sandbox up."
	o := s.op(http.MethodGet, "/v1/sandboxes/{id}/du", "sandbox-disk-usage", "Where the space went in a sandbox", "sandboxes", 0)
	o.Description = desc
	huma.Register(s.api, o, func(ctx context.Context, in *struct {
		SandboxRef
		DiskUsageQuery
	}) (*out[client.DiskUsage], error) {
		const op = "disk usage"
		p, err := principal(ctx)
		if err != nil {
			return nil, s.fail(ctx, op, err)
		}
		u, err := b.DiskUsage(ctx, p.TenantID, in.ID, pathOrRoot(in.Path), in.Top)
		if err != nil {
			return nil, s.fail(ctx, op, err)
		}
		return &out[client.DiskUsage]{Body: u}, nil
	})
	ov := s.op(http.MethodGet, "/v1/volumes/{id}/du", "volume-disk-usage", "Where the space went in a volume", "volumes", 0)
	ov.Description = desc
	huma.Register(s.api, ov, func(ctx context.Context, in *struct {
		VolumeRef
		DiskUsageQuery
	}) (*out[client.DiskUsage], error) {
		const op = "volume disk usage"
		p, err := principal(ctx)
		if err != nil {
			return nil, s.fail(ctx, op, err)
		}
		u, err := b.VolumeDiskUsage(ctx, p.TenantID, in.ID, pathOrRoot(in.Path), in.Top)
		if err != nil {
			return nil, s.fail(ctx, op, err)
		}
		return &out[client.DiskUsage]{Body: u}, nil
	})
}

// pathOrRoot is p, or / when p is empty.
func pathOrRoot(p string) string {
	if p == "" {
		return "/"
	}
	return p
}
