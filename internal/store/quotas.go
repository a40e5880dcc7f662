package store

import (
	"context"
	"time"
)

// TenantQuota is a tenant's quota record: a limit per quota, nil for no
// limit. The zero value (every field nil) limits nothing, and is what a
// tenant without a record has.
type TenantQuota struct {
	TenantID string `json:"tenant_id"`
	// RunningSandboxes bounds the sandboxes that are running or paused.
	RunningSandboxes *int64 `json:"running_sandboxes,omitempty"`
	// CPUs bounds the cpus of the running and paused sandboxes together.
	CPUs *float64 `json:"cpus,omitempty"`
	// MemoryBytes bounds their memory together.
	MemoryBytes *int64 `json:"memory_bytes,omitempty"`
	// DiskBytes bounds the disk promised to live sandboxes and volumes.
	DiskBytes *int64 `json:"disk_bytes,omitempty"`
	// Volumes bounds the live volumes.
	Volumes *int64 `json:"volumes,omitempty"`
	// RepositoryBytes bounds what the tenant's pushes keep in the
	// repository.
	RepositoryBytes *int64 `json:"repository_bytes,omitempty"`
	// Snapshots bounds the local snapshots.
	Snapshots *int64 `json:"snapshots,omitempty"`
	// StateBytes bounds the state the tenant keeps outside its sandboxes
	// (StateBytes of QuotaStore).
	StateBytes *int64 `json:"state_bytes,omitempty"`
	// UpdatedAt is when the record was last set (zero for none).
	UpdatedAt time.Time `json:"updated_at"`
}

// IsZero reports whether q limits nothing.
func (q TenantQuota) IsZero() bool {
	return q.RunningSandboxes == nil && q.CPUs == nil && q.MemoryBytes == nil && q.DiskBytes == nil &&
		q.Volumes == nil && q.RepositoryBytes == nil && q.Snapshots == nil && q.StateBytes == nil
}

// QuotaStore keeps the tenants' quota records.
//
// Contract, checked by storetest:
//   - GetTenantQuota returns the tenant's record; a tenant that has none
//     gets the zero record (every limit nil, UpdatedAt zero) with its
//     TenantID, not an error. errs.ErrNotFound for an unknown tenant.
//   - SetTenantQuota replaces the tenant's whole record with q (a nil
//     field is stored as no limit) and returns it as stored; UpdatedAt is
//     q.UpdatedAt, now when zero. Setting the zero record keeps a record
//     that limits nothing. errs.ErrInvalid for an empty tenant or a
//     negative or non-finite limit, errs.ErrNotFound for an unknown
//     tenant; nothing is stored then. A write is durable when it returns.
//   - A tenant's record is removed with the tenant, in DeleteTenant's
//     transaction: a tenant made again with the same id has none.
//   - Records belong to one tenant: setting one never changes another's.
//   - StateBytes returns the bytes of state the tenant keeps outside its
//     sandboxes: the bodies of every kept checkpoint version, task and
//     observation payloads, key-value values and session event payloads,
//     of all its sandboxes (0 for a tenant without any, or unknown).
type QuotaStore interface {
	GetTenantQuota(ctx context.Context, tenantID string) (TenantQuota, error)
	SetTenantQuota(ctx context.Context, q TenantQuota) (TenantQuota, error)
	StateBytes(ctx context.Context, tenantID string) (int64, error)
}

// QuotaRise is a rise of a tenant's usage that quota admission admitted
// and that is not stored yet (the record that carries it is being made),
// held in the store so that every node of a cluster counts it.
type QuotaRise struct {
	// ID names the rise (the admitting node makes it up).
	ID       string `json:"id"`
	TenantID string `json:"tenant_id"`
	// Node is the node that admitted it.
	Node string `json:"node"`
	// Running, CPUs, MemoryBytes, DiskBytes, Volumes and Snapshots are
	// what it adds (tenancy.Use).
	Running     int64   `json:"running"`
	CPUs        float64 `json:"cpus"`
	MemoryBytes int64   `json:"memory_bytes"`
	DiskBytes   int64   `json:"disk_bytes"`
	Volumes     int64   `json:"volumes"`
	Snapshots   int64   `json:"snapshots"`
	// ExpiresAt is when it stops counting, if its node never deleted it
	// (the node died before the record was stored).
	ExpiresAt time.Time `json:"expires_at"`
}

// QuotaAdmissionStore holds the quota rises admitted and not yet stored,
// for admission that holds across the nodes of a cluster.
//
// Contract, checked by storetest:
//   - AdmitQuotaRise takes the tenant's admission lock, which one caller
//     at a time holds across every process on the store, and calls check
//     with the tenant's rises that have not expired at now (expired ones
//     are deleted). When check returns nil, r is stored before the lock
//     is released; when it returns an error, nothing is stored and that
//     error is returned as it is. So of callers racing for the last of a
//     limit whose check counts the rises, exactly one is admitted. check
//     may read the store but must not write to it. A holder whose process
//     dies gives the lock up without storing r (the engine ends its
//     transaction). errs.ErrInvalid for an empty id or tenant, a negative
//     or non-finite amount, or a zero ExpiresAt; errs.ErrConflict for an
//     id stored already. Rises belong to one tenant: another tenant's
//     never reach check.
//   - DeleteQuotaRise removes rise id; an absent one is no error.
//   - DeleteNodeQuotaRises removes every rise node admitted, of every
//     tenant (a node starting: what its earlier process admitted can no
//     longer be released); other nodes' stay. errs.ErrInvalid for an
//     empty node.
type QuotaAdmissionStore interface {
	AdmitQuotaRise(ctx context.Context, r QuotaRise, now time.Time, check func(ctx context.Context, pending []QuotaRise) error) error
	DeleteQuotaRise(ctx context.Context, id string) error
	DeleteNodeQuotaRises(ctx context.Context, node string) error
}
