package client

import (
	"encoding/json"
	"time"
)

// RepoInfo describes the daemon's off-box repository.
type RepoInfo struct {
	Configured  bool      `json:"configured" doc:"false when the daemon runs without --repo"`
	Initialized bool      `json:"initialized" doc:"Whether the repository exists"`
	Location    string    `json:"location,omitempty" doc:"file:///... or s3://host/bucket/prefix"`
	ID          string    `json:"id,omitempty" doc:"Unique id"`
	Created     time.Time `json:"created,omitzero" doc:"When the repository was created (RFC 3339)"`
	KeyFile     string    `json:"key_file,omitempty" doc:"where the master key is kept on this host: back it up"`
	Scopes      []string  `json:"scopes,omitempty" doc:"admin only: every key scope in the repository"`
}

// Progress is the progress of a long operation.
type Progress struct {
	Phase      string  `json:"phase" doc:"snapshot, push, restore, verify, check, prune, hydrate"`
	FilesDone  int64   `json:"files_done" doc:"Files processed so far"`
	FilesTotal int64   `json:"files_total" doc:"Files to process (0 while unknown)"`
	BytesDone  int64   `json:"bytes_done" doc:"Bytes processed so far"`
	BytesTotal int64   `json:"bytes_total" doc:"Bytes to process (0 while unknown)"`
	BytesMoved int64   `json:"bytes_moved" doc:"stored bytes uploaded or downloaded"`
	Elapsed    float64 `json:"elapsed_seconds" doc:"Seconds since the operation started"`
}

// Operation is a long-running task (push, restore, pull, check, prune,
// drill, archive, hydrate) the daemon runs in the background. Operations
// live in the daemon's memory: they are lost on restart (their effects are
// not).
type Operation struct {
	ID        string          `json:"id" doc:"op-..."`
	Kind      string          `json:"kind" doc:"Kind"`
	Target    string          `json:"target,omitempty" doc:"sandbox id, snapshot id ..."`
	State     string          `json:"state" enum:"running,succeeded,failed" doc:"Current state"`
	Progress  *Progress       `json:"progress,omitempty" doc:"The operation's progress"`
	Error     string          `json:"error,omitempty" doc:"What went wrong, if anything"`
	Result    json.RawMessage `json:"result,omitempty" doc:"kind-specific result (PushResult, RestoreResult, CheckResult, RepoPruneResult, Drill)"`
	StartedAt time.Time       `json:"started_at" doc:"When it started (RFC 3339)"`
	EndedAt   *time.Time      `json:"ended_at,omitempty" doc:"When it ended (RFC 3339); absent while it runs"`
}

// PushRequest pushes a sandbox to the repository.
type PushRequest struct {
	Snapshot string `json:"snapshot,omitempty" doc:"local snapshot to push; empty takes a new one"`
	// IncludeVolumes also pushes the sandbox's volumes, cloned at the same
	// instant as its root (a new snapshot is taken; Snapshot must be empty).
	IncludeVolumes bool `json:"include_volumes,omitempty" doc:"IncludeVolumes also pushes the sandbox's volumes, cloned at the same instant as its root (a new snapshot is taken; Snapshot must be empty)."`
	Wait           bool `json:"wait,omitempty" doc:"answer when the push is done instead of at once"`
}

// PushResult is the result of a push operation.
type PushResult struct {
	RemoteSnapshot RemoteSnapshot `json:"remote_snapshot" doc:"Id of the snapshot in the repository"`
	// Volumes are the pushes of the sandbox's volumes (IncludeVolumes).
	Volumes       []RemoteSnapshot `json:"volumes,omitempty" doc:"Volumes are the pushes of the sandbox's volumes (IncludeVolumes)."`
	FilesRead     int64            `json:"files_read" doc:"Files read from the sandbox"`
	FilesReused   int64            `json:"files_reused" doc:"Files unchanged since the last push (not read again)"`
	BytesRead     int64            `json:"bytes_read" doc:"Bytes read from the sandbox"`
	BytesUploaded int64            `json:"bytes_uploaded" doc:"Bytes uploaded to the blob store (after dedup and compression)"`
	Seconds       float64          `json:"seconds" doc:"Duration in seconds"`
	// BlobsReplaced counts chunks and trees uploaded again because the
	// only stored copy is in a pack a check found damaged.
	BlobsReplaced int64 `json:"blobs_replaced,omitempty" doc:"BlobsReplaced counts chunks and trees uploaded again because the only stored copy is in a pack a check found damaged."`
	// Incremental is true when the push looked only at what changed since
	// the local snapshot the previous push read (btrfs pools, while that
	// snapshot is kept), instead of at every file.
	Incremental bool `json:"incremental,omitempty" doc:"True when the push read only what changed since the local snapshot of the previous push (btrfs pools), not every file"`
}

// RemoteSnapshot is a snapshot pushed to the repository.
type RemoteSnapshot struct {
	ID          string    `json:"id" doc:"manifest id (hex); any unique prefix of 4+ digits works"`
	Scope       string    `json:"scope" doc:"Repository scope (tenant) the snapshot belongs to"`
	Sandbox     string    `json:"sandbox,omitempty" doc:"Id of the sandbox"`
	SandboxName string    `json:"sandbox_name,omitempty" doc:"Name of the sandbox"`
	Volume      string    `json:"volume,omitempty" doc:"Id of the volume"`
	Source      string    `json:"source" doc:"Where it came from"`
	Parent      string    `json:"parent,omitempty" doc:"Id of the snapshot or sandbox it came from"`
	Time        time.Time `json:"time" doc:"When it happened (RFC 3339)"`
	Files       int64     `json:"files" doc:"Number of files"`
	Bytes       int64     `json:"bytes" doc:"Size in bytes"`
	DataBytes   int64     `json:"data_bytes" doc:"Bytes of file data in the snapshot"`
	// AddedBytes is what the push stored in the repository (0 when the
	// push predates the figure).
	AddedBytes int64             `json:"added_bytes,omitempty" doc:"bytes the push added to the repository (new packs and index); 0 if unknown"`
	Labels     map[string]string `json:"labels,omitempty" doc:"Labels (key: value)"`
	// Mounts are the volume mounts a pushed sandbox had (label "volumes"):
	// a restore attaches them again.
	Mounts []PushedMount `json:"mounts,omitempty" doc:"volume mounts of the pushed sandbox, re-attached by a restore"`
	// WriterNode and WriterEpoch are who pushed it: the node, and the
	// epoch of the sandbox's lease it pushed under (empty and 0 for
	// pushes made before they were recorded; epoch 0 for volumes).
	WriterNode  string `json:"writer_node,omitempty" doc:"node that pushed it (empty if not recorded)"`
	WriterEpoch int64  `json:"writer_epoch,omitempty" doc:"epoch of the sandbox's lease the push was made under: of one sandbox's pushes, the highest epoch is the newest (0 if not recorded)"`
}

// PushedMount is a volume mount as a push records it: the volume's id and
// name on the daemon that pushed, its sub-path, mount path and mode.
type PushedMount struct {
	VolumeID   string `json:"volume_id" doc:"Id of the volume"`
	VolumeName string `json:"volume_name,omitempty" doc:"Name of the volume"`
	SubPath    string `json:"sub_path,omitempty" doc:"Sub-path of the volume that was mounted"`
	Path       string `json:"path" doc:"Absolute path inside the sandbox"`
	ReadOnly   bool   `json:"read_only,omitempty" doc:"Mounted read-only"`
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
	NoStart  bool   `json:"no_start,omitempty" doc:"Leave the restored sandbox stopped"`
	// Volumes are mounts to use instead of the recorded ones, by mount
	// path: a mount at a recorded path replaces that mount, another path
	// adds one.
	Volumes []VolumeMount `json:"volumes,omitempty" doc:"mounts replacing the recorded mount at the same path, or added"`
	// RestoreVolumes restores each recorded volume that is not on this
	// daemon from its push (the one pushed with this sandbox push, else
	// the volume's latest) into a new volume of the recorded name.
	RestoreVolumes bool `json:"restore_volumes,omitempty" doc:"restore missing volumes from their pushes first"`
	Wait           bool `json:"wait,omitempty" doc:"Answer when the operation is done instead of at once (with its operation id)"`
}

// RestoreResult is the result of a restore or pull.
type RestoreResult struct {
	Sandbox  *Sandbox  `json:"sandbox,omitempty" doc:"The sandbox"`
	Snapshot *Snapshot `json:"snapshot,omitempty" doc:"pull: the local snapshot made"`
	// Volumes are the volumes restored with the sandbox (RestoreVolumes).
	Volumes         []Volume `json:"volumes,omitempty" doc:"volumes restored from their pushes with the sandbox"`
	Files           int64    `json:"files" doc:"Number of files"`
	BytesWritten    int64    `json:"bytes_written" doc:"Bytes written to the restored sandbox"`
	BytesDownloaded int64    `json:"bytes_downloaded" doc:"Bytes downloaded from the blob store"`
	Seconds         float64  `json:"seconds" doc:"Duration in seconds"`
}

// PullRequest copies a pushed snapshot into a local snapshot (which can
// then be forked or rolled back to).
type PullRequest struct {
	Snapshot string `json:"snapshot" minLength:"1" doc:"Id of the snapshot"`
	Wait     bool   `json:"wait,omitempty" doc:"Answer when the operation is done instead of at once (with its operation id)"`
}

// CheckRequest checks the repository (the caller's tenant scope; every
// scope for an admin).
type CheckRequest struct {
	ReadData       bool   `json:"read_data,omitempty" doc:"Also read and verify every pack (slow)"`
	ReadDataSubset string `json:"read_data_subset,omitempty" doc:"n/m or p%"`
	Wait           bool   `json:"wait,omitempty" doc:"Answer when the operation is done instead of at once (with its operation id)"`
}

// CheckResult is the result of a check.
type CheckResult struct {
	OK     bool         `json:"ok" doc:"Whether it succeeded"`
	Scopes []ScopeCheck `json:"scopes" doc:"One result per repository scope checked"`
}

// ScopeCheck is what a check found in one scope.
type ScopeCheck struct {
	Scope     string   `json:"scope" doc:"The repository scope (tenant)"`
	Snapshots int      `json:"snapshots" doc:"Snapshots checked"`
	Packs     int      `json:"packs" doc:"Packs listed"`
	Blobs     int      `json:"blobs" doc:"Blobs indexed"`
	PacksRead int      `json:"packs_read" doc:"Packs read and verified (with read_data)"`
	Errors    []string `json:"errors,omitempty" doc:"Problems found (the repository is damaged)"`
	Warnings  []string `json:"warnings,omitempty" doc:"Harmless findings (e.g. unused packs)"`
	// DamagedPacks are the packs found damaged (by this check or an
	// earlier one, and not repaired since): pushes upload their blobs
	// again rather than reuse them.
	DamagedPacks []DamagedPack `json:"damaged_packs,omitempty" doc:"DamagedPacks are the packs found damaged (by this check or an earlier one, and not repaired since): pushes upload their blobs again rather than reuse them."`
	// DamagedSnapshots are the pushed snapshots that cannot be restored
	// completely, with the sandbox (or volume) each is of.
	DamagedSnapshots []DamagedSnapshot `json:"damaged_snapshots,omitempty" doc:"DamagedSnapshots are the pushed snapshots that cannot be restored completely, with the sandbox (or volume) each is of."`
}

// DamagedPack is a pack file of the repository found damaged.
type DamagedPack struct {
	ID      string    `json:"id" doc:"Unique id"`
	Found   time.Time `json:"found" doc:"What was wrong with the pack"`
	Reason  string    `json:"reason" doc:"Why"`
	Missing bool      `json:"missing,omitempty" doc:"the pack is gone from the store"`
	// BlobsLost counts the chunks and trees of the pack that could not be
	// read back (the others are copied out by stead repo repair).
	BlobsLost int `json:"blobs_lost" doc:"BlobsLost counts the chunks and trees of the pack that could not be read back (the others are copied out by stead repo repair)."`
}

// DamagedSnapshot is a pushed snapshot that needs data that is missing
// or damaged.
type DamagedSnapshot struct {
	ID          string    `json:"id" doc:"Unique id"`
	Time        time.Time `json:"time,omitzero" doc:"When it happened (RFC 3339)"`
	Source      string    `json:"source,omitempty" doc:"Where it came from"`
	Sandbox     string    `json:"sandbox,omitempty" doc:"Id of the sandbox"`
	SandboxName string    `json:"sandbox_name,omitempty" doc:"Name of the sandbox"`
	Volume      string    `json:"volume,omitempty" doc:"Id of the volume"`
	// Packs are the damaged packs it needs.
	Packs   []string `json:"packs,omitempty" doc:"Packs are the damaged packs it needs."`
	Problem string   `json:"problem" doc:"the first problem found"`
	// RepairedFrom names the local copy a repair read the missing data
	// from (repair results only; empty when intact copies sufficed:
	// salvaged from the damaged packs, or pushed again since the check).
	RepairedFrom string `json:"repaired_from,omitempty" doc:"RepairedFrom names the local copy a repair read the missing data from (repair results only; empty when intact copies sufficed: salvaged from the damaged packs, or pushed again since the check)."`
}

// RepairRequest repairs the repository (the caller's tenant scope; every
// scope for an admin).
type RepairRequest struct {
	Wait bool `json:"wait,omitempty" doc:"Answer when the operation is done instead of at once (with its operation id)"`
}

// RepairResult is the result of a repair.
type RepairResult struct {
	// OK is set when no snapshot is left damaged.
	OK     bool          `json:"ok" doc:"OK is set when no snapshot is left damaged."`
	Scopes []ScopeRepair `json:"scopes" doc:"One result per repository scope repaired"`
}

// ScopeRepair is what a repair did in one scope.
type ScopeRepair struct {
	Scope string `json:"scope" doc:"The repository scope (tenant)"`
	// PacksRemoved are damaged packs taken out of the index and deleted,
	// after their intact chunks were copied to new packs.
	PacksRemoved []string `json:"packs_removed" doc:"PacksRemoved are damaged packs taken out of the index and deleted, after their intact chunks were copied to new packs."`
	// PacksIntact are packs marked damaged that read back intact (their
	// mark is cleared).
	PacksIntact   []string `json:"packs_intact" doc:"PacksIntact are packs marked damaged that read back intact (their mark is cleared)."`
	BlobsSalvaged int64    `json:"blobs_salvaged" doc:"Blobs saved from damaged packs into new ones"`
	BlobsUploaded int64    `json:"blobs_uploaded" doc:"read again from local snapshots"`
	BytesUploaded int64    `json:"bytes_uploaded" doc:"Bytes uploaded for the repair"`
	// Repaired are the snapshots that were damaged and restore again.
	Repaired []DamagedSnapshot `json:"repaired" doc:"Repaired are the snapshots that were damaged and restore again."`
	// Damaged are the snapshots still damaged: no local copy had what they
	// lack. Forget them, or restore what is left of them.
	Damaged []DamagedSnapshot `json:"damaged" doc:"Damaged are the snapshots still damaged: no local copy had what they lack. Forget them, or restore what is left of them."`
}

// BackupRetention is a retention policy for pushed snapshots (restic's forget).
type BackupRetention struct {
	KeepLast int    `json:"keep_last,omitempty" doc:"Most recent snapshots kept whatever their age"`
	Hourly   int    `json:"hourly,omitempty" doc:"Hourly snapshots kept"`
	Daily    int    `json:"daily,omitempty" doc:"Daily snapshots kept"`
	Weekly   int    `json:"weekly,omitempty" doc:"Weekly snapshots kept"`
	Monthly  int    `json:"monthly,omitempty" doc:"Monthly snapshots kept"`
	Within   string `json:"within,omitempty" doc:"Go duration, e.g. 72h"`
}

// PruneRequest applies retention and drops unreferenced data: of the
// tenant's sandboxes (each by its own policy unless Retention is given) and,
// without Sandbox, of each of its volumes too (by Retention, when given).
type PruneRequest struct {
	// Sandbox limits forgetting to one sandbox's snapshots; BackupRetention then
	// overrides its policy for this run.
	Sandbox   string           `json:"sandbox,omitempty" doc:"Sandbox limits forgetting to one sandbox's snapshots; BackupRetention then overrides its policy for this run."`
	Retention *BackupRetention `json:"retention,omitempty" doc:"default: each sandbox's own policy"`
	DryRun    bool             `json:"dry_run,omitempty" doc:"Report what would be deleted without deleting"`
	Wait      bool             `json:"wait,omitempty" doc:"Answer when the operation is done instead of at once (with its operation id)"`
}

// RepoPruneResult is the result of a prune.
type RepoPruneResult struct {
	Forgotten     []string `json:"forgotten" doc:"remote snapshots dropped by retention"`
	PacksDeleted  int      `json:"packs_deleted" doc:"Packs deleted"`
	PacksRepacked int      `json:"packs_repacked" doc:"Packs rewritten without unused blobs"`
	BytesFreed    int64    `json:"bytes_freed" doc:"Bytes freed in the blob store"`
	DryRun        bool     `json:"dry_run,omitempty" doc:"Nothing was deleted (a dry run)"`
}

// BackupPolicy is a sandbox's push schedule and retention.
type BackupPolicy struct {
	Interval  string          `json:"interval,omitempty" doc:"push every interval (the RPO); empty or 0 disables scheduled pushes"`
	Retention BackupRetention `json:"retention" doc:"How long it is kept"`
	// ArchiveAfter archives the sandbox after it has been stopped this long
	// (default: the tenant's retention archive_stopped_after, else 168h =
	// 7 days; "0" disables).
	ArchiveAfter string     `json:"archive_after,omitempty" doc:"ArchiveAfter archives the sandbox after it has been stopped this long (default: the tenant's retention archive_stopped_after, else 168h = 7 days; \"0\" disables)."`
	LastPush     *time.Time `json:"last_push,omitempty" doc:"read-only"`
	LastPushID   string     `json:"last_push_id,omitempty" doc:"read-only"`
	NextPush     *time.Time `json:"next_push,omitempty" doc:"read-only"`
}

// DrillRequest runs a disaster-recovery drill.
type DrillRequest struct {
	// EmptyDataDir restores through a second, empty daemon data directory
	// (a fresh store and pool that know only the repository and the key),
	// simulating the loss of this machine.
	EmptyDataDir bool `json:"empty_data_dir,omitempty" doc:"EmptyDataDir restores through a second, empty daemon data directory (a fresh store and pool that know only the repository and the key), simulating the loss of this machine."`
	// Verify is a command run inside the restored sandbox; exit 0 passes.
	Verify []string `json:"verify,omitempty" doc:"Verify is a command run inside the restored sandbox; exit 0 passes."`
	Wait   bool     `json:"wait,omitempty" doc:"Answer when the operation is done instead of at once (with its operation id)"`
}

// Drill is the record of a disaster-recovery drill.
type Drill struct {
	ID              string    `json:"id" doc:"Unique id"`
	Sandbox         string    `json:"sandbox" doc:"Id of the sandbox"`
	RemoteSnapshot  string    `json:"remote_snapshot" doc:"Id of the snapshot in the repository"`
	StartedAt       time.Time `json:"started_at" doc:"When it started (RFC 3339)"`
	OK              bool      `json:"ok" doc:"Whether it succeeded"`
	EmptyDataDir    bool      `json:"empty_data_dir" doc:"Whether the drill restored into an empty data directory"`
	RecoverySeconds float64   `json:"recovery_seconds" doc:"from the start of the restore to a verified, running sandbox"`
	RestoreSeconds  float64   `json:"restore_seconds" doc:"Seconds the restore took"`
	VerifySeconds   float64   `json:"verify_seconds" doc:"Seconds the verify command took"`
	Bytes           int64     `json:"bytes" doc:"Size in bytes"`
	Files           int64     `json:"files" doc:"Number of files"`
	DigestOK        bool      `json:"digest_ok" doc:"Whether the restored files' digest matched the snapshot's"`
	VerifyExit      *int      `json:"verify_exit,omitempty" doc:"The verify command's exit code"`
	VerifyOutput    string    `json:"verify_output,omitempty" doc:"The end of the verify command's output"`
	Error           string    `json:"error,omitempty" doc:"What went wrong, if anything"`
}

// FileVersion is one version of a path found in a local or pushed snapshot.
type FileVersion struct {
	Source   string    `json:"source" enum:"local,remote" doc:"Where it came from"`
	Snapshot string    `json:"snapshot" doc:"local snapshot id or remote snapshot id"`
	Time     time.Time `json:"time" doc:"When it happened (RFC 3339)"`
	Type     string    `json:"type" doc:"Kind of entry"`
	Size     int64     `json:"size" doc:"Size in bytes"`
	Mode     uint32    `json:"mode" doc:"Permission bits (octal as a number)"`
	MTime    time.Time `json:"mtime" doc:"Modification time of this version (RFC 3339)"`
	Digest   string    `json:"digest" doc:"content digest: files sha256:<hex>; directories a digest of the listing"`
	Changed  bool      `json:"changed" doc:"differs from the next older version"`
}

// RestorePathRequest brings back one path from a snapshot.
type RestorePathRequest struct {
	Path     string `json:"path" minLength:"1" doc:"path inside the sandbox, e.g. /workspace/notes.md"`
	Snapshot string `json:"snapshot" minLength:"1" doc:"local snapshot id (snap-...) or remote snapshot id/prefix"`
	// To is where to put it inside the sandbox (default: Path itself,
	// replacing what is there atomically).
	To   string `json:"to,omitempty" doc:"To is where to put it inside the sandbox (default: Path itself, replacing what is there atomically)."`
	Wait bool   `json:"wait,omitempty" doc:"Answer when the operation is done instead of at once (with its operation id)"`
}

// PushVolumeRequest pushes a volume to the repository.
type PushVolumeRequest struct {
	Wait bool `json:"wait,omitempty" doc:"Answer when the operation is done instead of at once (with its operation id)"`
}

// RestoreVolumeRequest restores a pushed volume snapshot into a new volume.
type RestoreVolumeRequest struct {
	Snapshot string `json:"snapshot,omitempty" doc:"local volume snapshot (snap-...), or remote snapshot id or prefix; or give volume for its latest push"`
	Volume   string `json:"volume,omitempty" doc:"restore the latest push of this volume (id, or name while it exists)"`
	Name     string `json:"name" minLength:"1" doc:"name of the new volume"`
	Wait     bool   `json:"wait,omitempty" doc:"Answer when the operation is done instead of at once (with its operation id)"`
}

// VolumeRestoreResult is the result of a volume restore.
type VolumeRestoreResult struct {
	Volume       Volume  `json:"volume" doc:"Id of the volume"`
	Files        int64   `json:"files" doc:"Number of files"`
	BytesWritten int64   `json:"bytes_written" doc:"Bytes written to the restored volume"`
	Seconds      float64 `json:"seconds" doc:"Duration in seconds"`
}

// ArchiveResult is the result of an archive operation.
type ArchiveResult struct {
	RemoteSnapshot RemoteSnapshot `json:"remote_snapshot" doc:"Id of the snapshot in the repository"`
	FreedBytes     int64          `json:"freed_bytes" doc:"Local bytes freed"`
	VerifiedBytes  int64          `json:"verified_bytes" doc:"Bytes verified in the repository before the local copy was removed"`
}

// RestorePathResult is the result of a single-path restore.
type RestorePathResult struct {
	Path     string  `json:"path" doc:"Absolute path inside the sandbox"`
	From     string  `json:"from" doc:"Snapshot the path was restored from"`
	Replaced bool    `json:"replaced" doc:"an existing entry at path was replaced"`
	Seconds  float64 `json:"seconds" doc:"Duration in seconds"`
}
