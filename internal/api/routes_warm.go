package api

import (
	"context"
	"net/http"

	"github.com/danielgtaylor/huma/v2"

	"github.com/stead-dev/stead/client"
)

// WarmPoolBackend serves the warm pool sizes (admin keys only).
type WarmPoolBackend interface {
	// ListWarmPools lists the warm pools in force with what the answering
	// node holds ready.
	ListWarmPools(ctx context.Context) ([]client.WarmPool, error)
	// SetWarmPool sets the size of the warm pool of tenant's template.
	SetWarmPool(ctx context.Context, tenant, template string, size int) (client.WarmPool, error)
	// DeleteWarmPool removes the size set through the API (the daemon's
	// default applies again).
	DeleteWarmPool(ctx context.Context, tenant, template string) error
}

// warmIntro opens the description of every warm pool route.
const warmIntro = "A warm pool keeps started sandboxes of one template of one tenant ready, so that a plain create " +
	"(no snapshot, fork, restore, service, volumes, secret files, instance type or disk size, and not --no-start) " +
	"only gives one its name, environment, secrets and network policy. Sizes start from the daemon's --warm flags; " +
	"a size set here overrides the flag for that pool, applies without a restart (extra ready sandboxes are " +
	"destroyed, missing ones made in the background) and is kept in the store. In a cluster every node keeps that many. "

// WarmPoolRef names one warm pool.
type WarmPoolRef struct {
	TenantRef
	Template string `path:"template" minLength:"1" maxLength:"63" doc:"Template id"`
}

// registerWarmPools adds /v1/warm-pools and /v1/tenants/{tenant}/warm-pools/{template}.
func (s *server) registerWarmPools(b WarmPoolBackend) {
	const tag = "warm pools"
	list := s.op(http.MethodGet, "/v1/warm-pools", "list-warm-pools", "List the warm pools with their sizes and what this node holds ready (admin keys only)", tag, 0)
	list.Description = warmIntro
	huma.Register(s.api, list, func(ctx context.Context, in *PageQuery) (*out[client.Page[client.WarmPool]], error) {
		ps, err := b.ListWarmPools(ctx)
		if err != nil {
			return nil, s.fail(ctx, "list warm pools", err)
		}
		return pageOf(ps, *in)
	})
	set := s.op(http.MethodPut, "/v1/tenants/{tenant}/warm-pools/{template}", "set-warm-pool", "Set the size of a tenant's warm pool of a template (admin keys only)", tag, 0)
	set.Description = warmIntro + "The template must exist for the tenant; a size outside 0..1000 is refused and changes nothing."
	huma.Register(s.api, set, func(ctx context.Context, in *struct {
		WarmPoolRef
		Body client.SetWarmPoolRequest
	}) (*out[client.WarmPool], error) {
		p, err := b.SetWarmPool(ctx, in.Tenant, in.Template, in.Body.Size)
		if err != nil {
			return nil, s.fail(ctx, "set warm pool", err)
		}
		return &out[client.WarmPool]{Body: p}, nil
	})
	del := s.op(http.MethodDelete, "/v1/tenants/{tenant}/warm-pools/{template}", "delete-warm-pool", "Remove a warm pool size set through the API: the daemon's --warm default applies again (admin keys only)", tag, http.StatusNoContent)
	del.Description = warmIntro
	huma.Register(s.api, del, func(ctx context.Context, in *WarmPoolRef) (*struct{}, error) {
		if err := b.DeleteWarmPool(ctx, in.Tenant, in.Template); err != nil {
			return nil, s.fail(ctx, "delete warm pool", err)
		}
		return nil, nil
	})
}
