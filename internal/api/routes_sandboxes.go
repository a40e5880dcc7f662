package api

import (
	"context"
	"net/http"

	"github.com/danielgtaylor/huma/v2"

	"github.com/stead-dev/stead/client"
)

// SandboxRef is the {id} path parameter of every sandbox route (embedded
// in the route inputs; exported only because huma ignores unexported
// embedded fields).
type SandboxRef struct {
	ID string `path:"id" minLength:"1" maxLength:"128" doc:"Sandbox id (sb-...) or name"`
}

// registerSandboxes adds the sandbox lifecycle routes.
func (s *server) registerSandboxes() {
	const tag = "sandboxes"

	create := s.op(http.MethodPost, "/v1/sandboxes", "create-sandbox",
		"Create a sandbox (started unless no_start)", tag, http.StatusCreated)
	create.Errors = append(create.Errors, http.StatusConflict, http.StatusInsufficientStorage)
	huma.Register(s.api, create,
		func(ctx context.Context, in *struct{ Body client.CreateSandboxRequest }) (*out[client.Sandbox], error) {
			p, err := principal(ctx)
			if err != nil {
				return nil, s.fail(ctx, "create sandbox", err)
			}
			if err := confineCreate(p, &in.Body); err != nil {
				return nil, s.fail(ctx, "create sandbox", err)
			}
			sb, err := s.b.CreateSandbox(ctx, p.TenantID, in.Body)
			if err != nil {
				return nil, s.fail(ctx, "create sandbox", err)
			}
			return &out[client.Sandbox]{Body: sb}, nil
		})

	huma.Register(s.api, s.op(http.MethodGet, "/v1/sandboxes", "list-sandboxes",
		"List the tenant's sandboxes", tag, 0),
		func(ctx context.Context, in *struct {
			All bool `query:"all" doc:"Include soft-deleted sandboxes"`
			PageQuery
		}) (*out[client.Page[client.Sandbox]], error) {
			p, err := principal(ctx)
			if err != nil {
				return nil, s.fail(ctx, "list sandboxes", err)
			}
			list, err := s.b.ListSandboxes(ctx, p.TenantID, in.All)
			if err != nil {
				return nil, s.fail(ctx, "list sandboxes", err)
			}
			if list == nil {
				list = []client.Sandbox{}
			}
			return pageOf(filterReached(p, list), in.PageQuery)
		})

	huma.Register(s.api, s.op(http.MethodGet, "/v1/sandboxes/{id}", "get-sandbox",
		"Get a sandbox by id or name", tag, 0),
		func(ctx context.Context, in *SandboxRef) (*out[client.Sandbox], error) {
			p, err := principal(ctx)
			if err != nil {
				return nil, s.fail(ctx, "get sandbox", err)
			}
			sb, err := s.b.GetSandbox(ctx, p.TenantID, in.ID)
			if err != nil {
				return nil, s.fail(ctx, "get sandbox", err)
			}
			return &out[client.Sandbox]{Body: sb}, nil
		})

	del := s.op(http.MethodDelete, "/v1/sandboxes/{id}", "delete-sandbox",
		"Delete a sandbox: soft (recoverable with undelete until purge_at) or, with purge, for good", tag, 0)
	del.Errors = append(del.Errors, http.StatusConflict)
	huma.Register(s.api, del,
		func(ctx context.Context, in *struct {
			SandboxRef
			Purge bool `query:"purge" doc:"Destroy at once; cannot be undone"`
		}) (*out[client.Sandbox], error) {
			p, err := principal(ctx)
			if err != nil {
				return nil, s.fail(ctx, "delete sandbox", err)
			}
			sb, err := s.b.DeleteSandbox(ctx, p.TenantID, in.ID, in.Purge)
			if err != nil {
				return nil, s.fail(ctx, "delete sandbox", err)
			}
			return &out[client.Sandbox]{Body: sb}, nil
		})

	actions := []struct {
		name, summary string
		fn            func(ctx context.Context, tenant, id string) (client.Sandbox, error)
	}{
		{"start", "Start a stopped sandbox (processes restart under the supervisor; files persist)", s.b.StartSandbox},
		{"stop", "Stop a sandbox: run the stop hook, then kill; files persist, processes and /tmp do not", s.b.StopSandbox},
		{"pause", "Freeze every process of a sandbox (memory stays resident)", s.b.PauseSandbox},
		{"resume", "Thaw a paused sandbox", s.b.ResumeSandbox},
		{"undelete", "Bring back a soft-deleted sandbox, stopped", s.b.UndeleteSandbox},
	}
	for _, a := range actions {
		o := s.op(http.MethodPost, "/v1/sandboxes/{id}/"+a.name, a.name+"-sandbox", a.summary, tag, 0)
		o.Errors = append(o.Errors, http.StatusConflict)
		o.Description = "409 when the sandbox's state forbids it, or when the sandbox is already in the state " +
			"this leads to (start or resume of a running sandbox, stop of a stopped one, pause of a paused one): " +
			"nothing is changed, and the problem detail says which."
		opName := a.name + " sandbox"
		fn := a.fn
		huma.Register(s.api, o, func(ctx context.Context, in *SandboxRef) (*out[client.Sandbox], error) {
			p, err := principal(ctx)
			if err != nil {
				return nil, s.fail(ctx, opName, err)
			}
			sb, err := fn(ctx, p.TenantID, in.ID)
			if err != nil {
				return nil, s.fail(ctx, opName, err)
			}
			return &out[client.Sandbox]{Body: sb}, nil
		})
	}

	resize := s.op(http.MethodPost, "/v1/sandboxes/{id}/resize", "resize-sandbox",
		"Change the limits of a stopped sandbox (instance type or individual limits)", tag, 0)
	resize.Errors = append(resize.Errors, http.StatusConflict, http.StatusInsufficientStorage, http.StatusNotImplemented)
	huma.Register(s.api, resize,
		func(ctx context.Context, in *struct {
			SandboxRef
			Body client.ResizeRequest
		}) (*out[client.Sandbox], error) {
			p, err := principal(ctx)
			if err != nil {
				return nil, s.fail(ctx, "resize sandbox", err)
			}
			sb, err := s.b.ResizeSandbox(ctx, p.TenantID, in.ID, in.Body)
			if err != nil {
				return nil, s.fail(ctx, "resize sandbox", err)
			}
			return &out[client.Sandbox]{Body: sb}, nil
		})
}
