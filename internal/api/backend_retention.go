package api

import (
	"context"

	"github.com/stead-dev/stead/client"
)

// RetentionBackend keeps the tenants' retention policies. NewHandler
// registers GET /v1/retention and GET/PUT /v1/tenants/{tenant}/retention
// only when its Backend also implements this interface.
type RetentionBackend interface {
	// GetRetention returns tenant's retention policy: what it set and
	// what applies (the daemon's defaults filled in). errs.ErrNotFound
	// for an unknown tenant.
	GetRetention(ctx context.Context, tenant string) (client.TenantRetention, error)
	// SetRetention replaces tenant's retention policy as a whole (an
	// empty field is unset) and returns it as GetRetention does. A value
	// that is not a duration (like 14d, 36h or 1d12h), a negative one, a
	// purge_deleted_after of 0 or one beyond the maximum is
	// errs.ErrInvalid naming the field, and nothing changes. The policy
	// is durable on return and applies to what is already deleted or
	// archived from the next policy run on. errs.ErrNotFound for an
	// unknown tenant.
	SetRetention(ctx context.Context, tenant string, p client.RetentionPolicy) (client.TenantRetention, error)
}
