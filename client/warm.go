package client

import (
	"context"
	"net/http"
	"net/url"
	"time"
)

// WarmPool is one warm pool: how many started sandboxes of a template of
// a tenant each node keeps ready for plain creates, and where that size
// comes from.
type WarmPool struct {
	Tenant   string `json:"tenant" doc:"Tenant whose creates the pool serves"`
	Template string `json:"template" doc:"Template the pool's sandboxes are made from"`
	Size     int    `json:"size" doc:"How many started sandboxes each node keeps ready"`
	// Source is "api" for a size set through the API (it overrides the
	// daemon's default) and "default" for the daemon's --warm flag.
	Source string `json:"source" enum:"api,default" doc:"api: set through the API (overrides the daemon's --warm default); default: the daemon's --warm flag"`
	// Ready is how many the answering node holds now.
	Ready     int        `json:"ready" doc:"How many the answering node holds ready now"`
	UpdatedAt *time.Time `json:"updated_at,omitempty" doc:"When the size was last set through the API"`
}

// SetWarmPoolRequest sets a warm pool's size.
type SetWarmPoolRequest struct {
	Size int `json:"size" minimum:"0" maximum:"1000" doc:"How many started sandboxes each node keeps ready (0: none)"`
}

// ListWarmPools lists every warm pool with its size and what the
// answering node holds ready (admin keys only).
func (c *Client) ListWarmPools(ctx context.Context) ([]WarmPool, error) {
	return listAll[WarmPool](ctx, c, "/v1/warm-pools", nil)
}

// SetWarmPool sets the size of the warm pool of tenant's template; it
// overrides the daemon's --warm default and applies without a restart
// (admin keys only).
func (c *Client) SetWarmPool(ctx context.Context, tenant, template string, size int) (WarmPool, error) {
	var p WarmPool
	err := c.do(ctx, http.MethodPut, warmPoolPath(tenant, template), nil, SetWarmPoolRequest{Size: size}, &p)
	return p, err
}

// DeleteWarmPool removes the size set through the API: the daemon's
// --warm default applies again (admin keys only).
func (c *Client) DeleteWarmPool(ctx context.Context, tenant, template string) error {
	return c.do(ctx, http.MethodDelete, warmPoolPath(tenant, template), nil, nil, nil)
}

func warmPoolPath(tenant, template string) string {
	return "/v1/tenants/" + url.PathEscape(tenant) + "/warm-pools/" + url.PathEscape(template)
}
