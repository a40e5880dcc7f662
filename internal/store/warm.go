package store

import (
	"context"
	"time"
)

// MaxWarmPoolSize bounds a warm pool's size.
const MaxWarmPoolSize = 1000

// WarmPool is the size an operator set for the warm pool of one template
// of one tenant: how many started sandboxes each node keeps ready for
// plain creates.
type WarmPool struct {
	TenantID   string    `json:"tenant_id"`
	TemplateID string    `json:"template_id"`
	Size       int       `json:"size"`
	UpdatedAt  time.Time `json:"updated_at"`
}

// WarmPoolStore keeps the warm pool sizes set through the API. They
// override the daemon's --warm defaults, pool by pool.
//
// Contract, checked by storetest:
//   - SetWarmPool stores p (replacing the tenant's setting for the
//     template) and returns it as stored; UpdatedAt is p.UpdatedAt, now
//     when zero. A size of 0 is a setting (no warm sandboxes), not a
//     removal. errs.ErrInvalid for an empty tenant or template or a size
//     outside 0..MaxWarmPoolSize, errs.ErrNotFound for an unknown tenant;
//     nothing is stored then.
//   - DeleteWarmPool removes the setting (the default applies again);
//     errs.ErrNotFound when there is none.
//   - ListWarmPools returns every setting (of one tenant when tenantID is
//     not ""), ordered by tenant, then template.
//   - A tenant's settings go with the tenant, in DeleteTenant's
//     transaction.
type WarmPoolStore interface {
	SetWarmPool(ctx context.Context, p WarmPool) (WarmPool, error)
	DeleteWarmPool(ctx context.Context, tenantID, templateID string) error
	ListWarmPools(ctx context.Context, tenantID string) ([]WarmPool, error)
}
