package api

import (
	"context"

	"github.com/stead-dev/stead/client"
)

// QuotaBackend keeps the tenants' quotas. NewHandler registers
// GET /v1/quota (any key, for its own tenant) and GET and PUT
// /v1/tenants/{tenant}/quotas (admin keys, see authz.go) only when its
// Backend also implements this interface.
//
// An operation a quota refuses fails with an *errs.QuotaError, answered
// 429 with the quota, its limit, the usage and the request (errors.go).
type QuotaBackend interface {
	// TenantQuotas returns the tenant's limits with its current usage.
	// errs.ErrNotFound for an unknown tenant.
	TenantQuotas(ctx context.Context, tenant string) (client.TenantQuotas, error)
	// SetTenantQuotas changes the limits req names (an absent field keeps
	// its limit, 0 clears it) and returns the quotas with the usage; the
	// change is durable on return. A negative limit is errs.ErrInvalid and
	// changes nothing; a limit below the usage is accepted (it refuses
	// further growth only). errs.ErrNotFound for an unknown tenant.
	SetTenantQuotas(ctx context.Context, tenant string, req client.SetQuotasRequest) (client.TenantQuotas, error)
}
