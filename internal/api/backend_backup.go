package api

import (
	"context"

	"github.com/stead-dev/stead/client"
)

// BackupBackend serves the off-box repository: pushes, restores, pulls,
// checks, prunes, schedules, drills, archives and file history. NewHandler
// registers the /v1/repo, /v1/operations, /v1/remote-snapshots, /v1/drills
// and the sandbox push, backup-policy, drill, archive, history and
// restore-path routes only when its Backend also implements this
// interface.
//
// As with Backend, every method that takes a tenant treats another
// tenant's sandboxes, snapshots and operations as absent (errs.ErrNotFound);
// sandbox ids may also be given as names. A daemon without a repository
// answers errs.ErrUnsupported (or errs.ErrConflict before InitRepo).
//
// The long methods (push, restore, pull, check, prune, drill, archive,
// restore-path) start an operation in the background and return it at
// once, still running, unless the request asks to wait: then they return
// it in its final state (or still running if ctx ended first). An
// operation that failed is returned with State "failed" and its Error; the
// returned error is only for a request refused before anything started.
type BackupBackend interface {
	// RepoInfo describes the repository; scopes are listed for an admin
	// only. It takes no tenant: the repository is the daemon's.
	RepoInfo(ctx context.Context, admin bool) (client.RepoInfo, error)
	// InitRepo initialises the configured repository. The routes call it
	// for admin principals only. An initialised repository is
	// errs.ErrConflict.
	InitRepo(ctx context.Context) (client.RepoInfo, error)

	// GetOperation returns one of p's operations: one of p.TenantID's
	// and, when p.Sandbox is set (a sandbox-scoped token), one that acts on
	// that sandbox (a push, archive, hydrate, drill or restore-path of it).
	// Any other id, another tenant's or another sandbox's, is
	// errs.ErrNotFound, with the same error as an id that never existed.
	GetOperation(ctx context.Context, p Principal, id string) (client.Operation, error)
	// WatchOperation checks the id as GetOperation does, then sends the
	// operation's current state, then each change (at most every 200 ms),
	// and closes the channel after the final state or when ctx ends.
	WatchOperation(ctx context.Context, p Principal, id string) (<-chan client.Operation, error)

	// PushSandbox pushes a sandbox (a new snapshot of it, or req.Snapshot).
	PushSandbox(ctx context.Context, tenant, id string, req client.PushRequest) (client.Operation, error)
	// ListRemoteSnapshots lists the tenant's pushed snapshots (of one
	// sandbox when sandbox is set: id or name; a sandbox that no longer
	// exists here can be given by id).
	ListRemoteSnapshots(ctx context.Context, tenant, sandbox string) ([]client.RemoteSnapshot, error)
	// RestoreRemote restores a pushed snapshot into a new sandbox.
	RestoreRemote(ctx context.Context, tenant string, req client.RestoreRequest) (client.Operation, error)
	// PullRemote copies a pushed snapshot into a new local snapshot.
	PullRemote(ctx context.Context, tenant string, req client.PullRequest) (client.Operation, error)
	// CheckRepo checks the tenant's scope (every scope when admin).
	CheckRepo(ctx context.Context, tenant string, admin bool, req client.CheckRequest) (client.Operation, error)
	// RepairRepo repairs the tenant's scope (every scope when admin):
	// salvages damaged packs, uploads again from local copies what
	// damaged snapshots lack, and lists the snapshots still damaged.
	RepairRepo(ctx context.Context, tenant string, admin bool, req client.RepairRequest) (client.Operation, error)
	// PruneRepo applies retention to the tenant's pushed snapshots and
	// drops unreferenced data.
	PruneRepo(ctx context.Context, tenant string, req client.PruneRequest) (client.Operation, error)

	// GetBackupPolicy returns a sandbox's push schedule and retention.
	GetBackupPolicy(ctx context.Context, tenant, id string) (client.BackupPolicy, error)
	// SetBackupPolicy sets a sandbox's push schedule and retention (an
	// unparsable duration is errs.ErrInvalid) and returns it.
	SetBackupPolicy(ctx context.Context, tenant, id string, p client.BackupPolicy) (client.BackupPolicy, error)

	// DrillSandbox runs a disaster-recovery drill of a sandbox's latest
	// push.
	DrillSandbox(ctx context.Context, tenant, id string, req client.DrillRequest) (client.Operation, error)
	// ListDrills lists recorded drills (of one sandbox when set), newest
	// first.
	ListDrills(ctx context.Context, tenant, sandbox string) ([]client.Drill, error)
	// ArchiveSandbox pushes a stopped sandbox, verifies the push and frees
	// its local disk; StartSandbox hydrates it back.
	ArchiveSandbox(ctx context.Context, tenant, id string, wait bool) (client.Operation, error)

	// FileHistory lists the versions of one path across the sandbox's
	// local and pushed snapshots, newest first. The sandbox's agent token
	// calls it (see scope.go): it lists that sandbox's snapshots only.
	FileHistory(ctx context.Context, tenant, id, path string) ([]client.FileVersion, error)
	// RestorePath brings back one path of a snapshot into the sandbox. The
	// sandbox's agent token calls it (see scope.go): req.Snapshot must be
	// one of the sandbox's own snapshots (or of a volume it mounts), any
	// other is errs.ErrNotFound as an absent one. The operation acts on the
	// sandbox, so its agent token may follow it (GetOperation).
	RestorePath(ctx context.Context, tenant, id string, req client.RestorePathRequest) (client.Operation, error)

	// HydrateSandbox brings an archived sandbox's root back from the
	// repository (it stays stopped); starting an archived sandbox does the
	// same on its own.
	HydrateSandbox(ctx context.Context, tenant, id string, wait bool) (client.Operation, error)
	// PushVolume pushes a volume (an O(1) clone of it taken at one instant).
	PushVolume(ctx context.Context, tenant, id string, req client.PushVolumeRequest) (client.Operation, error)
	// ListVolumePushes lists the tenant's pushed volume snapshots (of one
	// volume when set).
	ListVolumePushes(ctx context.Context, tenant, volume string) ([]client.RemoteSnapshot, error)
	// RestoreVolume restores a pushed volume snapshot into a new volume.
	RestoreVolume(ctx context.Context, tenant string, req client.RestoreVolumeRequest) (client.Operation, error)
	// CreateVolumeSnapshot takes a read-only local snapshot of a volume.
	CreateVolumeSnapshot(ctx context.Context, tenant, id string, req client.CreateSnapshotRequest) (client.Snapshot, error)
	// ListVolumeSnapshots lists a volume's local snapshots.
	ListVolumeSnapshots(ctx context.Context, tenant, id string) ([]client.Snapshot, error)
}
