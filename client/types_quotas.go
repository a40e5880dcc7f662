package client

import "time"

// Quota names, as QuotaLimits and QuotaUsage spell them and as a refusal's
// problem document names them (its "quota" member).
const (
	QuotaRunningSandboxes = "running_sandboxes"
	QuotaCPUs             = "cpus"
	QuotaMemoryBytes      = "memory_bytes"
	QuotaDiskBytes        = "disk_bytes"
	QuotaVolumes          = "volumes"
	QuotaRepositoryBytes  = "repository_bytes"
	QuotaSnapshots        = "snapshots"
	QuotaStateBytes       = "state_bytes"
)

// QuotaLimits are a tenant's limits. A zero field is no limit.
type QuotaLimits struct {
	RunningSandboxes int64   `json:"running_sandboxes,omitempty" doc:"Sandboxes running or paused at once"`
	CPUs             float64 `json:"cpus,omitempty" doc:"CPU cores of the running and paused sandboxes together"`
	MemoryBytes      int64   `json:"memory_bytes,omitempty" doc:"Memory of the running and paused sandboxes together"`
	DiskBytes        int64   `json:"disk_bytes,omitempty" doc:"Disk promised in the pool: disk quotas of live sandboxes (not deleted, not archived) plus sizes of live volumes"`
	Volumes          int64   `json:"volumes,omitempty" doc:"Live (not deleted) volumes"`
	RepositoryBytes  int64   `json:"repository_bytes,omitempty" doc:"What the tenant's pushes keep in the repository; a push is refused once it is reached"`
	Snapshots        int64   `json:"snapshots,omitempty" doc:"Local snapshots (of sandboxes and volumes)"`
	StateBytes       int64   `json:"state_bytes,omitempty" doc:"State kept outside the sandboxes: checkpoint versions, tasks, observations, key-value values, session events"`
}

// QuotaUsage is what a tenant holds now, counted as its quotas count.
type QuotaUsage struct {
	RunningSandboxes int64   `json:"running_sandboxes" doc:"Running or paused sandboxes"`
	CPUs             float64 `json:"cpus" doc:"CPU limit in cores (fractions allowed)"`
	MemoryBytes      int64   `json:"memory_bytes" doc:"Memory limit in bytes"`
	DiskBytes        int64   `json:"disk_bytes" doc:"Disk quota in bytes"`
	Volumes          int64   `json:"volumes" doc:"Persistent volumes mounted in the sandbox"`
	RepositoryBytes  int64   `json:"repository_bytes" doc:"Bytes its pushes keep in the repository"`
	Snapshots        int64   `json:"snapshots" doc:"Local snapshots"`
	StateBytes       int64   `json:"state_bytes" doc:"Bytes of agent state (checkpoints, sessions, tasks)"`
}

// TenantQuotas are a tenant's quotas with its usage.
type TenantQuotas struct {
	Tenant string      `json:"tenant" doc:"Id of the tenant that owns it"`
	Limits QuotaLimits `json:"limits" doc:"The limits; an absent (zero) field is no limit"`
	Usage  QuotaUsage  `json:"usage" doc:"What the tenant holds now"`
	// RepositoryKnown is false when the repository's usage could not be
	// read (none configured, or out of reach): Usage.RepositoryBytes is 0
	// then.
	RepositoryKnown bool       `json:"repository_known" doc:"False when the repository usage could not be read (none configured or out of reach)"`
	UpdatedAt       *time.Time `json:"updated_at,omitempty" doc:"When an admin last set the quotas"`
	Note            string     `json:"note" doc:"How the quotas are enforced"`
}

// SetQuotasRequest changes some of a tenant's limits. An absent (or null)
// field leaves its limit as it is; 0 clears it (no limit). A limit below
// the current usage is accepted: it refuses further growth only, and takes
// nothing away.
type SetQuotasRequest struct {
	RunningSandboxes *int64   `json:"running_sandboxes,omitempty" minimum:"0" doc:"Sandboxes running or paused at once (0: no limit)"`
	CPUs             *float64 `json:"cpus,omitempty" minimum:"0" doc:"CPU cores of running and paused sandboxes together (0: no limit)"`
	MemoryBytes      *int64   `json:"memory_bytes,omitempty" minimum:"0" doc:"Memory of running and paused sandboxes together (0: no limit)"`
	DiskBytes        *int64   `json:"disk_bytes,omitempty" minimum:"0" doc:"Disk promised to live sandboxes and volumes (0: no limit)"`
	Volumes          *int64   `json:"volumes,omitempty" minimum:"0" doc:"Live volumes (0: no limit)"`
	RepositoryBytes  *int64   `json:"repository_bytes,omitempty" minimum:"0" doc:"Bytes kept in the repository by the tenant's pushes (0: no limit)"`
	Snapshots        *int64   `json:"snapshots,omitempty" minimum:"0" doc:"Local snapshots (0: no limit)"`
	StateBytes       *int64   `json:"state_bytes,omitempty" minimum:"0" doc:"Bytes of state outside the sandboxes: checkpoint versions, tasks, observations, key-value values, session events (0: no limit)"`
}
