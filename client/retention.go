package client

import (
	"context"
	"net/http"
	"net/url"
)

// GetRetention returns the retention policy of the caller's tenant, the
// daemon's defaults filled in.
func (c *Client) GetRetention(ctx context.Context) (TenantRetention, error) {
	var out TenantRetention
	err := c.do(ctx, http.MethodGet, "/v1/retention", nil, nil, &out)
	return out, err
}

// GetTenantRetention returns tenant id's retention policy (admin).
func (c *Client) GetTenantRetention(ctx context.Context, id string) (TenantRetention, error) {
	var out TenantRetention
	err := c.do(ctx, http.MethodGet, "/v1/tenants/"+url.PathEscape(id)+"/retention", nil, nil, &out)
	return out, err
}

// SetTenantRetention replaces tenant id's retention policy as a whole
// (admin): an empty field is unset. Bad values are a 400 that changes
// nothing.
func (c *Client) SetTenantRetention(ctx context.Context, id string, p RetentionPolicy) (TenantRetention, error) {
	var out TenantRetention
	err := c.do(ctx, http.MethodPut, "/v1/tenants/"+url.PathEscape(id)+"/retention", nil, p, &out)
	return out, err
}
