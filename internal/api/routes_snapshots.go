package api

import (
	"context"
	"net/http"

	"github.com/danielgtaylor/huma/v2"

	"github.com/stead-dev/stead/client"
)

// SnapshotRef is the {id} path parameter of the /v1/snapshots/{id} routes
// (exported only because huma ignores unexported embedded fields).
type SnapshotRef struct {
	ID string `path:"id" minLength:"1" maxLength:"128" doc:"Snapshot id (snap-...)"`
}

// registerSnapshots adds the local snapshot, fork and rollback routes.
func (s *server) registerSnapshots(b SnapshotBackend) {
	const tag = "snapshots"

	create := s.op(http.MethodPost, "/v1/sandboxes/{id}/snapshots", "create-snapshot",
		"Take a read-only snapshot of a sandbox's files", tag, http.StatusCreated)
	create.Description = "Takes a read-only, point-in-time snapshot of the sandbox's root filesystem, running or stopped. " +
		"On a copy-on-write pool (btrfs) it takes constant time whatever the sandbox's size; a running sandbox's " +
		"processes are frozen only for that instant (frozen_for in the result says how long). " +
		"The snapshot can be forked into new sandboxes or rolled back to; it is kept until deleted. " +
		"Its parent is the snapshot the sandbox was itself forked or rolled back from, which makes the snapshots a tree."
	create.Errors = append(create.Errors, http.StatusConflict, http.StatusInsufficientStorage)
	huma.Register(s.api, create, func(ctx context.Context, in *struct {
		SandboxRef
		Body *client.CreateSnapshotRequest // optional: no body is no label
	}) (*out[client.Snapshot], error) {
		const op = "create snapshot"
		p, err := principal(ctx)
		if err != nil {
			return nil, s.fail(ctx, op, err)
		}
		var req client.CreateSnapshotRequest
		if in.Body != nil {
			req = *in.Body
		}
		snap, err := b.CreateSnapshot(ctx, p.TenantID, in.ID, req)
		if err != nil {
			return nil, s.fail(ctx, op, err)
		}
		return &out[client.Snapshot]{Body: snap}, nil
	})

	list := s.op(http.MethodGet, "/v1/snapshots", "list-snapshots",
		"List snapshots, oldest first (all of the tenant's, or one sandbox's)", tag, 0)
	list.Description = "Lists the tenant's local snapshots, oldest first; with ?sandbox= only those taken of that sandbox " +
		"(id or name). Each snapshot names its parent, so the list can be drawn as a tree (parent, then children)."
	huma.Register(s.api, list, func(ctx context.Context, in *struct {
		Sandbox string `query:"sandbox" maxLength:"128" doc:"Only snapshots of this sandbox (id or name); empty for all"`
		PageQuery
	}) (*out[client.Page[client.Snapshot]], error) {
		const op = "list snapshots"
		p, err := principal(ctx)
		if err != nil {
			return nil, s.fail(ctx, op, err)
		}
		snaps, err := b.ListSnapshots(ctx, p.TenantID, in.Sandbox)
		if err != nil {
			return nil, s.fail(ctx, op, err)
		}
		if snaps == nil {
			snaps = []client.Snapshot{}
		}
		return pageOf(snaps, in.PageQuery)
	})

	huma.Register(s.api, s.op(http.MethodGet, "/v1/snapshots/{id}", "get-snapshot",
		"Describe a snapshot", tag, 0),
		func(ctx context.Context, in *SnapshotRef) (*out[client.Snapshot], error) {
			const op = "get snapshot"
			p, err := principal(ctx)
			if err != nil {
				return nil, s.fail(ctx, op, err)
			}
			snap, err := b.GetSnapshot(ctx, p.TenantID, in.ID)
			if err != nil {
				return nil, s.fail(ctx, op, err)
			}
			return &out[client.Snapshot]{Body: snap}, nil
		})

	del := s.op(http.MethodDelete, "/v1/snapshots/{id}", "delete-snapshot",
		"Delete a snapshot", tag, http.StatusNoContent)
	del.Description = "Deletes the snapshot. Sandboxes forked or rolled back from it are independent copies " +
		"and keep their files."
	del.Errors = append(del.Errors, http.StatusConflict)
	huma.Register(s.api, del, func(ctx context.Context, in *SnapshotRef) (*struct{}, error) {
		const op = "delete snapshot"
		p, err := principal(ctx)
		if err != nil {
			return nil, s.fail(ctx, op, err)
		}
		if err := b.DeleteSnapshot(ctx, p.TenantID, in.ID); err != nil {
			return nil, s.fail(ctx, op, err)
		}
		return nil, nil
	})

	const forkDesc = "Creates count new sandboxes (default 1, at most 50), each with a new id and an identical, " +
		"independent copy of the source's files (copy-on-write on btrfs, so constant time whatever the size), " +
		"able to run on its own. They are started unless no_start. The response lists the new sandboxes. " +
		"They mount the source's volumes (the same volumes, shared); volumes replaces the mount at the same path " +
		"(or adds one). A source's volume that is gone is refused with 409, naming it."
	type forkOut = out[client.ForkResult]

	forkSB := s.op(http.MethodPost, "/v1/sandboxes/{id}/fork", "fork-sandbox",
		"Fork a sandbox into N new sandboxes with identical files", tag, http.StatusCreated)
	forkSB.Description = forkDesc + " The sandbox is snapshotted first (a snapshot of kind fork, frozen only for an " +
		"instant if it is running); the new sandboxes are made from that snapshot."
	forkSB.Errors = append(forkSB.Errors, http.StatusConflict, http.StatusInsufficientStorage)
	huma.Register(s.api, forkSB, func(ctx context.Context, in *struct {
		SandboxRef
		Body *client.ForkRequest // optional: no body is one started sandbox
	}) (*forkOut, error) {
		return s.fork(ctx, b, "fork sandbox", in.ID, in.Body)
	})

	forkSnap := s.op(http.MethodPost, "/v1/snapshots/{id}/fork", "fork-snapshot",
		"Fork a snapshot into N new sandboxes with its files", tag, http.StatusCreated)
	forkSnap.Description = forkDesc + " Snapshots taken of the new sandboxes have this snapshot as their parent."
	forkSnap.Errors = append(forkSnap.Errors, http.StatusConflict, http.StatusInsufficientStorage)
	huma.Register(s.api, forkSnap, func(ctx context.Context, in *struct {
		SnapshotRef
		Body *client.ForkRequest // optional: no body is one started sandbox
	}) (*forkOut, error) {
		return s.fork(ctx, b, "fork snapshot", in.ID, in.Body)
	})

	rb := s.op(http.MethodPost, "/v1/sandboxes/{id}/rollback", "rollback-sandbox",
		"Roll a sandbox's files back to a snapshot, in place (same id), undoably", tag, 0)
	rb.Description = "Returns the sandbox's files to the snapshot while keeping its id, name and settings. " +
		"First an automatic safety snapshot (kind safety) is taken of the files being replaced, so the rollback " +
		"can itself be undone by rolling back to it; the response names it. A running sandbox is restarted, " +
		"which restarts its supervised service, on the rolled-back files. The snapshot may be any of the tenant's."
	rb.Errors = append(rb.Errors, http.StatusConflict, http.StatusInsufficientStorage)
	huma.Register(s.api, rb, func(ctx context.Context, in *struct {
		SandboxRef
		Body client.RollbackRequest
	}) (*out[client.RollbackResult], error) {
		const op = "rollback sandbox"
		p, err := principal(ctx)
		if err != nil {
			return nil, s.fail(ctx, op, err)
		}
		if err := s.scopedRollbackSnapshot(ctx, b, p, in.ID, in.Body.Snapshot); err != nil {
			return nil, s.fail(ctx, op, err)
		}
		res, err := b.Rollback(ctx, p.TenantID, in.ID, in.Body)
		if err != nil {
			return nil, s.fail(ctx, op, err)
		}
		return &out[client.RollbackResult]{Body: res}, nil
	})
}

// fork serves both fork routes: source is a sandbox (id or name) or a
// snapshot id, told apart by the backend. A nil body is the default
// request.
func (s *server) fork(ctx context.Context, b SnapshotBackend, op, source string, body *client.ForkRequest) (*out[client.ForkResult], error) {
	var req client.ForkRequest
	if body != nil {
		req = *body
	}
	p, err := principal(ctx)
	if err != nil {
		return nil, s.fail(ctx, op, err)
	}
	sbs, err := b.Fork(ctx, p.TenantID, source, req)
	if err != nil {
		return nil, s.fail(ctx, op, err)
	}
	if sbs == nil {
		sbs = []client.Sandbox{}
	}
	return &out[client.ForkResult]{Body: client.ForkResult{Sandboxes: sbs}}, nil
}
