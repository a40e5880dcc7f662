package client

import (
	"encoding/json"
	"time"
)

// Sandbox is a sandbox as the API shows it.
type Sandbox struct {
	ID           string        `json:"id" doc:"Sandbox id (sb-...)"`
	Name         string        `json:"name" doc:"Unique name within the tenant"`
	Tenant       string        `json:"tenant" doc:"Id of the tenant that owns it"`
	Template     string        `json:"template" doc:"Template the root filesystem was cloned from"`
	State        string        `json:"state" enum:"creating,running,paused,stopped,deleted,error,archived,lost" doc:"Current state (lost: its node's heartbeat lapsed; see failover)"`
	InstanceType string        `json:"instance_type" doc:"Instance type (small, medium, large ...) that sets the default limits"`
	Limits       Limits        `json:"limits" doc:"Resource limits"`
	Service      *Service      `json:"service,omitempty" doc:"The supervised agent service"`
	Volumes      []VolumeMount `json:"volumes,omitempty" doc:"Persistent volumes mounted in the sandbox"`
	Address      string        `json:"address,omitempty" doc:"IPv4 address in the daemon's subnet, leased for the sandbox's life"`
	Network      NetworkPolicy `json:"network" doc:"Egress policy"`
	AutoResume   bool          `json:"auto_resume,omitempty" doc:"A request to an exposed port wakes the sandbox"`
	IdleTimeout  string        `json:"idle_timeout" doc:"Go duration; 0 disables auto-stop"`
	OnIdle       string        `json:"on_idle" enum:"stop,pause" doc:"What happens when the sandbox is idle: stop, pause or nothing"`
	MaxRuntime   string        `json:"max_runtime,omitempty" doc:"Go duration after which the sandbox is stopped; empty for no limit"`
	StopReason   string        `json:"stop_reason,omitempty" doc:"Why it last stopped (user, idle, crash ...)"`
	CreatedAt    time.Time     `json:"created_at" doc:"When it was created (RFC 3339)"`
	StartedAt    *time.Time    `json:"started_at,omitempty" doc:"When it started (RFC 3339)"`
	StoppedAt    *time.Time    `json:"stopped_at,omitempty" doc:"When it last stopped (RFC 3339)"`
	DeletedAt    *time.Time    `json:"deleted_at,omitempty" doc:"When it was soft-deleted (RFC 3339); absent unless deleted"`
	PurgeAt      *time.Time    `json:"purge_at,omitempty" doc:"When a soft-deleted object is destroyed for good (RFC 3339)"`
	// Warnings are the limits the sandbox is close to (disk, memory, its
	// volumes), as the daemon last checked.
	Warnings []LimitWarning `json:"warnings,omitempty" doc:"Limits the sandbox is close to (disk, memory, volumes)"`
	// LargeStateFiles are files in its state directories (/data) larger
	// than the daemon's hint size (shown by a get of one sandbox, not in
	// lists): history worth off-loading or rotating.
	LargeStateFiles []LargeFile `json:"large_state_files,omitempty" doc:"Files under /data larger than the daemon's hint size (get of one sandbox only)"`
	// DeleteAt is when the tenant's retention policy will soft-delete
	// this archived sandbox (absent: never, or not archived); the
	// retention.warning event comes before it.
	DeleteAt *time.Time `json:"delete_at,omitempty" doc:"When retention soft-deletes this archived sandbox"`

	// Failover is what happens when the sandbox's node is lost
	// (FailoverRestore or FailoverNone).
	Failover string `json:"failover" enum:"restore,none" doc:"When its node is lost: restore (on another node, from the last push) or none (it stays lost)"`
	// LastPushAt is the time of its latest push recorded in the store:
	// what a failover restores (its RPO). Absent: never pushed, so a
	// failover has nothing to restore.
	LastPushAt *time.Time `json:"last_push_at,omitempty" doc:"Time of its latest push recorded in the store, which a failover restores (files written after it are lost with the node); absent when never pushed"`
	// LastPushID is the id of that push.
	LastPushID string `json:"last_push_id,omitempty" doc:"Id of its latest push recorded in the store"`

	// Env names the environment variables given at create. Their values
	// are secrets: shown as SecretMask, like the service's.
	Env map[string]string `json:"env,omitempty" doc:"Environment given at create: names, values masked"`
	// Secrets are the tenant secrets the sandbox references (never values).
	Secrets []SecretRef `json:"secrets,omitempty" doc:"Secrets are the tenant secrets the sandbox references (never values)."`

	// Labels were given at create; keys scoped by a label selector reach
	// the sandboxes that carry their labels.
	Labels map[string]string `json:"labels,omitempty" doc:"Labels were given at create; keys scoped by a label selector reach the sandboxes that carry their labels."`
}

// Failover policies (CreateSandboxRequest.Failover, Sandbox.Failover).
const (
	// FailoverRestore restores the sandbox on another node from its last
	// push when its node is lost (the default).
	FailoverRestore = "restore"
	// FailoverNone leaves the sandbox lost when its node is lost.
	FailoverNone = "none"
)

// SecretMask stands for an environment value given at create wherever
// the API shows one: the values are kept sealed and never shown.
const SecretMask = "********"

// Limits are a sandbox's resource limits.
type Limits struct {
	CPUs        float64 `json:"cpus" doc:"CPU quota in cores"`
	MemoryBytes int64   `json:"memory_bytes" doc:"Memory limit in bytes"`
	Pids        int64   `json:"pids" doc:"Limit on the number of processes"`
	DiskBytes   int64   `json:"disk_bytes" doc:"Disk quota in bytes"`
}

// InstanceType is a named set of limits.
type InstanceType struct {
	Name   string `json:"name" doc:"Name"`
	Limits Limits `json:"limits" doc:"Resource limits"`
}

// Service is the supervised agent service of a sandbox.
type Service struct {
	Command []string          `json:"command" minItems:"1" doc:"Program and arguments"`
	Env     map[string]string `json:"env,omitempty" doc:"Environment variables (NAME: value)"`
	Cwd     string            `json:"cwd,omitempty" doc:"Working directory"`
	User    string            `json:"user,omitempty" doc:"agent (default) or root"`
	Restart string            `json:"restart,omitempty" enum:"always,on-failure,never" doc:"default on-failure"`
	// StopSignal is sent on stop unless StopLine is set (default SIGTERM).
	StopSignal string `json:"stop_signal,omitempty" doc:"StopSignal is sent on stop unless StopLine is set (default SIGTERM)."`
	// StopLine is written to the service's stdin on stop, e.g. "/checkpoint".
	StopLine string `json:"stop_line,omitempty" doc:"StopLine is written to the service's stdin on stop, e.g. \"/checkpoint\"."`
	// StopGrace is how long to wait after the stop hook before SIGKILL (default 30s).
	StopGrace string `json:"stop_grace,omitempty" doc:"StopGrace is how long to wait after the stop hook before SIGKILL (default 30s)."`
	// Log is the rotation of the service's log (default 64MiB, 4 kept).
	Log *LogConfig `json:"log,omitempty" doc:"Log is the rotation of the service's log (default 64MiB, 4 kept)."`
}

// CreateSandboxRequest creates a sandbox.
type CreateSandboxRequest struct {
	Name         string            `json:"name,omitempty" doc:"Defaults to the id"`
	Template     string            `json:"template,omitempty" doc:"Template id; default host"`
	InstanceType string            `json:"instance_type,omitempty" doc:"micro, small (default), medium, large"`
	DiskBytes    int64             `json:"disk_bytes,omitempty" minimum:"0" doc:"Disk quota in bytes, instead of the instance type's (the instance type becomes custom)"`
	Env          map[string]string `json:"env,omitempty" doc:"Environment variables (NAME: value)"`
	Service      *Service          `json:"service,omitempty" doc:"The supervised agent service"`
	IdleTimeout  string            `json:"idle_timeout,omitempty" doc:"default 15m; 0 disables"`
	OnIdle       string            `json:"on_idle,omitempty" enum:"stop,pause," doc:"What happens when the sandbox is idle: stop, pause or nothing"`
	MaxRuntime   string            `json:"max_runtime,omitempty" doc:"Go duration after which the sandbox is stopped; empty for no limit"`
	NoStart      bool              `json:"no_start,omitempty" doc:"Create stopped"`
	Volumes      []VolumeMount     `json:"volumes,omitempty" doc:"Persistent volumes to mount"`
	Network      *NetworkPolicy    `json:"network,omitempty" doc:"Egress policy; default: internet on, nothing else refused but what is always refused"`
	AutoResume   bool              `json:"auto_resume,omitempty" doc:"A request to an exposed port starts or resumes the sandbox when it is stopped or paused"`
	Secrets      []string          `json:"secrets,omitempty" doc:"Tenant secrets given to the service and every exec as environment variables: NAME, or NAME=VAR to rename"`
	SecretFiles  []string          `json:"secret_files,omitempty" doc:"Tenant secrets given as files on a tmpfs: NAME=/run/secrets/FILE (mode 0400, owned by the agent, never on the sandbox's disk)"`
	// Failover is what happens when the sandbox's node is lost:
	// FailoverRestore (the default) or FailoverNone.
	Failover string `json:"failover,omitempty" enum:"restore,none," doc:"When its node is lost: restore (default: on another node, from its last push) or none (it stays lost)"`

	// Labels are the sandbox's labels; a label-scoped key's creates get
	// its labels.
	Labels map[string]string `json:"labels,omitempty" doc:"Labels: key 1-63 of a-z A-Z 0-9 . _ - / (starting with a letter or digit), value 0-63 of a-z A-Z 0-9 . _ -"`
}

// ResizeRequest changes the limits of a stopped sandbox.
type ResizeRequest struct {
	InstanceType string  `json:"instance_type,omitempty" doc:"Instance type (small, medium, large ...) that sets the default limits"`
	CPUs         float64 `json:"cpus,omitempty" doc:"CPU limit in cores (fractions allowed)"`
	MemoryBytes  int64   `json:"memory_bytes,omitempty" doc:"Memory limit in bytes"`
	Pids         int64   `json:"pids,omitempty" doc:"Limit on the number of processes"`
	DiskBytes    int64   `json:"disk_bytes,omitempty" doc:"Disk quota in bytes"`
}

// ServiceInputRequest writes to the agent service's stdin.
type ServiceInputRequest struct {
	Data string `json:"data" minLength:"1" maxLength:"65536" doc:"Bytes for the service's stdin, e.g. a line ending in a newline"`
}

// ExecRequest runs a command in a running sandbox.
type ExecRequest struct {
	Command    []string          `json:"command" minItems:"1" doc:"Program and arguments"`
	Env        map[string]string `json:"env,omitempty" doc:"Environment variables (NAME: value)"`
	Cwd        string            `json:"cwd,omitempty" doc:"default /home/agent for agent, / for root"`
	User       string            `json:"user,omitempty" doc:"agent (default) or root"`
	Timeout    string            `json:"timeout,omitempty" doc:"Go duration; the process group is killed when it expires"`
	Stdin      string            `json:"stdin,omitempty" doc:"Bytes written to stdin, then closed"`
	Background bool              `json:"background,omitempty" doc:"Return at once; output goes to /var/log/stead/exec-<pid>.log"`
}

// ExecEvent is one event of an exec stream (Server-Sent Events, event name
// = Type). Data is the raw output chunk for stdout/stderr; on the wire it
// is text, with the exact bytes in base64 beside it only when they are not
// valid UTF-8 (see ExecEventJSON).
type ExecEvent struct {
	Type     string
	Data     []byte
	ExitCode int
	Signal   string
	Pid      int
	Error    string
	TimedOut bool
}

// ExecResult is the buffered result of an exec. Stdout and Stderr are the
// exact bytes; on the wire they are text, with the bytes in base64 beside
// them only when they are not valid UTF-8 (see ExecResultJSON).
type ExecResult struct {
	ExitCode int
	Signal   string
	Stdout   []byte
	Stderr   []byte
	Pid      int
	TimedOut bool
	// LogPath is where a background exec writes its output (in the sandbox).
	LogPath string
	// Truncated is set when the command wrote more to stdout or stderr
	// than the server buffers for one exec (16 MiB each); the output was
	// cut at that size and the rest dropped. Use ExecStream for commands
	// with a lot of output.
	Truncated bool
}

// FileInfo describes one entry of a sandbox's file system.
type FileInfo struct {
	Name    string    `json:"name" doc:"Base name of the entry"`
	Path    string    `json:"path" doc:"Absolute path inside the sandbox"`
	Type    string    `json:"type" enum:"file,dir,symlink,other" doc:"Kind of entry"`
	Size    int64     `json:"size" doc:"Size in bytes"`
	Mode    uint32    `json:"mode" doc:"Permission bits (octal as a number)"`
	UID     int       `json:"uid" doc:"Owner user id as the sandbox sees it"`
	GID     int       `json:"gid" doc:"Owner group id as the sandbox sees it"`
	ModTime time.Time `json:"mod_time" doc:"Last modification time (RFC 3339)"`
	Target  string    `json:"target,omitempty" doc:"symlink target"`
}

// Template is a root filesystem that sandboxes are created from.
type Template struct {
	ID        string    `json:"id" doc:"Unique id"`
	Kind      string    `json:"kind" enum:"host,oci" doc:"Kind"`
	Source    string    `json:"source" doc:"Where it came from"`
	Digest    string    `json:"digest,omitempty" doc:"Content digest (hex)"`
	SizeBytes int64     `json:"size_bytes" doc:"Size of the template's files in bytes"`
	CreatedAt time.Time `json:"created_at" doc:"When it was created (RFC 3339)"`
	// OnDemand marks the host template before its first use: it is
	// available, and the first create from it builds it (size and
	// created_at are then set).
	OnDemand bool `json:"on_demand,omitempty" doc:"the host template, not built yet: the first create from it builds it"`
}

// ImportTemplateRequest imports an OCI image as a template.
type ImportTemplateRequest struct {
	ID     string `json:"id" doc:"Template id to create"`
	Source string `json:"source" doc:"Image reference (registry), oci-layout:/path[:tag] or docker-archive:/path.tar"`
}

// Info describes the daemon.
type Info struct {
	Version       string         `json:"version" doc:"Version number, growing by one per change"`
	Pool          string         `json:"pool" doc:"Storage pool driver (btrfs or dir)"`
	DataDir       string         `json:"data_dir" doc:"The daemon's data directory"`
	Runtime       string         `json:"runtime" doc:"Sandbox runtime"`
	CgroupVersion int            `json:"cgroup_version" doc:"cgroup version of the host (1 or 2)"`
	InstanceTypes []InstanceType `json:"instance_types" doc:"Instance types and the limits each sets"`
	Persistence   []string       `json:"persistence" doc:"What survives stop/start and what does not"`
	PoolCapacity  *PoolCapacity  `json:"pool_capacity,omitempty" doc:"The storage pool's size and fill level"`
}

// PoolCapacity is the storage pool's size, fill level and what the daemon
// has promised out of it.
type PoolCapacity struct {
	SizeBytes        int64   `json:"size_bytes" doc:"Size of the file system that holds the pool"`
	UsedBytes        int64   `json:"used_bytes" doc:"In use on that file system"`
	ReserveBytes     int64   `json:"reserve_bytes" doc:"Kept back from sandboxes and volumes for the daemon's own writes, stops and starts"`
	UsableBytes      int64   `json:"usable_bytes" doc:"size - reserve: what sandboxes, volumes, snapshots and templates may hold together"`
	DatasetsBytes    int64   `json:"datasets_bytes" doc:"What they hold together (btrfs: as of the last commit, at most 30 s old); -1 when the pool cannot tell"`
	Enforced         bool    `json:"enforced" doc:"Whether the pool stops writes at usable_bytes (btrfs with quotas); a dir pool enforces no disk limit"`
	CommittedBytes   int64   `json:"committed_bytes" doc:"Disk quotas of live sandboxes and volumes, added up"`
	CommitLimitBytes int64   `json:"commit_limit_bytes" doc:"overcommit x usable: creates, resizes and volumes past it are refused"`
	Overcommit       float64 `json:"overcommit" doc:"stead serve --pool-overcommit"`
	Fill             float64 `json:"fill" doc:"How full the pool is, 0 to 1 (the daemon warns at 0.85 and 0.95)"`
}

// MkdirRequest creates a directory in a sandbox.
type MkdirRequest struct {
	Path    string `json:"path" minLength:"1" doc:"Absolute path inside the sandbox"`
	Parents bool   `json:"parents,omitempty" doc:"Create missing parents; no error if it exists"`
}

// RenameRequest renames (moves) a file or directory in a sandbox.
type RenameRequest struct {
	From string `json:"from" minLength:"1" doc:"Absolute source path inside the sandbox"`
	To   string `json:"to" minLength:"1" doc:"Absolute destination path inside the sandbox"`
}

// PTYControl is a JSON text message on a PTY websocket. The client sends
// {"type":"resize","rows":N,"cols":N}; the server sends
// {"type":"exit","exit_code":N} when the process has exited, then closes.
type PTYControl struct {
	Type     string `json:"type" enum:"resize,exit" doc:"Kind of entry"`
	Rows     uint16 `json:"rows,omitempty" doc:"Terminal height in rows"`
	Cols     uint16 `json:"cols,omitempty" doc:"Terminal width in columns"`
	ExitCode int    `json:"exit_code" doc:"exit: the process's exit code"`
	Error    string `json:"error,omitempty" doc:"What went wrong, if anything"`
}

// Health is the body of GET /healthz.
type Health struct {
	Status  string `json:"status" doc:"ok"`
	Version string `json:"version,omitempty" doc:"Version number, growing by one per change"`
}

// Checkpoint is one version of a checkpoint document: a named JSON document
// of a sandbox (and of a named agent within it) kept outside the sandbox.
type Checkpoint struct {
	Name      string    `json:"name" doc:"Name"`
	Agent     string    `json:"agent,omitempty" doc:"Named agent within the sandbox; empty for the default agent"`
	Version   int64     `json:"version" doc:"1, 2, 3 ... per document"`
	CreatedAt time.Time `json:"created_at" doc:"When it was created (RFC 3339)"`
	Principal string    `json:"principal" doc:"Id of the API key that wrote this version"`
	// PrincipalKind is "api-key", "admin" or "sandbox-agent" (empty for
	// versions written before it was recorded).
	PrincipalKind string `json:"principal_kind,omitempty" doc:"Kind of writer: api-key, admin or sandbox-agent"`
	Run           string `json:"run,omitempty" doc:"Run id given by the writer"`
	Note          string `json:"note,omitempty" doc:"Further provenance, e.g. rollback from 3"`
	// Body is the JSON document; GET of a document returns it, puts and
	// version lists leave it out.
	Body json.RawMessage `json:"body,omitempty" doc:"Body is the JSON document; GET of a document returns it, puts and version lists leave it out."`
}

// CheckpointInfo describes a checkpoint document.
type CheckpointInfo struct {
	Name     string          `json:"name" doc:"Name"`
	Agent    string          `json:"agent,omitempty" doc:"Agent name (several agents may share a sandbox)"`
	Version  int64           `json:"version" doc:"Latest version; 0 while only a schema is set"`
	Oldest   int64           `json:"oldest" doc:"Oldest version still kept (0 when there is none)"`
	Versions int             `json:"versions" doc:"Number of versions kept"`
	Keep     int             `json:"keep" doc:"History depth: at most this many versions are kept"`
	Schema   json.RawMessage `json:"schema,omitempty" doc:"JSON Schema every write must pass"`
	// Policy is the document's governance.
	Policy    CheckpointPolicy `json:"policy" doc:"Policy is the document's governance."`
	CreatedAt time.Time        `json:"created_at" doc:"When it was created (RFC 3339)"`
	UpdatedAt time.Time        `json:"updated_at" doc:"When it last changed (RFC 3339)"`
}

// Who may write or read a checkpoint document (CheckpointAccess.Who).
const (
	AccessAny   = "any"   // every principal of the tenant (the default)
	AccessAdmin = "admin" // admin API keys only
	AccessAgent = "agent" // the sandbox's own agent token only
	AccessKeys  = "keys"  // the listed API key ids only
)

// Mutability of a checkpoint document (CheckpointPolicy.Mutability).
const (
	Mutable    = "mutable"     // any new version (the default)
	AppendOnly = "append-only" // new versions extend the previous one
	Immutable  = "immutable"   // version 1 only
)

// CheckpointAccess says who may write, or read, a checkpoint document.
type CheckpointAccess struct {
	Who  string   `json:"who" enum:"any,admin,agent,keys," doc:"empty or any: every principal of the tenant; admin: admin keys only; agent: the sandbox's own agent token only; keys: the listed API key ids only"`
	Keys []string `json:"keys,omitempty" maxItems:"100" doc:"API key ids admitted when who is keys"`
}

// CheckpointPolicy is a checkpoint document's governance: authority (who
// may write), scope (who may read) and mutability. History depth
// (recoverability) is CheckpointInfo.Keep; provenance is recorded with
// every version.
type CheckpointPolicy struct {
	Write      CheckpointAccess `json:"write" doc:"Authority: who may write (put, rollback, schema, delete)"`
	Read       CheckpointAccess `json:"read" doc:"Scope: who may read versions and their bodies"`
	Mutability string           `json:"mutability" enum:"mutable,append-only,immutable" doc:"mutable; append-only: each version is a JSON array starting with the previous array, or a JSON object keeping every previous key and value; immutable: version 1 only, no rollback"`
}

// SetCheckpointPolicyRequest replaces a document's policy. Empty fields
// take their defaults (who: any; mutability: mutable).
type SetCheckpointPolicyRequest struct {
	Write      CheckpointAccess `json:"write,omitempty" doc:"Who may write new versions (default: any)"`
	Read       CheckpointAccess `json:"read,omitempty" doc:"Who may read versions and their bodies (default: any)"`
	Mutability string           `json:"mutability,omitempty" enum:"mutable,append-only,immutable," doc:"mutable (default), append-only or immutable"`
	// Keep, when > 0, sets the history depth (1: no history, only the
	// latest version); 0 leaves it as it is.
	Keep int `json:"keep,omitempty" minimum:"0" maximum:"1000" doc:"History depth; 1 keeps no history; 0 or absent leaves it unchanged"`
}

// RollbackCheckpointRequest writes an earlier version's body as a new
// version.
type RollbackCheckpointRequest struct {
	Version   int64  `json:"version" minimum:"1" doc:"Version whose body becomes the new latest"`
	Run       string `json:"run,omitempty" maxLength:"256" doc:"Run id recorded with the new version"`
	IfVersion *int64 `json:"if_version,omitempty" minimum:"0" doc:"Latest version the document must have (0: none), as If-Match on a put"`
}

// Snapshot is a read-only, point-in-time copy of a sandbox's root.
type Snapshot struct {
	ID          string    `json:"id" doc:"Snapshot id (snap-...)"`
	Sandbox     string    `json:"sandbox" doc:"Id of the sandbox it was taken of"`
	SandboxName string    `json:"sandbox_name" doc:"Name of the sandbox"`
	Parent      string    `json:"parent,omitempty" doc:"The snapshot the sandbox was forked or rolled back from when this one was taken: the tree's edge"`
	Label       string    `json:"label,omitempty" doc:"Label"`
	Description string    `json:"description,omitempty" doc:"Free-text description"`
	Kind        string    `json:"kind" enum:"user,safety,fork,push,archive,pull,volume" doc:"user: asked for; safety: taken automatically before a rollback; fork: taken to fork a running sandbox; push/archive: taken for a push; pull: copied from a pushed snapshot; volume: of a volume (Sandbox then names the volume)"`
	CreatedAt   time.Time `json:"created_at" doc:"When it was created (RFC 3339)"`
	// FrozenFor is how long the sandbox's processes were frozen while it
	// was taken (0 for a stopped sandbox).
	FrozenFor string `json:"frozen_for,omitempty" doc:"FrozenFor is how long the sandbox's processes were frozen while it was taken (0 for a stopped sandbox)."`
	// Volumes are the ids of the snapshots of the sandbox's volumes taken
	// at the same instant (CreateSnapshotRequest.IncludeVolumes).
	Volumes []string `json:"volumes,omitempty" doc:"Volumes are the ids of the snapshots of the sandbox's volumes taken at the same instant (CreateSnapshotRequest.IncludeVolumes)."`
}

// CreateSnapshotRequest takes a snapshot of a sandbox.
type CreateSnapshotRequest struct {
	Label       string `json:"label,omitempty" maxLength:"200" doc:"Label"`
	Description string `json:"description,omitempty" maxLength:"4000" doc:"Free-text description"`
	// IncludeVolumes also snapshots every volume the sandbox mounts, at the
	// same frozen instant (kind "volume", parent: the sandbox's snapshot).
	IncludeVolumes bool `json:"include_volumes,omitempty" doc:"IncludeVolumes also snapshots every volume the sandbox mounts, at the same frozen instant (kind \"volume\", parent: the sandbox's snapshot)."`
}

// ForkRequest makes new sandboxes from a snapshot or a sandbox.
type ForkRequest struct {
	Count int `json:"count,omitempty" minimum:"0" maximum:"50" doc:"How many sandboxes (default 1)"`
	// Name names the new sandbox; with Count > 1 the forks are Name-1,
	// Name-2, ... Default: each fork is named by its id.
	Name    string `json:"name,omitempty" maxLength:"60" doc:"Name of the new sandbox (with count > 1: name-1, name-2, ...); default its id"`
	NoStart bool   `json:"no_start,omitempty" doc:"Create them stopped"`
	// Volumes replace the source's volume mount at the same path, or add
	// one; the source's other mounts are kept.
	Volumes []VolumeMount `json:"volumes,omitempty" doc:"Mounts replacing the source's mount at the same path, or added"`
}

// RollbackRequest returns a sandbox's files to a snapshot.
type RollbackRequest struct {
	Snapshot string `json:"snapshot" minLength:"1" doc:"Snapshot id (of this sandbox or any of the tenant's)"`
}

// RollbackResult is the rolled-back sandbox and the safety snapshot of what
// the rollback replaced (roll back to it to undo).
type RollbackResult struct {
	Sandbox Sandbox  `json:"sandbox" doc:"The sandbox"`
	Safety  Snapshot `json:"safety" doc:"The snapshot taken of the sandbox just before the rollback"`
}

// Volume is a persistent volume: data independent of every sandbox,
// attachable to many sandboxes at once.
type Volume struct {
	ID        string     `json:"id" doc:"Volume id (vol-...)"`
	Name      string     `json:"name" doc:"Unique name within the tenant"`
	Tenant    string     `json:"tenant" doc:"Id of the tenant that owns it"`
	SizeBytes int64      `json:"size_bytes" doc:"Quota; writes past it fail with ENOSPC/EDQUOT inside the sandbox (0 = no limit)"`
	UsedBytes int64      `json:"used_bytes" doc:"Bytes in use"`
	State     string     `json:"state" enum:"available,deleted" doc:"Current state"`
	CreatedAt time.Time  `json:"created_at" doc:"When it was created (RFC 3339)"`
	DeletedAt *time.Time `json:"deleted_at,omitempty" doc:"When it was soft-deleted (RFC 3339); absent unless deleted"`
	PurgeAt   *time.Time `json:"purge_at,omitempty" doc:"When a soft-deleted object is destroyed for good (RFC 3339)"`
	// Origin is the id of the volume this one was restored from (its
	// pushed or local snapshot); a sandbox restore attaches it where the
	// push recorded that volume.
	Origin string `json:"origin,omitempty" doc:"id of the volume this one was restored from"`
	// AttachedTo lists the sandboxes (ids) that mount it.
	AttachedTo []string `json:"attached_to,omitempty" doc:"AttachedTo lists the sandboxes (ids) that mount it."`
}

// CreateVolumeRequest creates a volume.
type CreateVolumeRequest struct {
	Name      string `json:"name" minLength:"1" maxLength:"63" doc:"Name"`
	SizeBytes int64  `json:"size_bytes,omitempty" minimum:"0" doc:"Quota in bytes; default 10 GiB, 0 in the request means the default"`
}

// VolumeMount attaches a volume to a sandbox (at create, restore, fork, or
// to a stopped sandbox).
type VolumeMount struct {
	Volume   string `json:"volume" minLength:"1" doc:"Volume name or id"`
	SubPath  string `json:"sub_path,omitempty" doc:"Directory inside the volume to mount instead of its root, e.g. agents/a1 (created if missing)"`
	Path     string `json:"path" minLength:"1" doc:"Absolute mount point in the sandbox, e.g. /data"`
	ReadOnly bool   `json:"read_only,omitempty" doc:"Mounted read-only"`
}

// Orient is what a resuming agent must read first, as data and as
// prompt-ready text.
type Orient struct {
	Sandbox    Sandbox `json:"sandbox" doc:"The sandbox"`
	StopReason string  `json:"stop_reason,omitempty" doc:"Why the sandbox last left the running state"`
	// LastStoppedAt is when it last stopped (nil if never).
	LastStoppedAt *time.Time `json:"last_stopped_at,omitempty" doc:"LastStoppedAt is when it last stopped (nil if never)."`
	// Checkpoints are the latest versions of its checkpoint documents.
	Checkpoints []CheckpointInfo `json:"checkpoints" doc:"Checkpoints are the latest versions of its checkpoint documents."`
	// OpenTasks are its tasks still open or in progress (at most 50).
	OpenTasks []Task `json:"open_tasks" doc:"OpenTasks are its tasks still open or in progress (at most 50)."`
	// Files are the tails of the workspace notes asked for (decisions.md,
	// plan.md by default); a missing file is left out.
	Files []OrientFile `json:"files" doc:"Files are the tails of the workspace notes asked for (decisions.md, plan.md by default); a missing file is left out."`
	// Run is the most recent run of the session log, if any.
	Run *RunResume `json:"run,omitempty" doc:"Run is the most recent run of the session log, if any."`
	// RecentEvents are the last events of that run.
	RecentEvents []Event `json:"recent_events,omitempty" doc:"RecentEvents are the last events of that run."`
	// Warnings are the limits the sandbox is close to, each with where
	// the space went when it is disk.
	Warnings []OrientWarning `json:"warnings,omitempty" doc:"Warnings are the limits the sandbox is close to, each with where the space went when it is disk."`
	// LargeStateFiles are files in state directories (/data) larger than
	// the daemon's hint size: history to off-load or rotate.
	LargeStateFiles []LargeFile `json:"large_state_files,omitempty" doc:"LargeStateFiles are files in state directories (/data) larger than the daemon's hint size: history to off-load or rotate."`
	// Text renders all of the above for a model's prompt.
	Text string `json:"text" doc:"Text renders all of the above for a model's prompt."`
}

// OrientWarning is a limit warning with, for disk, the largest
// directories under the path.
type OrientWarning struct {
	LimitWarning
	LargestDirs []DiskUsageEntry `json:"largest_dirs,omitempty" doc:"The largest directories, when the warning is about disk use"`
}

// OrientFile is the tail of one workspace file.
type OrientFile struct {
	Path      string `json:"path" doc:"Absolute path inside the sandbox"`
	Tail      string `json:"tail" doc:"The file's last lines"`
	Truncated bool   `json:"truncated,omitempty" doc:"Only the last lines are included"`
}
