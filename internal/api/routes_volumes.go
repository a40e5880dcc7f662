package api

import (
	"context"
	"net/http"

	"github.com/danielgtaylor/huma/v2"

	"github.com/stead-dev/stead/client"
)

// VolumeRef is the {id} path parameter of the /v1/volumes/{id} routes
// (exported only because huma ignores unexported embedded fields).
type VolumeRef struct {
	ID string `path:"id" minLength:"1" maxLength:"128" doc:"Volume id (vol-...) or name"`
}

// volumeIntro opens the description of every volume route.
const volumeIntro = "A persistent volume is a directory of data that outlives every sandbox: it is the only safe " +
	"source of truth for a run that spans days. It is attached at sandbox create (volumes in the create request), " +
	"to many sandboxes at once, read-write or read-only, and deleting a sandbox never deletes a volume. "

// registerVolumes adds the persistent volume routes.
func (s *server) registerVolumes(b VolumeBackend) {
	const tag = "volumes"

	create := s.op(http.MethodPost, "/v1/volumes", "create-volume",
		"Create a persistent volume", tag, http.StatusCreated)
	create.Description = volumeIntro + "The volume is created empty, with a quota of size_bytes (default 10 GiB): " +
		"writes past it fail with ENOSPC inside the sandbox and harm nothing else. The name must be unique " +
		"within the tenant among volumes not purged (409 if taken)."
	create.Errors = append(create.Errors, http.StatusConflict, http.StatusInsufficientStorage, http.StatusNotImplemented)
	huma.Register(s.api, create, func(ctx context.Context, in *struct {
		Body client.CreateVolumeRequest
	}) (*out[client.Volume], error) {
		const op = "create volume"
		p, err := principal(ctx)
		if err != nil {
			return nil, s.fail(ctx, op, err)
		}
		v, err := b.CreateVolume(ctx, p.TenantID, in.Body)
		if err != nil {
			return nil, s.fail(ctx, op, err)
		}
		return &out[client.Volume]{Body: v}, nil
	})

	list := s.op(http.MethodGet, "/v1/volumes", "list-volumes",
		"List the tenant's volumes", tag, 0)
	list.Description = volumeIntro + "Lists the tenant's volumes with their quota, usage and the sandboxes that " +
		"mount them (attached_to); with ?all=true soft-deleted volumes are included (state deleted, with purge_at)."
	huma.Register(s.api, list, func(ctx context.Context, in *struct {
		All bool `query:"all" doc:"Include soft-deleted volumes"`
		PageQuery
	}) (*out[client.Page[client.Volume]], error) {
		const op = "list volumes"
		p, err := principal(ctx)
		if err != nil {
			return nil, s.fail(ctx, op, err)
		}
		vols, err := b.ListVolumes(ctx, p.TenantID, in.All)
		if err != nil {
			return nil, s.fail(ctx, op, err)
		}
		if vols == nil {
			vols = []client.Volume{}
		}
		return pageOf(vols, in.PageQuery)
	})

	huma.Register(s.api, s.op(http.MethodGet, "/v1/volumes/{id}", "get-volume",
		"Describe a volume (by id or name)", tag, 0),
		func(ctx context.Context, in *VolumeRef) (*out[client.Volume], error) {
			const op = "get volume"
			p, err := principal(ctx)
			if err != nil {
				return nil, s.fail(ctx, op, err)
			}
			v, err := b.GetVolume(ctx, p.TenantID, in.ID)
			if err != nil {
				return nil, s.fail(ctx, op, err)
			}
			return &out[client.Volume]{Body: v}, nil
		})

	del := s.op(http.MethodDelete, "/v1/volumes/{id}", "delete-volume",
		"Delete a volume: soft (recoverable with undelete until purge_at) or, with purge, for good", tag, 0)
	del.Description = "Soft-deletes the volume: its data is kept, it can no longer be attached, and it can be " +
		"brought back with undelete until purge_at (the retention period), after which it is purged. " +
		"With ?purge=true its data is destroyed at once; this cannot be undone. " +
		"Refused with 409 while any sandbox uses the volume (attached_to lists them): delete those sandboxes first. " +
		"Deleting a sandbox never deletes its volumes."
	del.Errors = append(del.Errors, http.StatusConflict)
	huma.Register(s.api, del, func(ctx context.Context, in *struct {
		VolumeRef
		Purge bool `query:"purge" doc:"Destroy the volume's data at once; cannot be undone"`
	}) (*out[client.Volume], error) {
		const op = "delete volume"
		p, err := principal(ctx)
		if err != nil {
			return nil, s.fail(ctx, op, err)
		}
		v, err := b.DeleteVolume(ctx, p.TenantID, in.ID, in.Purge)
		if err != nil {
			return nil, s.fail(ctx, op, err)
		}
		return &out[client.Volume]{Body: v}, nil
	})

	undel := s.op(http.MethodPost, "/v1/volumes/{id}/undelete", "undelete-volume",
		"Bring back a soft-deleted volume", tag, 0)
	undel.Description = "Restores a soft-deleted volume, with its data, to state available, before its purge_at; " +
		"it can then be attached again. Refused with 409 when the volume is not deleted; " +
		"a purged volume is gone (404). A deleted volume keeps its name, so no other volume can take it meanwhile."
	undel.Errors = append(undel.Errors, http.StatusConflict)
	huma.Register(s.api, undel, func(ctx context.Context, in *VolumeRef) (*out[client.Volume], error) {
		const op = "undelete volume"
		p, err := principal(ctx)
		if err != nil {
			return nil, s.fail(ctx, op, err)
		}
		v, err := b.UndeleteVolume(ctx, p.TenantID, in.ID)
		if err != nil {
			return nil, s.fail(ctx, op, err)
		}
		return &out[client.Volume]{Body: v}, nil
	})

	attach := s.op(http.MethodPost, "/v1/sandboxes/{id}/volumes", "attach-volume",
		"Attach a volume to a stopped sandbox", tag, 0)
	attach.Description = "Adds a volume mount to the sandbox: the volume (name or id; with sub_path, a directory " +
		"inside it, created if missing) is mounted at path from the sandbox's next start, read-only with read_only. " +
		"The sandbox must be stopped (409 while it runs or is paused: its mounts are made at start); a mount at the " +
		"same path is refused (409; detach it first). Returns the sandbox."
	attach.Errors = append(attach.Errors, http.StatusConflict)
	huma.Register(s.api, attach, func(ctx context.Context, in *struct {
		SandboxRef
		Body client.VolumeMount
	}) (*out[client.Sandbox], error) {
		const op = "attach volume"
		p, err := principal(ctx)
		if err != nil {
			return nil, s.fail(ctx, op, err)
		}
		sb, err := b.AttachVolume(ctx, p.TenantID, in.ID, in.Body)
		if err != nil {
			return nil, s.fail(ctx, op, err)
		}
		return &out[client.Sandbox]{Body: sb}, nil
	})

	detach := s.op(http.MethodDelete, "/v1/sandboxes/{id}/volumes", "detach-volume",
		"Detach the volume mounted at a path from a stopped sandbox", tag, 0)
	detach.Description = "Removes the sandbox's volume mount at ?path= from its next start; the volume and its " +
		"data stay. The sandbox must be stopped (409 while it runs or is paused); 404 when no volume is mounted " +
		"at path. Returns the sandbox."
	detach.Errors = append(detach.Errors, http.StatusConflict)
	huma.Register(s.api, detach, func(ctx context.Context, in *struct {
		SandboxRef
		Path string `query:"path" required:"true" minLength:"1" maxLength:"4096" doc:"Mount path in the sandbox, e.g. /data"`
	}) (*out[client.Sandbox], error) {
		const op = "detach volume"
		p, err := principal(ctx)
		if err != nil {
			return nil, s.fail(ctx, op, err)
		}
		sb, err := b.DetachVolume(ctx, p.TenantID, in.ID, in.Path)
		if err != nil {
			return nil, s.fail(ctx, op, err)
		}
		return &out[client.Sandbox]{Body: sb}, nil
	})
}
