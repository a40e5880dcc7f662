// Package api is stead's HTTP/JSON API: routes, auth, the OpenAPI 3.1
// document, and the single mapping from errs sentinels to status codes.
// It holds no business logic: every call goes to a Backend.
package api

import (
	"context"
	"io"

	"github.com/stead-dev/stead/client"
)

// Principal is the authenticated caller of a request.
type Principal struct {
	// TenantID is the tenant the request acts in: the key's own, or for an
	// admin key the one its X-Stead-Tenant header names.
	TenantID string
	KeyID    string
	// Admin is true for a key of role admin: everything, every tenant.
	Admin bool
	// Role is the key's role (client.Role*); "" reads as admin when Admin
	// is set, else tenant-user (see EffectiveRole).
	Role string
	// Sandboxes and Labels scope the key: it reaches only these sandboxes
	// (ids or names), or those carrying every one of these labels. See
	// authz.go.
	Sandboxes []string
	Labels    map[string]string
	// Sandbox, when set, confines the principal to that sandbox's own
	// things (the token handed to the agent inside the sandbox): the
	// routes opened to it (its agent state, file history and undo, and the
	// operations on it), with ids of that sandbox only. See scope.go.
	Sandbox string
}

// ExecStream receives the output of an exec as it happens. Calls are
// serialised by the backend.
type ExecStream interface {
	Stdout(p []byte) error
	Stderr(p []byte) error
}

// PTY is an interactive terminal session in a sandbox.
type PTY interface {
	io.ReadWriteCloser
	// Resize changes the terminal size.
	Resize(rows, cols uint16) error
	// Wait blocks until the process exits and returns its exit code.
	Wait() (int, error)
}

// PTYRequest starts an interactive terminal.
type PTYRequest struct {
	Command []string // default: the user's login shell
	User    string
	Env     map[string]string
	Cwd     string
	Rows    uint16
	Cols    uint16
}

// Backend is what the API serves. Every method receives the tenant of the
// caller and must treat another tenant's resources as absent
// (errs.ErrNotFound). Sandbox ids may also be given as names.
type Backend interface {
	Info(ctx context.Context) client.Info

	// Authenticate resolves an API key secret to its principal
	// (errs.ErrUnauthenticated when unknown).
	Authenticate(ctx context.Context, secret string) (Principal, error)
	// CreateAPIKey makes a key in p's tenant; a role above p's own is
	// errs.ErrForbidden.
	CreateAPIKey(ctx context.Context, p Principal, req client.CreateAPIKeyRequest) (client.APIKey, error)

	CreateSandbox(ctx context.Context, tenant string, req client.CreateSandboxRequest) (client.Sandbox, error)
	GetSandbox(ctx context.Context, tenant, id string) (client.Sandbox, error)
	ListSandboxes(ctx context.Context, tenant string, includeDeleted bool) ([]client.Sandbox, error)
	StartSandbox(ctx context.Context, tenant, id string) (client.Sandbox, error)
	StopSandbox(ctx context.Context, tenant, id string) (client.Sandbox, error)
	PauseSandbox(ctx context.Context, tenant, id string) (client.Sandbox, error)
	ResumeSandbox(ctx context.Context, tenant, id string) (client.Sandbox, error)
	// DeleteSandbox soft-deletes (purge=false) or destroys for good.
	DeleteSandbox(ctx context.Context, tenant, id string, purge bool) (client.Sandbox, error)
	// UndeleteSandbox brings back a soft-deleted sandbox as stopped.
	UndeleteSandbox(ctx context.Context, tenant, id string) (client.Sandbox, error)
	ResizeSandbox(ctx context.Context, tenant, id string, req client.ResizeRequest) (client.Sandbox, error)

	// Exec runs a command; output is streamed to out as it is produced.
	// For a background exec it returns at once with the pid.
	Exec(ctx context.Context, tenant, id string, req client.ExecRequest, out ExecStream) (client.ExecResult, error)
	OpenPTY(ctx context.Context, tenant, id string, req PTYRequest) (PTY, error)
	// ServiceInput writes data to the supervised service's stdin.
	ServiceInput(ctx context.Context, tenant, id string, data []byte) error
	// AgentLog opens the supervised service's log (/var/log/agent.log).
	AgentLog(ctx context.Context, tenant, id string) (io.ReadCloser, error)

	ReadFile(ctx context.Context, tenant, id, path string) (io.ReadCloser, client.FileInfo, error)
	WriteFile(ctx context.Context, tenant, id, path string, mode uint32, r io.Reader) (client.FileInfo, error)
	StatFile(ctx context.Context, tenant, id, path string) (client.FileInfo, error)
	ListFiles(ctx context.Context, tenant, id, path string) ([]client.FileInfo, error)
	Mkdir(ctx context.Context, tenant, id, path string, parents bool) error
	RemoveFile(ctx context.Context, tenant, id, path string, recursive bool) error
	RenameFile(ctx context.Context, tenant, id, from, to string) error
	// DownloadTar writes a tar of path to w.
	DownloadTar(ctx context.Context, tenant, id, path string, w io.Writer) error
	// UploadTar extracts a tar stream under path.
	UploadTar(ctx context.Context, tenant, id, path string, r io.Reader) error

	ListTemplates(ctx context.Context, tenant string) ([]client.Template, error)
	ImportTemplate(ctx context.Context, tenant string, req client.ImportTemplateRequest) (client.Template, error)
	DeleteTemplate(ctx context.Context, tenant, id string) error
}

// CheckpointWrite is one put of a checkpoint document.
type CheckpointWrite struct {
	// Agent is the named agent within the sandbox ("" for the default).
	Agent string
	Name  string
	// Body is the JSON document.
	Body []byte
	// IfVersion, when set, is the latest version the document must have
	// (0: it must have none yet); a mismatch is errs.ErrConflict.
	IfVersion *int64
	// Run is the caller's run id, recorded as provenance.
	Run string
	// Keep, when > 0, sets the document's history depth.
	Keep int
}

// CheckpointBackend serves checkpoint documents: versioned JSON documents
// per sandbox and agent, kept outside the sandbox. NewHandler registers the
// /v1/sandboxes/{id}/checkpoints routes only when its Backend also
// implements this interface. As with Backend, every method gets the
// caller's tenant (in p for writes, whose p.KeyID is recorded as
// provenance) and treats another tenant's sandbox as absent
// (errs.ErrNotFound); sandbox may be an id or a name. Documents are the
// sandbox's own: a document of another sandbox is absent, exactly as one
// that never existed (the agent token relies on it, see scope.go).
type CheckpointBackend interface {
	// PutCheckpoint writes the document's next version. A body that is not
	// JSON, is too large or fails the document's schema is errs.ErrInvalid;
	// a failed IfVersion check is errs.ErrConflict; both change nothing.
	PutCheckpoint(ctx context.Context, p Principal, sandbox string, w CheckpointWrite) (client.Checkpoint, error)
	// GetCheckpoint returns version (0: the latest) with its body.
	GetCheckpoint(ctx context.Context, tenant, sandbox, agent, name string, version int64) (client.Checkpoint, error)
	// ListCheckpoints describes every document of the sandbox, all agents.
	ListCheckpoints(ctx context.Context, tenant, sandbox string) ([]client.CheckpointInfo, error)
	// CheckpointVersions lists the kept versions, oldest first, without
	// bodies.
	CheckpointVersions(ctx context.Context, tenant, sandbox, agent, name string) ([]client.Checkpoint, error)
	// RollbackCheckpoint writes version req.Version's body as a new version
	// (noted "rollback from N"); it must pass the current schema.
	RollbackCheckpoint(ctx context.Context, p Principal, sandbox, agent, name string, req client.RollbackCheckpointRequest) (client.Checkpoint, error)
	// SetCheckpointSchema sets the document's JSON Schema (nil removes it);
	// a schema that does not compile is errs.ErrInvalid.
	SetCheckpointSchema(ctx context.Context, p Principal, sandbox, agent, name string, schema []byte) (client.CheckpointInfo, error)
	// DeleteCheckpoint removes the document with every version.
	DeleteCheckpoint(ctx context.Context, p Principal, sandbox, agent, name string) error
	// SetCheckpointPolicy replaces the document's governance (creating it
	// without versions if needed). A caller that may not change it is
	// errs.ErrForbidden; an invalid policy is errs.ErrInvalid.
	SetCheckpointPolicy(ctx context.Context, p Principal, sandbox, agent, name string, req client.SetCheckpointPolicyRequest) (client.CheckpointInfo, error)
}

// ScopedCheckpointReader is implemented by a CheckpointBackend that
// enforces each document's read scope. The routes read versions through it,
// with the caller's principal, when the backend implements it; the
// tenant-only reads of CheckpointBackend are then the backend's trusted,
// unscoped reads for its own use. A read the scope forbids is
// errs.ErrForbidden.
type ScopedCheckpointReader interface {
	// ReadCheckpoint is GetCheckpoint for principal p.
	ReadCheckpoint(ctx context.Context, p Principal, sandbox, agent, name string, version int64) (client.Checkpoint, error)
	// ReadCheckpointVersions is CheckpointVersions for principal p.
	ReadCheckpointVersions(ctx context.Context, p Principal, sandbox, agent, name string) ([]client.Checkpoint, error)
}

// SnapshotBackend serves local snapshots, forks and rollback. NewHandler
// registers the snapshot routes when the backend implements it. Every
// method treats another tenant's sandboxes and snapshots as absent.
type SnapshotBackend interface {
	// CreateSnapshot takes a read-only snapshot of a running or stopped
	// sandbox (a running one is frozen only for the instant it takes).
	CreateSnapshot(ctx context.Context, tenant, sandbox string, req client.CreateSnapshotRequest) (client.Snapshot, error)
	// ListSnapshots lists the tenant's snapshots, of one sandbox when
	// sandbox is not "", oldest first.
	ListSnapshots(ctx context.Context, tenant, sandbox string) ([]client.Snapshot, error)
	GetSnapshot(ctx context.Context, tenant, id string) (client.Snapshot, error)
	DeleteSnapshot(ctx context.Context, tenant, id string) error
	// Fork makes req.Count new sandboxes (new ids) with the files of
	// source: a snapshot id, or a sandbox (id or name), which is then
	// snapshotted first.
	Fork(ctx context.Context, tenant, source string, req client.ForkRequest) ([]client.Sandbox, error)
	// Rollback returns a sandbox's files to a snapshot in place (same id),
	// after taking a safety snapshot of what it replaces, and restarts the
	// sandbox if it was running.
	Rollback(ctx context.Context, tenant, sandbox string, req client.RollbackRequest) (client.RollbackResult, error)
}

// VolumeBackend serves persistent volumes. NewHandler registers the volume
// routes when the backend implements it. Every method treats another
// tenant's volumes as absent; ids may also be given as names.
type VolumeBackend interface {
	CreateVolume(ctx context.Context, tenant string, req client.CreateVolumeRequest) (client.Volume, error)
	ListVolumes(ctx context.Context, tenant string, includeDeleted bool) ([]client.Volume, error)
	GetVolume(ctx context.Context, tenant, id string) (client.Volume, error)
	// DeleteVolume soft-deletes a volume no sandbox uses (restorable for the
	// retention period), or with purge destroys its data at once.
	DeleteVolume(ctx context.Context, tenant, id string, purge bool) (client.Volume, error)
	UndeleteVolume(ctx context.Context, tenant, id string) (client.Volume, error)
	// AttachVolume adds a volume mount to a stopped sandbox (mounted from
	// its next start) and returns the sandbox. errs.ErrConflict while the
	// sandbox is not stopped, or when a mount is at that path already;
	// errs.ErrNotFound for an unknown sandbox or volume.
	AttachVolume(ctx context.Context, tenant, sandbox string, m client.VolumeMount) (client.Sandbox, error)
	// DetachVolume removes the mount at path from a stopped sandbox (the
	// volume keeps its data). errs.ErrConflict while the sandbox is not
	// stopped; errs.ErrNotFound when nothing is mounted at path.
	DetachVolume(ctx context.Context, tenant, sandbox, path string) (client.Sandbox, error)
}
