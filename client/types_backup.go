package client

import (
	"encoding/json"
	"time"
)

// RepoInfo describes the daemon's off-box repository.
type RepoInfo struct {
	Configured  bool      `json:"configured" doc:"false when the daemon runs without --repo"`
	Initialized bool      `json:"initialized"`
	Location    string    `json:"location,omitempty" doc:"file:///... or s3://host/bucket/prefix"`
	ID          string    `json:"id,omitempty"`
	Created     time.Time `json:"created,omitzero"`
	KeyFile     string    `json:"key_file,omitempty" doc:"where the master key is kept on this host: back it up"`
	Scopes      []string  `json:"scopes,omitempty" doc:"admin only: every key scope in the repository"`
}

// Progress is the progress of a long operation.
type Progress struct {
	Phase      string  `json:"phase" doc:"snapshot, push, restore, verify, check, prune, hydrate"`
	FilesDone  int64   `json:"files_done"`
	FilesTotal int64   `json:"files_total"`
	BytesDone  int64   `json:"bytes_done"`
	BytesTotal int64   `json:"bytes_total"`
	BytesMoved int64   `json:"bytes_moved" doc:"stored bytes uploaded or downloaded"`
	Elapsed    float64 `json:"elapsed_seconds"`
}

// Operation is a long-running task (push, restore, pull, check, prune,
// drill, archive, hydrate) the daemon runs in the background. Operations
// live in the daemon's memory: they are lost on restart (their effects are
// not).
type Operation struct {
	ID        string          `json:"id" doc:"op-..."`
	Kind      string          `json:"kind"`
	Target    string          `json:"target,omitempty" doc:"sandbox id, snapshot id ..."`
	State     string          `json:"state" enum:"running,succeeded,failed"`
	Progress  *Progress       `json:"progress,omitempty"`
	Error     string          `json:"error,omitempty"`
	Result    json.RawMessage `json:"result,omitempty" doc:"kind-specific result (PushResult, RestoreResult, CheckResult, RepoPruneResult, Drill)"`
	StartedAt time.Time       `json:"started_at"`
	EndedAt   *time.Time      `json:"ended_at,omitempty"`
}

// PushRequest pushes a sandbox to the repository.
type PushRequest struct {
	Snapshot string `json:"snapshot,omitempty" doc:"local snapshot to push; empty takes a new one"`
	// IncludeVolumes also pushes the sandbox's volumes, cloned at the same
	// instant as its root (a new snapshot is taken; Snapshot must be empty).
	IncludeVolumes bool `json:"include_volumes,omitempty"`
	Wait           bool `json:"wait,omitempty" doc:"answer when the push is done instead of at once"`
}

// PushResult is the result of a push operation.
type PushResult struct {
	RemoteSnapshot RemoteSnapshot `json:"remote_snapshot"`
	// Volumes are the pushes of the sandbox's volumes (IncludeVolumes).
	Volumes       []RemoteSnapshot `json:"volumes,omitempty"`
	FilesRead     int64            `json:"files_read"`
	FilesReused   int64            `json:"files_reused"`
	BytesRead     int64            `json:"bytes_read"`
	BytesUploaded int64            `json:"bytes_uploaded"`
	Seconds       float64          `json:"seconds"`
	// BlobsReplaced counts chunks and trees uploaded again because the
	// only stored copy is in a pack a check found damaged.
	BlobsReplaced int64 `json:"blobs_replaced,omitempty"`
	// Incremental is true when the push looked only at what changed since
	// the local snapshot the previous push read (btrfs pools, while that
	// snapshot is kept), instead of at every file.
	Incremental bool `json:"incremental,omitempty"`
}

// RemoteSnapshot is a snapshot pushed to the repository.
type RemoteSnapshot struct {
	ID          string    `json:"id" doc:"manifest id (hex); any unique prefix of 4+ digits works"`
	Scope       string    `json:"scope"`
	Sandbox     string    `json:"sandbox,omitempty"`
	SandboxName string    `json:"sandbox_name,omitempty"`
	Volume      string    `json:"volume,omitempty"`
	Source      string    `json:"source"`
	Parent      string    `json:"parent,omitempty"`
	Time        time.Time `json:"time"`
	Files       int64     `json:"files"`
	Bytes       int64     `json:"bytes"`
	DataBytes   int64     `json:"data_bytes"`
	// AddedBytes is what the push stored in the repository (0 when the
	// push predates the figure).
	AddedBytes int64             `json:"added_bytes,omitempty" doc:"bytes the push added to the repository (new packs and index); 0 if unknown"`
	Labels     map[string]string `json:"labels,omitempty"`
	// Mounts are the volume mounts a pushed sandbox had (label "volumes"):
	// a restore attaches them again.
	Mounts []PushedMount `json:"mounts,omitempty" doc:"volume mounts of the pushed sandbox, re-attached by a restore"`
}

// PushedMount is a volume mount as a push records it: the volume's id and
// name on the daemon that pushed, its sub-path, mount path and mode.
type PushedMount struct {
	VolumeID   string `json:"volume_id"`
	VolumeName string `json:"volume_name,omitempty"`
	SubPath    string `json:"sub_path,omitempty"`
	Path       string `json:"path"`
	ReadOnly   bool   `json:"read_only,omitempty"`
}

// RestoreRequest restores a pushed snapshot into a new sandbox.
//
// The pushed sandbox's volume mounts are attached again: each to the
// volume on this daemon with the recorded id, else to a volume restored
// from that volume's pushes (its origin), else to the volume with the
// recorded name. Volumes replaces a recorded mount at the same path (or
// adds one); RestoreVolumes first restores each volume not found here from
// its push. A recorded volume found nowhere refuses the restore (409)
// before anything is downloaded.
type RestoreRequest struct {
	Snapshot string `json:"snapshot,omitempty" doc:"remote snapshot id or prefix; or give sandbox for its latest"`
	Sandbox  string `json:"sandbox,omitempty" doc:"restore the latest pushed snapshot of this sandbox id"`
	Name     string `json:"name,omitempty" doc:"name of the new sandbox (default: generated)"`
	NoStart  bool   `json:"no_start,omitempty"`
	// Volumes are mounts to use instead of the recorded ones, by mount
	// path: a mount at a recorded path replaces that mount, another path
	// adds one.
	Volumes []VolumeMount `json:"volumes,omitempty" doc:"mounts replacing the recorded mount at the same path, or added"`
	// RestoreVolumes restores each recorded volume that is not on this
	// daemon from its push (the one pushed with this sandbox push, else
	// the volume's latest) into a new volume of the recorded name.
	RestoreVolumes bool `json:"restore_volumes,omitempty" doc:"restore missing volumes from their pushes first"`
	Wait           bool `json:"wait,omitempty"`
}

// RestoreResult is the result of a restore or pull.
type RestoreResult struct {
	Sandbox  *Sandbox  `json:"sandbox,omitempty"`
	Snapshot *Snapshot `json:"snapshot,omitempty" doc:"pull: the local snapshot made"`
	// Volumes are the volumes restored with the sandbox (RestoreVolumes).
	Volumes         []Volume `json:"volumes,omitempty" doc:"volumes restored from their pushes with the sandbox"`
	Files           int64    `json:"files"`
	BytesWritten    int64    `json:"bytes_written"`
	BytesDownloaded int64    `json:"bytes_downloaded"`
	Seconds         float64  `json:"seconds"`
}

// PullRequest copies a pushed snapshot into a local snapshot (which can
// then be forked or rolled back to).
type PullRequest struct {
	Snapshot string `json:"snapshot" minLength:"1"`
	Wait     bool   `json:"wait,omitempty"`
}

// CheckRequest checks the repository (the caller's tenant scope; every
// scope for an admin).
type CheckRequest struct {
	ReadData       bool   `json:"read_data,omitempty"`
	ReadDataSubset string `json:"read_data_subset,omitempty" doc:"n/m or p%"`
	Wait           bool   `json:"wait,omitempty"`
}

// CheckResult is the result of a check.
type CheckResult struct {
	OK     bool         `json:"ok"`
	Scopes []ScopeCheck `json:"scopes"`
}

// ScopeCheck is what a check found in one scope.
type ScopeCheck struct {
	Scope     string   `json:"scope"`
	Snapshots int      `json:"snapshots"`
	Packs     int      `json:"packs"`
	Blobs     int      `json:"blobs"`
	PacksRead int      `json:"packs_read"`
	Errors    []string `json:"errors,omitempty"`
	Warnings  []string `json:"warnings,omitempty"`
	// DamagedPacks are the packs found damaged (by this check or an
	// earlier one, and not repaired since): pushes upload their blobs
	// again rather than reuse them.
	DamagedPacks []DamagedPack `json:"damaged_packs,omitempty"`
	// DamagedSnapshots are the pushed snapshots that cannot be restored
	// completely, with the sandbox (or volume) each is of.
	DamagedSnapshots []DamagedSnapshot `json:"damaged_snapshots,omitempty"`
}

// DamagedPack is a pack file of the repository found damaged.
type DamagedPack struct {
	ID      string    `json:"id"`
	Found   time.Time `json:"found"`
	Reason  string    `json:"reason"`
	Missing bool      `json:"missing,omitempty" doc:"the pack is gone from the store"`
	// BlobsLost counts the chunks and trees of the pack that could not be
	// read back (the others are copied out by stead repo repair).
	BlobsLost int `json:"blobs_lost"`
}

// DamagedSnapshot is a pushed snapshot that needs data that is missing
// or damaged.
type DamagedSnapshot struct {
	ID          string    `json:"id"`
	Time        time.Time `json:"time,omitzero"`
	Source      string    `json:"source,omitempty"`
	Sandbox     string    `json:"sandbox,omitempty"`
	SandboxName string    `json:"sandbox_name,omitempty"`
	Volume      string    `json:"volume,omitempty"`
	// Packs are the damaged packs it needs.
	Packs   []string `json:"packs,omitempty"`
	Problem string   `json:"problem" doc:"the first problem found"`
	// RepairedFrom names the local copy a repair read the missing data
	// from (repair results only; empty when intact copies sufficed:
	// salvaged from the damaged packs, or pushed again since the check).
	RepairedFrom string `json:"repaired_from,omitempty"`
}

// RepairRequest repairs the repository (the caller's tenant scope; every
// scope for an admin).
type RepairRequest struct {
	Wait bool `json:"wait,omitempty"`
}

// RepairResult is the result of a repair.
type RepairResult struct {
	// OK is set when no snapshot is left damaged.
	OK     bool          `json:"ok"`
	Scopes []ScopeRepair `json:"scopes"`
}

// ScopeRepair is what a repair did in one scope.
type ScopeRepair struct {
	Scope string `json:"scope"`
	// PacksRemoved are damaged packs taken out of the index and deleted,
	// after their intact chunks were copied to new packs.
	PacksRemoved []string `json:"packs_removed"`
	// PacksIntact are packs marked damaged that read back intact (their
	// mark is cleared).
	PacksIntact   []string `json:"packs_intact"`
	BlobsSalvaged int64    `json:"blobs_salvaged"`
	BlobsUploaded int64    `json:"blobs_uploaded" doc:"read again from local snapshots"`
	BytesUploaded int64    `json:"bytes_uploaded"`
	// Repaired are the snapshots that were damaged and restore again.
	Repaired []DamagedSnapshot `json:"repaired"`
	// Damaged are the snapshots still damaged: no local copy had what they
	// lack. Forget them, or restore what is left of them.
	Damaged []DamagedSnapshot `json:"damaged"`
}

// BackupRetention is a retention policy for pushed snapshots (restic's forget).
type BackupRetention struct {
	KeepLast int    `json:"keep_last,omitempty"`
	Hourly   int    `json:"hourly,omitempty"`
	Daily    int    `json:"daily,omitempty"`
	Weekly   int    `json:"weekly,omitempty"`
	Monthly  int    `json:"monthly,omitempty"`
	Within   string `json:"within,omitempty" doc:"Go duration, e.g. 72h"`
}

// PruneRequest applies retention and drops unreferenced data: of the
// tenant's sandboxes (each by its own policy unless Retention is given) and,
// without Sandbox, of each of its volumes too (by Retention, when given).
type PruneRequest struct {
	// Sandbox limits forgetting to one sandbox's snapshots; BackupRetention then
	// overrides its policy for this run.
	Sandbox   string           `json:"sandbox,omitempty"`
	Retention *BackupRetention `json:"retention,omitempty" doc:"default: each sandbox's own policy"`
	DryRun    bool             `json:"dry_run,omitempty"`
	Wait      bool             `json:"wait,omitempty"`
}

// RepoPruneResult is the result of a prune.
type RepoPruneResult struct {
	Forgotten     []string `json:"forgotten" doc:"remote snapshots dropped by retention"`
	PacksDeleted  int      `json:"packs_deleted"`
	PacksRepacked int      `json:"packs_repacked"`
	BytesFreed    int64    `json:"bytes_freed"`
	DryRun        bool     `json:"dry_run,omitempty"`
}

// BackupPolicy is a sandbox's push schedule and retention.
type BackupPolicy struct {
	Interval  string          `json:"interval,omitempty" doc:"push every interval (the RPO); empty or 0 disables scheduled pushes"`
	Retention BackupRetention `json:"retention"`
	// ArchiveAfter archives the sandbox after it has been stopped this long
	// (default: the tenant's retention archive_stopped_after, else 168h =
	// 7 days; "0" disables).
	ArchiveAfter string     `json:"archive_after,omitempty"`
	LastPush     *time.Time `json:"last_push,omitempty" doc:"read-only"`
	LastPushID   string     `json:"last_push_id,omitempty" doc:"read-only"`
	NextPush     *time.Time `json:"next_push,omitempty" doc:"read-only"`
}

// DrillRequest runs a disaster-recovery drill.
type DrillRequest struct {
	// EmptyDataDir restores through a second, empty daemon data directory
	// (a fresh store and pool that know only the repository and the key),
	// simulating the loss of this machine.
	EmptyDataDir bool `json:"empty_data_dir,omitempty"`
	// Verify is a command run inside the restored sandbox; exit 0 passes.
	Verify []string `json:"verify,omitempty"`
	Wait   bool     `json:"wait,omitempty"`
}

// Drill is the record of a disaster-recovery drill.
type Drill struct {
	ID              string    `json:"id"`
	Sandbox         string    `json:"sandbox"`
	RemoteSnapshot  string    `json:"remote_snapshot"`
	StartedAt       time.Time `json:"started_at"`
	OK              bool      `json:"ok"`
	EmptyDataDir    bool      `json:"empty_data_dir"`
	RecoverySeconds float64   `json:"recovery_seconds" doc:"from the start of the restore to a verified, running sandbox"`
	RestoreSeconds  float64   `json:"restore_seconds"`
	VerifySeconds   float64   `json:"verify_seconds"`
	Bytes           int64     `json:"bytes"`
	Files           int64     `json:"files"`
	DigestOK        bool      `json:"digest_ok"`
	VerifyExit      *int      `json:"verify_exit,omitempty"`
	VerifyOutput    string    `json:"verify_output,omitempty"`
	Error           string    `json:"error,omitempty"`
}

// FileVersion is one version of a path found in a local or pushed snapshot.
type FileVersion struct {
	Source   string    `json:"source" enum:"local,remote"`
	Snapshot string    `json:"snapshot" doc:"local snapshot id or remote snapshot id"`
	Time     time.Time `json:"time"`
	Type     string    `json:"type"`
	Size     int64     `json:"size"`
	Mode     uint32    `json:"mode"`
	MTime    time.Time `json:"mtime"`
	Digest   string    `json:"digest" doc:"content digest: files sha256:<hex>; directories a digest of the listing"`
	Changed  bool      `json:"changed" doc:"differs from the next older version"`
}

// RestorePathRequest brings back one path from a snapshot.
type RestorePathRequest struct {
	Path     string `json:"path" minLength:"1" doc:"path inside the sandbox, e.g. /workspace/notes.md"`
	Snapshot string `json:"snapshot" minLength:"1" doc:"local snapshot id (snap-...) or remote snapshot id/prefix"`
	// To is where to put it inside the sandbox (default: Path itself,
	// replacing what is there atomically).
	To   string `json:"to,omitempty"`
	Wait bool   `json:"wait,omitempty"`
}

// PushVolumeRequest pushes a volume to the repository.
type PushVolumeRequest struct {
	Wait bool `json:"wait,omitempty"`
}

// RestoreVolumeRequest restores a pushed volume snapshot into a new volume.
type RestoreVolumeRequest struct {
	Snapshot string `json:"snapshot,omitempty" doc:"local volume snapshot (snap-...), or remote snapshot id or prefix; or give volume for its latest push"`
	Volume   string `json:"volume,omitempty" doc:"restore the latest push of this volume (id, or name while it exists)"`
	Name     string `json:"name" minLength:"1" doc:"name of the new volume"`
	Wait     bool   `json:"wait,omitempty"`
}

// VolumeRestoreResult is the result of a volume restore.
type VolumeRestoreResult struct {
	Volume       Volume  `json:"volume"`
	Files        int64   `json:"files"`
	BytesWritten int64   `json:"bytes_written"`
	Seconds      float64 `json:"seconds"`
}

// ArchiveResult is the result of an archive operation.
type ArchiveResult struct {
	RemoteSnapshot RemoteSnapshot `json:"remote_snapshot"`
	FreedBytes     int64          `json:"freed_bytes"`
	VerifiedBytes  int64          `json:"verified_bytes"`
}

// RestorePathResult is the result of a single-path restore.
type RestorePathResult struct {
	Path     string  `json:"path"`
	From     string  `json:"from"`
	Replaced bool    `json:"replaced" doc:"an existing entry at path was replaced"`
	Seconds  float64 `json:"seconds"`
}
