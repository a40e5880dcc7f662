package store

import (
	"context"
	"time"
)

// Secret is a tenant's named secret. The store holds its value sealed by
// the daemon (Sealed: nonce and AEAD ciphertext) and never sees plaintext.
type Secret struct {
	TenantID string `json:"tenant_id"`
	// Name is what sandboxes reference (an environment variable name).
	Name string `json:"name"`
	// Sealed is the value as the daemon sealed it.
	Sealed    []byte    `json:"-"`
	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
}

// SecretStore holds the tenants' secrets.
//
// Contract, checked by storetest:
//   - PutSecret creates the tenant's secret s.Name, or replaces the value
//     of an existing one (a rotation): CreatedAt is kept from the first
//     put, UpdatedAt is s.UpdatedAt (now when zero; CreatedAt too on a
//     create when zero). It returns the stored record and whether it was
//     created. errs.ErrInvalid for an empty tenant, name or sealed value,
//     errs.ErrNotFound for an unknown tenant; nothing is stored then.
//   - Names are case-sensitive and belong to one tenant: two tenants may
//     hold one name.
//   - GetSecret and DeleteSecret return errs.ErrNotFound for an absent
//     name and for another tenant's.
//   - ListSecrets returns the tenant's secrets ordered by Name.
type SecretStore interface {
	PutSecret(ctx context.Context, s Secret) (stored Secret, created bool, err error)
	GetSecret(ctx context.Context, tenantID, name string) (Secret, error)
	ListSecrets(ctx context.Context, tenantID string) ([]Secret, error)
	DeleteSecret(ctx context.Context, tenantID, name string) error
}
