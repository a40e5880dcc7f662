package api

import (
	"context"
	"net/http"

	"github.com/danielgtaylor/huma/v2"

	"github.com/stead-dev/stead/client"
)

// UpdateBackend changes settings of an existing sandbox. NewHandler
// registers PATCH /v1/sandboxes/{id} only when its Backend also
// implements it.
type UpdateBackend interface {
	// UpdateSandbox changes the idle policy of sandbox id (any state but
	// deleted); absent fields keep their value. A bad value is
	// errs.ErrInvalid and changes nothing; another tenant's sandbox is
	// errs.ErrNotFound.
	UpdateSandbox(ctx context.Context, tenant, id string, req client.UpdateSandboxRequest) (client.Sandbox, error)
}

// registerUpdate adds PATCH /v1/sandboxes/{id}.
func (s *server) registerUpdate(b UpdateBackend) {
	op := s.op(http.MethodPatch, "/v1/sandboxes/{id}", "update-sandbox",
		"Change a sandbox's idle timeout and what happens at it (stop or pause)", "sandboxes", 0)
	op.Description = "Fields left out keep their value. The change counts as activity: the new idle timeout runs from now."
	op.Errors = append(op.Errors, http.StatusConflict)
	huma.Register(s.api, op, func(ctx context.Context, in *struct {
		SandboxRef
		Body client.UpdateSandboxRequest
	}) (*out[client.Sandbox], error) {
		const opName = "update sandbox"
		p, err := principal(ctx)
		if err != nil {
			return nil, s.fail(ctx, opName, err)
		}
		sb, err := b.UpdateSandbox(ctx, p.TenantID, in.ID, in.Body)
		if err != nil {
			return nil, s.fail(ctx, opName, err)
		}
		return &out[client.Sandbox]{Body: sb}, nil
	})
}
