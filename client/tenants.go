package client

import (
	"context"
	"net/http"
	"net/url"
)

// WithTenant returns a copy of c whose requests act in tenant (sent as
// the X-Stead-Tenant header). Only an admin key may act in a tenant other
// than its own; "" acts in the key's own tenant.
func (c *Client) WithTenant(tenant string) *Client {
	cc := *c
	cc.tenant = tenant
	return &cc
}

// CreateKey creates an API key in the caller's tenant (tenant-admin or
// admin keys; a key makes keys of its own role or below). The returned
// Secret is shown only this once.
func (c *Client) CreateKey(ctx context.Context, req CreateAPIKeyRequest) (APIKey, error) {
	var k APIKey
	err := c.do(ctx, http.MethodPost, "/v1/keys", nil, req, &k)
	return k, err
}

// ListKeys lists the tenant's API keys, without secrets.
func (c *Client) ListKeys(ctx context.Context) ([]APIKey, error) {
	out, err := listAll[APIKey](ctx, c, "/v1/keys", nil)
	return out, err
}

// RotateKey gives key id a new secret (returned, shown only once) under a
// new key id with the same name, role and scope; the old secret keeps
// working for the overlap (default 24h), then expires.
func (c *Client) RotateKey(ctx context.Context, id string, req RotateAPIKeyRequest) (APIKey, error) {
	var k APIKey
	err := c.do(ctx, http.MethodPost, "/v1/keys/"+url.PathEscape(id)+"/rotate", nil, req, &k)
	return k, err
}

// RevokeKey deletes key id: its secret stops working at once.
func (c *Client) RevokeKey(ctx context.Context, id string) error {
	return c.do(ctx, http.MethodDelete, "/v1/keys/"+url.PathEscape(id), nil, nil, nil)
}

// CreateTenant creates a tenant (admin keys only).
func (c *Client) CreateTenant(ctx context.Context, req CreateTenantRequest) (Tenant, error) {
	var t Tenant
	err := c.do(ctx, http.MethodPost, "/v1/tenants", nil, req, &t)
	return t, err
}

// ListTenants lists every tenant (admin keys only).
func (c *Client) ListTenants(ctx context.Context) ([]Tenant, error) {
	out, err := listAll[Tenant](ctx, c, "/v1/tenants", nil)
	return out, err
}

// GetTenant describes one tenant (admin keys only).
func (c *Client) GetTenant(ctx context.Context, id string) (Tenant, error) {
	var t Tenant
	err := c.do(ctx, http.MethodGet, "/v1/tenants/"+url.PathEscape(id), nil, nil, &t)
	return t, err
}

// SuspendTenant refuses the tenant's keys (403) and stops its running
// sandboxes (admin keys only).
func (c *Client) SuspendTenant(ctx context.Context, id string) (Tenant, error) {
	var t Tenant
	err := c.do(ctx, http.MethodPost, "/v1/tenants/"+url.PathEscape(id)+"/suspend", nil, nil, &t)
	return t, err
}

// UnsuspendTenant lets the tenant's keys work again (admin keys only); its
// sandboxes stay stopped until started.
func (c *Client) UnsuspendTenant(ctx context.Context, id string) (Tenant, error) {
	var t Tenant
	err := c.do(ctx, http.MethodPost, "/v1/tenants/"+url.PathEscape(id)+"/unsuspend", nil, nil, &t)
	return t, err
}

// DeleteTenant purges the tenant's sandboxes, volumes, snapshots,
// templates and keys and destroys its repository data keys, so its pushed
// data can no longer be read (admin keys only; not the default tenant).
func (c *Client) DeleteTenant(ctx context.Context, id string) (TenantDeletion, error) {
	var d TenantDeletion
	err := c.do(ctx, http.MethodDelete, "/v1/tenants/"+url.PathEscape(id), nil, nil, &d)
	return d, err
}
