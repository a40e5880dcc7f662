package api

import (
	"context"

	"github.com/stead-dev/stead/client"
)

// SecretBackend keeps a tenant's secrets. NewHandler registers the
// /v1/secrets routes only when its Backend also implements this interface.
// Those routes are closed to sandbox-scoped tokens: an agent uses the
// secrets its sandbox references, and never manages them.
//
// As with Backend, every method gets the caller's tenant; another tenant's
// secret is absent (errs.ErrNotFound). No method returns a value: once set,
// a value leaves the daemon only into the sandboxes that reference it.
type SecretBackend interface {
	// SetSecret creates the secret name or replaces its value (a
	// rotation). A name that is not an environment variable name
	// ([A-Za-z_][A-Za-z0-9_]*, at most 128 bytes) or a value with a NUL
	// byte, or longer than 64 KiB, is errs.ErrInvalid, and the error never
	// quotes the value. The value is stored sealed and durable on return.
	SetSecret(ctx context.Context, tenant, name, value string) (client.Secret, error)
	// ListSecrets returns the tenant's secrets by name, each with the
	// sandboxes that reference it (never nil).
	ListSecrets(ctx context.Context, tenant string) ([]client.Secret, error)
	// DeleteSecret deletes the secret name. While a sandbox (a
	// soft-deleted one included) references it, it is errs.ErrConflict
	// naming those sandboxes, and nothing changes.
	DeleteSecret(ctx context.Context, tenant, name string) error
}
