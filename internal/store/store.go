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
	"net/netip"
	"time"
)

// DefaultTenant is the tenant every resource belongs to until multi-tenancy
// lands.
const DefaultTenant = "default"

// Tenant states (Tenant.State).
const (
	// TenantActive tenants' keys work.
	TenantActive = "active"
	// TenantSuspended tenants' keys are refused and their sandboxes are
	// kept stopped until an admin lifts the suspension.
	TenantSuspended = "suspended"
)

// Tenant owns sandboxes, templates and API keys.
type Tenant struct {
	ID   string `json:"id"`
	Name string `json:"name"`
	// State is TenantActive or TenantSuspended ("" reads as active).
	State       string     `json:"state"`
	CreatedAt   time.Time  `json:"created_at"`
	SuspendedAt *time.Time `json:"suspended_at,omitempty"`
}

// Roles of an API key (APIKey.Role), from the most to the least powerful.
const (
	// RoleAdmin may do everything, in every tenant.
	RoleAdmin = "admin"
	// RoleTenantAdmin may do everything within its tenant, its keys
	// included.
	RoleTenantAdmin = "tenant-admin"
	// RoleTenantUser may create and use sandboxes and volumes, not manage
	// keys.
	RoleTenantUser = "tenant-user"
	// RoleReadOnly may only read.
	RoleReadOnly = "read-only"
)

// KeyScope limits an API key to some of its tenant's sandboxes. The zero
// value is no limit.
type KeyScope struct {
	// Sandboxes are sandbox ids or names the key may reach.
	Sandboxes []string `json:"sandboxes,omitempty"`
	// Labels is a selector: the key reaches the sandboxes that carry every
	// one of these labels.
	Labels map[string]string `json:"labels,omitempty"`
}

// IsZero reports whether the scope limits nothing.
func (s KeyScope) IsZero() bool { return len(s.Sandboxes) == 0 && len(s.Labels) == 0 }

// APIKey is a credential. Only a hash of the secret is stored.
type APIKey struct {
	ID       string `json:"id"`
	TenantID string `json:"tenant_id"`
	Name     string `json:"name"`
	Hash     []byte `json:"-"` // SHA-256 of the secret
	// Role is one of the Role* constants.
	Role string `json:"role"`
	// Scope limits the key to some sandboxes (zero: all of its tenant).
	Scope KeyScope `json:"scope"`
	// ExpiresAt, when set, is when the key stops working (an optional
	// expiry, or the end of a rotation's overlap).
	ExpiresAt *time.Time `json:"expires_at,omitempty"`
	// RotatedTo is the id of the key that replaced this one ("" for none).
	RotatedTo string    `json:"rotated_to,omitempty"`
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
	// StateArchived: the root lives only in the repository (pushed, verified,
	// local disk freed); starting hydrates it.
	StateArchived SandboxState = "archived"
	// StateLost: the node that owned the sandbox stopped heartbeating and
	// its lease was expired (internal/cluster failover); its root is on
	// that node. It is restored elsewhere from its last push, or stays
	// lost, as its failover policy says.
	StateLost SandboxState = "lost"
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
	// LeaseIn is read by CreateSandbox (and CreateSandboxEvent) only and
	// never stored: the subnets in which the new sandbox is leased a
	// network address in the transaction that creates its record, as
	// LeaseAddresses would (one commit, not two, on the create's path).
	// The record returned has none.
	LeaseIn []netip.Prefix `json:"-"`
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
	// CreateTenant stores t (State "" is stored as TenantActive).
	CreateTenant(ctx context.Context, t Tenant) error
	GetTenant(ctx context.Context, id string) (Tenant, error)
	ListTenants(ctx context.Context) ([]Tenant, error)
	// UpdateTenant stores t's Name, State and SuspendedAt. errs.ErrNotFound
	// for an absent tenant, errs.ErrInvalid for an unknown state.
	UpdateTenant(ctx context.Context, t Tenant) error
	// DeleteTenant removes the tenant with its API keys, template records
	// and metering rows (intervals and storage), in one transaction (its
	// audit entries stay: the trail is a chain). errs.ErrConflict (and nothing changed)
	// while it still has sandboxes, volumes or snapshots: the caller
	// purges those first. errs.ErrNotFound for an absent tenant.
	DeleteTenant(ctx context.Context, id string) error

	// CreateAPIKey stores k (Role "" is stored as RoleTenantAdmin; an
	// unknown role is errs.ErrInvalid).
	CreateAPIKey(ctx context.Context, k APIKey) error
	// LookupAPIKey finds a key by the hash of its secret, in any tenant,
	// expired ones included (the caller checks ExpiresAt).
	LookupAPIKey(ctx context.Context, hash []byte) (APIKey, error)
	// GetAPIKey returns the tenant's key by id.
	GetAPIKey(ctx context.Context, tenantID, id string) (APIKey, error)
	ListAPIKeys(ctx context.Context, tenantID string) ([]APIKey, error)
	// UpdateAPIKey stores k's Name, ExpiresAt and RotatedTo (role, scope and hash
	// never change). errs.ErrNotFound for an absent key or another
	// tenant's.
	UpdateAPIKey(ctx context.Context, k APIKey) error
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
	// DeleteSandbox removes the record for good (purge). The sandbox's
	// checkpoint documents go with it, in the same transaction.
	DeleteSandbox(ctx context.Context, tenantID, id string) error

	CheckpointStore
	SnapshotStore
	VolumeStore
	SessionStore
	AuditStore
	TaskStore
	LeaseStore
	SecretStore
	MeterStore
	EventStore
	QuotaStore
	QuotaAdmissionStore
	RetentionStore
	ScheduleStore
	BudgetStore
	NodeStore
	OwnershipStore
	WarmPoolStore

	Close() error
}

// Lease is a sandbox's network address.
type Lease struct {
	SandboxID string     `json:"sandbox_id"`
	Addr      netip.Addr `json:"addr"`
	CreatedAt time.Time  `json:"created_at"`
}

// LeaseStore keeps the sandboxes' network addresses.
//
// Contract, checked by storetest:
//   - LeaseAddress is idempotent: a sandbox holding an address of subnet's
//     family inside subnet gets it again; one outside subnet (the subnet
//     was changed) is dropped and a new one leased. A new lease is the
//     lowest free address after the subnet's first two (the network and
//     the gateway), before its last (broadcast, for IPv4). Two sandboxes
//     never hold one address. errs.ErrQuota when the subnet is full;
//     errs.ErrInvalid for an empty id or an invalid subnet.
//   - LeaseAddresses is LeaseAddress for each subnet (one of each family)
//     in one transaction: all are leased or none.
//   - ReleaseLease frees every address of the sandbox; releasing none is
//     not an error.
//   - ListLeases is ordered by SandboxID, then address.
type LeaseStore interface {
	LeaseAddress(ctx context.Context, sandboxID string, subnet netip.Prefix) (netip.Addr, error)
	LeaseAddresses(ctx context.Context, sandboxID string, subnets ...netip.Prefix) ([]netip.Addr, error)
	ReleaseLease(ctx context.Context, sandboxID string) error
	ListLeases(ctx context.Context) ([]Lease, error)
}

// AnyVersion is the ifVersion of a checkpoint write that checks nothing.
const AnyVersion int64 = -1

// DefaultCheckpointKeep is how many versions of a checkpoint document are
// kept until its Keep is set.
const DefaultCheckpointKeep = 10

// MaxCheckpointKeep is the largest history depth a document may have.
const MaxCheckpointKeep = 1000

// Who may write or read a checkpoint document (CheckpointAccess.Who).
const (
	// AccessAny admits every principal of the tenant (the default).
	AccessAny = "any"
	// AccessAdmin admits the tenant's admin API keys only.
	AccessAdmin = "admin"
	// AccessAgent admits only the agent token of the document's own
	// sandbox.
	AccessAgent = "agent"
	// AccessKeys admits only the API keys listed in CheckpointAccess.Keys.
	AccessKeys = "keys"
)

// Mutability of a checkpoint document (CheckpointPolicy.Mutability).
const (
	// Mutable documents take any new version (the default).
	Mutable = "mutable"
	// AppendOnly documents take only versions that extend the previous
	// one: a JSON array that starts with the previous array, or a JSON
	// object that keeps every previous key with its value.
	AppendOnly = "append-only"
	// Immutable documents take version 1 only.
	Immutable = "immutable"
)

// Kinds of principal recorded with a version (Checkpoint.PrincipalKind).
const (
	PrincipalAPIKey = "api-key"
	PrincipalAdmin  = "admin"
	PrincipalAgent  = "sandbox-agent"
)

// CheckpointAccess says who may write, or read, a checkpoint document.
type CheckpointAccess struct {
	// Who is AccessAny, AccessAdmin, AccessAgent or AccessKeys; "" reads
	// as AccessAny.
	Who string `json:"who"`
	// Keys are the admitted API key ids when Who is AccessKeys (no commas
	// or white space in an id).
	Keys []string `json:"keys,omitempty"`
}

// CheckpointPolicy is a document's governance: who may write it, who may
// read it and how it may change. The zero value is the default policy
// (anyone of the tenant reads and writes; mutable). The store keeps the
// policy; enforcing it is the caller's (see CheckpointWrite.Guard).
type CheckpointPolicy struct {
	Write CheckpointAccess `json:"write"`
	Read  CheckpointAccess `json:"read"`
	// Mutability is Mutable, AppendOnly or Immutable; "" reads as Mutable.
	Mutability string `json:"mutability"`
}

// Normalized returns p with empty fields set to their defaults and Keys
// dropped unless Who is AccessKeys.
func (p CheckpointPolicy) Normalized() CheckpointPolicy {
	norm := func(a CheckpointAccess) CheckpointAccess {
		if a.Who == "" {
			a.Who = AccessAny
		}
		if a.Who != AccessKeys || len(a.Keys) == 0 {
			a.Keys = nil
		}
		return a
	}
	p.Write, p.Read = norm(p.Write), norm(p.Read)
	if p.Mutability == "" {
		p.Mutability = Mutable
	}
	return p
}

// CheckpointKey identifies a checkpoint document: a named JSON document of
// one agent of one sandbox. SandboxID is the sandbox's id, never its name.
type CheckpointKey struct {
	TenantID  string `json:"tenant_id"`
	SandboxID string `json:"sandbox_id"`
	// Agent is the named agent within the sandbox; "" is the default agent.
	Agent string `json:"agent"`
	Name  string `json:"name"`
}

// Checkpoint is one version of a checkpoint document.
type Checkpoint struct {
	CheckpointKey
	// Version numbers run 1, 2, 3 ... per document and are never reused
	// while the document exists (trimming removes the oldest versions, it
	// does not renumber).
	Version   int64     `json:"version"`
	CreatedAt time.Time `json:"created_at"`
	// Principal is the id of the API key that wrote this version.
	Principal string `json:"principal"`
	// PrincipalKind is the kind of that principal: PrincipalAPIKey,
	// PrincipalAdmin or PrincipalAgent ("" for versions written before it
	// was recorded).
	PrincipalKind string `json:"principal_kind,omitempty"`
	// RunID is the caller's run id, if it gave one.
	RunID string `json:"run_id,omitempty"`
	// Note is further provenance, e.g. "rollback from 3".
	Note string `json:"note,omitempty"`
	// Body is the JSON document. List results leave it nil.
	Body []byte `json:"body,omitempty"`
}

// CheckpointDoc describes a checkpoint document: its settings and which
// versions it holds.
type CheckpointDoc struct {
	CheckpointKey
	// Latest is the newest version; 0 while the document has only settings
	// (a schema set before its first write).
	Latest int64 `json:"latest"`
	// Oldest is the oldest version still kept (0 when Latest is 0).
	Oldest int64 `json:"oldest"`
	// Versions is how many versions are kept now.
	Versions int `json:"versions"`
	// Keep is the history depth: at most this many versions are kept.
	Keep int `json:"keep"`
	// Schema is the document's JSON Schema, or nil.
	Schema []byte `json:"schema,omitempty"`
	// Policy is the document's governance, normalized (never empty
	// fields).
	Policy    CheckpointPolicy `json:"policy"`
	CreatedAt time.Time        `json:"created_at"`
	UpdatedAt time.Time        `json:"updated_at"`
}

// CheckpointGuard is a caller's check run inside a checkpoint write
// transaction, before anything is changed, with the document as stored at
// that moment. For an absent document, d has the key, Latest 0, Keep
// DefaultCheckpointKeep and the default policy. If it returns an error,
// nothing is stored and the call returns that error (wrapped). It must not
// call the store.
type CheckpointGuard func(d CheckpointDoc) error

// CheckpointWrite is one put of a checkpoint document.
type CheckpointWrite struct {
	CheckpointKey
	// IfVersion is the optimistic concurrency check: AnyVersion checks
	// nothing, 0 requires that the document has no version yet, N > 0
	// requires that its latest version is N. Note that the zero value means
	// "must not exist".
	IfVersion int64
	// Body is the JSON document (validated by the caller, not the store).
	Body []byte
	// Principal, PrincipalKind, RunID and Note are recorded as the
	// version's provenance.
	Principal     string
	PrincipalKind string
	RunID         string
	Note          string
	// Keep, when > 0, sets the document's history depth (at most
	// MaxCheckpointKeep) in the same transaction; 0 keeps the current one
	// (DefaultCheckpointKeep for a new document).
	Keep int
	// CreatedAt is the version's time; zero means now.
	CreatedAt time.Time
	// Check, when set, is called inside the write transaction with the
	// document's stored schema (nil when it has none) after the version
	// check passed. If it returns an error, nothing is stored and
	// PutCheckpoint returns that error (wrapped). It must not call the store.
	Check func(schema []byte) error
	// Guard, when set, is called inside the write transaction before the
	// version check, with the stored document and a function returning
	// the latest version's body (nil when there is none), which reads it
	// only when called. An error stores nothing and is returned (wrapped).
	// It must not call the store.
	Guard func(d CheckpointDoc, latest func() ([]byte, error)) error
}

// CheckpointStore holds checkpoint documents: named, versioned JSON
// documents per sandbox and agent, kept outside every sandbox.
//
// Contract, checked by storetest:
//   - Every method takes the tenant in the key (or as tenantID) and returns
//     errs.ErrNotFound when the sandbox is absent or another tenant's; a
//     document of another sandbox or tenant is never visible.
//   - PutCheckpoint is atomic: the version check, the new version, the
//     history trim and any Keep change commit together or not at all, and
//     are durable when it returns. Concurrent puts with the same IfVersion
//     have exactly one winner; the others get errs.ErrConflict.
//   - After a put a document keeps at most Keep versions, the newest ones;
//     older versions are deleted in the put's transaction.
//   - Version numbers of a document start at 1 and grow by one per put
//     while the document exists; DeleteCheckpoint forgets them.
//   - Purging a sandbox (DeleteSandbox) deletes its documents.
//   - Lists are ordered: documents by Agent, then Name; versions by
//     Version, oldest first. Listed versions carry no Body.
//   - Empty identifiers are errs.ErrInvalid (Agent may be empty).
type CheckpointStore interface {
	// PutCheckpoint stores w as the document's next version, creating the
	// document if needed, and returns the stored version.
	// A failed IfVersion check returns errs.ErrConflict and stores nothing.
	PutCheckpoint(ctx context.Context, w CheckpointWrite) (Checkpoint, error)
	// GetCheckpoint returns version (0: the latest) of a document, Body
	// included, or errs.ErrNotFound when the document, or that version (no
	// longer kept, never written), does not exist.
	GetCheckpoint(ctx context.Context, k CheckpointKey, version int64) (Checkpoint, error)
	// GetCheckpointDoc describes one document, or returns errs.ErrNotFound.
	GetCheckpointDoc(ctx context.Context, k CheckpointKey) (CheckpointDoc, error)
	// ListCheckpoints describes every document of a sandbox, all agents.
	ListCheckpoints(ctx context.Context, tenantID, sandboxID string) ([]CheckpointDoc, error)
	// ListCheckpointVersions lists the kept versions of a document, or
	// returns errs.ErrNotFound when the document does not exist.
	ListCheckpointVersions(ctx context.Context, k CheckpointKey) ([]Checkpoint, error)
	// SetCheckpointSchema stores schema as the document's JSON Schema,
	// creating a document without versions if needed, and returns the
	// document. The schema is stored as given. An empty schema removes it;
	// removing the schema of an absent document is errs.ErrNotFound.
	// guard, when not nil, runs first inside the transaction.
	SetCheckpointSchema(ctx context.Context, k CheckpointKey, schema []byte, guard CheckpointGuard) (CheckpointDoc, error)
	// SetCheckpointPolicy stores p (normalized) as the document's policy
	// and, when keep > 0, keep as its history depth, deleting the versions
	// beyond it in the same transaction; it creates a document without
	// versions if needed and returns the document. guard, when not nil,
	// runs first inside the transaction.
	SetCheckpointPolicy(ctx context.Context, k CheckpointKey, p CheckpointPolicy, keep int, guard CheckpointGuard) (CheckpointDoc, error)
	// DeleteCheckpoint removes a document with all its versions and
	// settings, or returns errs.ErrNotFound. guard, when not nil, runs
	// first inside the transaction.
	DeleteCheckpoint(ctx context.Context, k CheckpointKey, guard CheckpointGuard) error
}

// Snapshot is the record of a read-only, point-in-time copy of a sandbox's
// root (its dataset lives in the pool as snapshots/<id>). It outlives its
// sandbox: a snapshot can be forked after the sandbox is purged.
type Snapshot struct {
	ID        string `json:"id"`
	TenantID  string `json:"tenant_id"`
	SandboxID string `json:"sandbox_id"`
	// SandboxName is the sandbox's name when the snapshot was taken.
	SandboxName string `json:"sandbox_name"`
	// ParentID is the snapshot the sandbox had been forked or rolled back
	// from when this one was taken ("" for none): the edge of the tree.
	ParentID    string        `json:"parent_id,omitempty"`
	Label       string        `json:"label,omitempty"`
	Description string        `json:"description,omitempty"`
	Kind        string        `json:"kind"` // "user", "safety" or "fork"
	FrozenFor   time.Duration `json:"frozen_for,omitempty"`
	CreatedAt   time.Time     `json:"created_at"`
	// TemplateID and Spec are the sandbox's at snapshot time, so a fork
	// works after the sandbox is gone.
	TemplateID string `json:"template_id"`
	Spec       []byte `json:"spec,omitempty"`
}

// SnapshotStore holds snapshot records.
//
// Contract, checked by storetest:
//   - CreateSnapshot returns errs.ErrConflict when the id is taken,
//     errs.ErrInvalid for an empty id, tenant, sandbox or kind, and stores
//     nothing then.
//   - GetSnapshot/DeleteSnapshot return errs.ErrNotFound for an absent id
//     and for another tenant's.
//   - ListSnapshots returns the tenant's snapshots (of one sandbox when
//     sandboxID is not ""), ordered by CreatedAt, then ID.
//   - A snapshot record does not depend on its sandbox record: purging the
//     sandbox leaves it.
type SnapshotStore interface {
	CreateSnapshot(ctx context.Context, s Snapshot) error
	GetSnapshot(ctx context.Context, tenantID, id string) (Snapshot, error)
	ListSnapshots(ctx context.Context, tenantID, sandboxID string) ([]Snapshot, error)
	DeleteSnapshot(ctx context.Context, tenantID, id string) error
}

// Volume is the record of a persistent volume (its data lives in the pool
// as volumes/<id>).
type Volume struct {
	ID        string     `json:"id"`
	TenantID  string     `json:"tenant_id"`
	Name      string     `json:"name"`
	SizeBytes int64      `json:"size_bytes"`
	State     string     `json:"state"` // "available" or "deleted"
	CreatedAt time.Time  `json:"created_at"`
	DeletedAt *time.Time `json:"deleted_at,omitempty"`
	PurgeAt   *time.Time `json:"purge_at,omitempty"`
	// Origin is the id of the volume this one was restored from ("" for
	// a volume made empty); set at create, never changed.
	Origin string `json:"origin,omitempty"`
	// Node is the cluster node whose pool holds the volume's data, where
	// its routes are forwarded ("" on a single node, and for a volume made
	// before nodes were recorded: served by whichever node is asked). Set
	// at create; UpdateVolume stores it too (the data moved).
	Node string `json:"node,omitempty"`
}

// VolumeStore holds volume records.
//
// Contract, checked by storetest:
//   - CreateVolume returns errs.ErrConflict when the id or the tenant's
//     name is taken, errs.ErrInvalid for an empty id, tenant, name or
//     state, and stores nothing then.
//   - GetVolume finds by id, or by name within the tenant; it, UpdateVolume
//     and DeleteVolume return errs.ErrNotFound for an absent id and for
//     another tenant's.
//   - UpdateVolume stores SizeBytes, State, DeletedAt, PurgeAt and Node.
//   - ListVolumes returns the tenant's volumes ("" = every tenant), without
//     deleted ones unless includeDeleted, ordered by CreatedAt, then ID.
type VolumeStore interface {
	CreateVolume(ctx context.Context, v Volume) error
	GetVolume(ctx context.Context, tenantID, idOrName string) (Volume, error)
	ListVolumes(ctx context.Context, tenantID string, includeDeleted bool) ([]Volume, error)
	UpdateVolume(ctx context.Context, v Volume) error
	DeleteVolume(ctx context.Context, tenantID, id string) error
}
