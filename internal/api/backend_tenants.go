package api

import (
	"context"

	"github.com/stead-dev/stead/client"
)

// TenantBackend serves tenants and the management of API keys. NewHandler
// registers the /v1/tenants routes and the key routes besides create
// (GET /v1/keys, rotate, revoke) only when the backend implements it.
//
// Who may call what is decided by the API before any of these methods runs
// (authz.go: tenants are for admin keys, keys for tenant-admin and admin
// keys); the backend still treats another tenant's keys as absent
// (errs.ErrNotFound) and refuses to let a key act on a key of a higher role
// (errs.ErrForbidden).
type TenantBackend interface {
	// ListAPIKeys lists p's tenant's keys, without secrets.
	ListAPIKeys(ctx context.Context, p Principal) ([]client.APIKey, error)
	// RotateAPIKey makes a new key with a new secret and the old one's
	// name, role and scope, and lets the old one expire after the overlap
	// (default client.DefaultKeyOverlap).
	RotateAPIKey(ctx context.Context, p Principal, id string, req client.RotateAPIKeyRequest) (client.APIKey, error)
	// RevokeAPIKey deletes a key: it stops working at once.
	RevokeAPIKey(ctx context.Context, p Principal, id string) error

	// CreateTenant makes a tenant (errs.ErrConflict when the id is taken,
	// errs.ErrInvalid for a bad id).
	CreateTenant(ctx context.Context, req client.CreateTenantRequest) (client.Tenant, error)
	ListTenants(ctx context.Context) ([]client.Tenant, error)
	GetTenant(ctx context.Context, id string) (client.Tenant, error)
	// SuspendTenant refuses the tenant's keys from now on and stops its
	// running and paused sandboxes. Idempotent.
	SuspendTenant(ctx context.Context, id string) (client.Tenant, error)
	// UnsuspendTenant lets the tenant's keys work again. Idempotent.
	UnsuspendTenant(ctx context.Context, id string) (client.Tenant, error)
	// DeleteTenant purges the tenant's sandboxes, volumes, snapshots and
	// templates, destroys its repository data keys (cryptographic
	// erasure), records it in the audit trail and removes the tenant with
	// its keys. The default tenant is errs.ErrForbidden.
	DeleteTenant(ctx context.Context, id string) (client.TenantDeletion, error)
}
