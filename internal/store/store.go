// Package store defines stead's metadata store: tenants, API keys, templates
// and sandboxes. The Store interface is the seam; store/sqlite is the
// embedded default and a PostgreSQL implementation will follow. Every
// implementation must pass the contract suite in store/storetest, so nothing
// engine-specific may leak through these types.
//
// Tenancy: every tenant-scoped method takes the tenant id and treats a record
// of another tenant exactly as an absent one (errs.ErrNotFound).
package store

import (
	"context"
	"time"
)

// DefaultTenant is the tenant every resource belongs to until multi-tenancy
// lands.
const DefaultTenant = "default"

// Tenant owns sandboxes, templates and API keys.
type Tenant struct {
	ID        string    `json:"id"`
	Name      string    `json:"name"`
	CreatedAt time.Time `json:"created_at"`
}

// APIKey is a credential. Only a hash of the secret is stored.
type APIKey struct {
	ID        string    `json:"id"`
	TenantID  string    `json:"tenant_id"`
	Name      string    `json:"name"`
	Hash      []byte    `json:"-"` // SHA-256 of the secret
	Admin     bool      `json:"admin"`
	CreatedAt time.Time `json:"created_at"`
}

// Template is a read-only root filesystem that sandboxes are cloned from.
type Template struct {
	ID        string    `json:"id"` // also its name, e.g. "host" or "alpine-3.20"
	TenantID  string    `json:"tenant_id"`
	Kind      string    `json:"kind"`   // "host" or "oci"
	Source    string    `json:"source"` // image reference or path it came from
	Digest    string    `json:"digest,omitempty"`
	Config    []byte    `json:"config,omitempty"` // JSON: env, workdir, entrypoint from the image
	SizeBytes int64     `json:"size_bytes"`
	CreatedAt time.Time `json:"created_at"`
}

// SandboxState is a lifecycle state.
type SandboxState string

// Lifecycle states. Transitions are enforced by the sandbox service, not by
// the store.
const (
	StateCreating SandboxState = "creating"
	StateRunning  SandboxState = "running"
	StatePaused   SandboxState = "paused"
	StateStopped  SandboxState = "stopped"
	StateDeleted  SandboxState = "deleted" // soft-deleted: restorable until PurgeAt
	StateError    SandboxState = "error"
)

// Sandbox is the persisted record of one sandbox. Spec holds the
// user-supplied configuration as opaque JSON owned by the sandbox service.
type Sandbox struct {
	ID         string       `json:"id"`
	TenantID   string       `json:"tenant_id"`
	Name       string       `json:"name"`
	TemplateID string       `json:"template_id"`
	State      SandboxState `json:"state"`
	Spec       []byte       `json:"spec"` // JSON owned by the sandbox service
	// StopReason says why the sandbox last left the running state
	// ("user", "idle", "max_runtime", "crash", "daemon_restart", ...).
	StopReason string     `json:"stop_reason,omitempty"`
	CreatedAt  time.Time  `json:"created_at"`
	UpdatedAt  time.Time  `json:"updated_at"`
	StartedAt  *time.Time `json:"started_at,omitempty"`
	StoppedAt  *time.Time `json:"stopped_at,omitempty"`
	DeletedAt  *time.Time `json:"deleted_at,omitempty"`
	PurgeAt    *time.Time `json:"purge_at,omitempty"`
	// Version increases by one on every successful update; UpdateSandbox
	// uses it for optimistic concurrency.
	Version int64 `json:"version"`
}

// SandboxFilter selects sandboxes for ListSandboxes.
type SandboxFilter struct {
	// TenantID limits the result to one tenant; "" means every tenant (for
	// the daemon's own reconciler, never for an API caller).
	TenantID string
	// States limits the result to these states; empty means all but deleted.
	States []SandboxState
	// IncludeDeleted adds soft-deleted sandboxes when States is empty.
	IncludeDeleted bool
}

// Store is stead's metadata store.
//
// Contract, checked by storetest:
//   - Create* returns errs.ErrConflict when the id (or, for sandboxes, the
//     tenant's name) is already taken, and stores nothing.
//   - Get*/Delete* return errs.ErrNotFound for an absent id and for an id
//     that belongs to another tenant.
//   - Every write is durable when it returns (SQLite: WAL with synchronous
//     FULL; PostgreSQL: committed).
//   - UpdateSandbox succeeds only if the stored Version equals s.Version; it
//     then stores s with Version+1 and UpdatedAt set, and returns the stored
//     record. A mismatch returns errs.ErrConflict and changes nothing.
//   - List results are ordered by CreatedAt, then ID.
//   - Methods are safe for concurrent use.
type Store interface {
	CreateTenant(ctx context.Context, t Tenant) error
	GetTenant(ctx context.Context, id string) (Tenant, error)
	ListTenants(ctx context.Context) ([]Tenant, error)

	CreateAPIKey(ctx context.Context, k APIKey) error
	// LookupAPIKey finds a key by the hash of its secret.
	LookupAPIKey(ctx context.Context, hash []byte) (APIKey, error)
	ListAPIKeys(ctx context.Context, tenantID string) ([]APIKey, error)
	DeleteAPIKey(ctx context.Context, tenantID, id string) error

	CreateTemplate(ctx context.Context, t Template) error
	GetTemplate(ctx context.Context, tenantID, id string) (Template, error)
	ListTemplates(ctx context.Context, tenantID string) ([]Template, error)
	DeleteTemplate(ctx context.Context, tenantID, id string) error

	// CreateSandbox stores s with Version 1.
	CreateSandbox(ctx context.Context, s Sandbox) (Sandbox, error)
	// GetSandbox finds a sandbox by id, or by name within the tenant.
	// tenantID "" matches any tenant (daemon-internal use only).
	GetSandbox(ctx context.Context, tenantID, idOrName string) (Sandbox, error)
	ListSandboxes(ctx context.Context, f SandboxFilter) ([]Sandbox, error)
	UpdateSandbox(ctx context.Context, s Sandbox) (Sandbox, error)
	// DeleteSandbox removes the record for good (purge).
	DeleteSandbox(ctx context.Context, tenantID, id string) error

	Close() error
}
