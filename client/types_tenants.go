package client

import "time"

// Roles of an API key, from the most to the least powerful.
const (
	// RoleAdmin may do everything, in every tenant (the daemon's own key).
	RoleAdmin = "admin"
	// RoleTenantAdmin may do everything within its tenant, its keys
	// included (keys of its role or below).
	RoleTenantAdmin = "tenant-admin"
	// RoleTenantUser may create and use sandboxes and volumes; it manages
	// no keys.
	RoleTenantUser = "tenant-user"
	// RoleReadOnly may only read (GET), and opens no terminal.
	RoleReadOnly = "read-only"
)

// Roles lists the roles, most powerful first.
var Roles = []string{RoleAdmin, RoleTenantAdmin, RoleTenantUser, RoleReadOnly}

// TenantHeader names the tenant an admin key acts in (default: its own).
const TenantHeader = "X-Stead-Tenant"

// DefaultKeyOverlap is how long a rotated key's old secret stays valid.
const DefaultKeyOverlap = 24 * time.Hour

// APIKey describes an API key; Secret is set only in the answer to a
// create or a rotation, and shown only that once.
type APIKey struct {
	ID     string `json:"id" doc:"Unique id"`
	Tenant string `json:"tenant" doc:"Id of the tenant that owns it"`
	Name   string `json:"name" doc:"Name"`
	// Role is admin, tenant-admin, tenant-user or read-only.
	Role string `json:"role" enum:"admin,tenant-admin,tenant-user,read-only" doc:"Role is admin, tenant-admin, tenant-user or read-only."`
	// Admin is Role == "admin" (kept for older clients).
	Admin bool `json:"admin" doc:"Admin is Role == \"admin\" (kept for older clients)."`
	// Sandboxes and Labels scope the key: it reaches only these sandboxes
	// (ids or names), or only those carrying every one of these labels.
	Sandboxes []string          `json:"sandboxes,omitempty" doc:"Sandboxes and Labels scope the key: it reaches only these sandboxes (ids or names), or only those carrying every one of these labels."`
	Labels    map[string]string `json:"labels,omitempty" doc:"Labels (key: value)"`
	// ExpiresAt is when the key stops working (nil: never).
	ExpiresAt *time.Time `json:"expires_at,omitempty" doc:"ExpiresAt is when the key stops working (nil: never)."`
	// RotatedTo is the id of the key that replaced this one in a rotation.
	RotatedTo string    `json:"rotated_to,omitempty" doc:"RotatedTo is the id of the key that replaced this one in a rotation."`
	CreatedAt time.Time `json:"created_at" doc:"When it was created (RFC 3339)"`
	Secret    string    `json:"secret,omitempty" doc:"The secret: shown only in the answer to a create or a rotation"`
}

// CreateAPIKeyRequest creates an API key in the caller's tenant (or, for
// an admin key, the tenant named by the X-Stead-Tenant header).
type CreateAPIKeyRequest struct {
	Name string `json:"name" minLength:"1" maxLength:"128" doc:"Human-readable label for the key"`
	// Role defaults to tenant-user (admin when Admin is set).
	Role string `json:"role,omitempty" enum:"admin,tenant-admin,tenant-user,read-only," doc:"Role of the new key (default tenant-user); at most the caller's own"`
	// Admin is the older form of Role "admin".
	Admin     bool              `json:"admin,omitempty" doc:"Same as role admin (kept for older clients)"`
	Sandboxes []string          `json:"sandboxes,omitempty" maxItems:"100" doc:"Limit the key to these sandboxes (ids or names)"`
	Labels    map[string]string `json:"labels,omitempty" doc:"Limit the key to sandboxes carrying these labels; its creates get them"`
	ExpiresIn string            `json:"expires_in,omitempty" doc:"Go duration after which the key stops working (default: never)"`
}

// RotateAPIKeyRequest rotates a key: a new secret, the old one kept valid
// for the overlap.
type RotateAPIKeyRequest struct {
	Overlap string `json:"overlap,omitempty" doc:"How long the old secret keeps working, a Go duration (default 24h; 0 ends it now)"`
}

// Tenant is an isolated owner of sandboxes, volumes, templates and keys.
type Tenant struct {
	ID          string     `json:"id" doc:"Unique id"`
	Name        string     `json:"name" doc:"Name"`
	State       string     `json:"state" enum:"active,suspended" doc:"Current state"`
	CreatedAt   time.Time  `json:"created_at" doc:"When it was created (RFC 3339)"`
	SuspendedAt *time.Time `json:"suspended_at,omitempty" doc:"When the tenant was suspended (RFC 3339); absent unless suspended"`
}

// CreateTenantRequest creates a tenant.
type CreateTenantRequest struct {
	ID   string `json:"id" minLength:"1" maxLength:"48" doc:"Tenant id: lowercase letters, digits and inner dashes"`
	Name string `json:"name,omitempty" maxLength:"128" doc:"Display name (default: the id)"`
}

// TenantDeletion reports what deleting a tenant destroyed.
type TenantDeletion struct {
	Tenant    string `json:"tenant" doc:"Id of the tenant that owns it"`
	Sandboxes int    `json:"sandboxes" doc:"Sandboxes purged"`
	Volumes   int    `json:"volumes" doc:"Volumes purged"`
	Snapshots int    `json:"snapshots" doc:"Local snapshots deleted"`
	Templates int    `json:"templates" doc:"Templates deleted"`
	Keys      int    `json:"keys" doc:"API keys revoked"`
	// ErasedScopes are the repository scopes whose data keys were
	// destroyed: their pushed data can no longer be decrypted.
	ErasedScopes []string `json:"erased_scopes,omitempty" doc:"ErasedScopes are the repository scopes whose data keys were destroyed: their pushed data can no longer be decrypted."`
}
