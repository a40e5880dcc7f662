package client

import (
	"context"
	"net/http"
	"net/url"
)

// Quota returns the caller's own tenant's quotas with its usage (any key
// of the tenant may read them).
func (c *Client) Quota(ctx context.Context) (TenantQuotas, error) {
	var q TenantQuotas
	err := c.do(ctx, http.MethodGet, "/v1/quota", nil, nil, &q)
	return q, err
}

// TenantQuotas returns tenant's quotas with its usage (admin keys only).
func (c *Client) TenantQuotas(ctx context.Context, tenant string) (TenantQuotas, error) {
	var q TenantQuotas
	err := c.do(ctx, http.MethodGet, "/v1/tenants/"+url.PathEscape(tenant)+"/quotas", nil, nil, &q)
	return q, err
}

// SetTenantQuotas changes the limits req names (admin keys only) and
// returns the quotas with the usage.
func (c *Client) SetTenantQuotas(ctx context.Context, tenant string, req SetQuotasRequest) (TenantQuotas, error) {
	var q TenantQuotas
	err := c.do(ctx, http.MethodPut, "/v1/tenants/"+url.PathEscape(tenant)+"/quotas", nil, req, &q)
	return q, err
}

// IsQuotaExceeded reports whether err is the API's refusal of an operation
// that would take the tenant past one of its quotas (HTTP 429; the
// error's detail names the quota, its limit, the usage and the request).
func IsQuotaExceeded(err error) bool { return StatusCode(err) == http.StatusTooManyRequests }
