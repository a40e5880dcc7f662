package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/danielgtaylor/huma/v2"

	"github.com/stead-dev/stead/client"
	"github.com/stead-dev/stead/internal/errs"
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
	huma.Register(s.api, list, func(ctx context.Context, in *struct {
		SandboxRef
		PageQuery
	}) (*out[client.Page[client.Snapshot]], error) {
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
		return pageOf(snaps, in.PageQuery)
	})
}

// scopedRollbackSnapshot confines the rollback of a key scoped to some
// sandboxes (authorize let it reach sandbox, the {id} of the route) to the
// snapshots taken of that very sandbox: a snapshot of another sandbox of
// the tenant answers exactly as an absent one (one 404, one message, for
// both), so that the scoped key learns nothing of the rest of its tenant.
// Other principals pass: the backend resolves the snapshot in their tenant.
func (s *server) scopedRollbackSnapshot(ctx context.Context, b SnapshotBackend, p Principal, sandbox, snapshot string) error {
	if !p.Scoped() || p.Sandbox != "" {
		return nil
	}
	absent := fmt.Errorf("snapshot %s: %w (GET /v1/sandboxes/%s/snapshots lists this sandbox's)", snapshot, errs.ErrNotFound, sandbox)
	snap, err := b.GetSnapshot(ctx, p.TenantID, snapshot)
	if errors.Is(err, errs.ErrNotFound) {
		return absent
	}
	if err != nil {
		return err
	}
	sb, err := s.b.GetSandbox(ctx, p.TenantID, sandbox)
	if err != nil {
		return err
	}
	if snap.Sandbox != sb.ID || snap.Kind == "volume" {
		return absent
	}
	return nil
}
