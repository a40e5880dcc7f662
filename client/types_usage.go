package client

import "time"

// UsageQuery selects a usage report.
type UsageQuery struct {
	// By groups the rows: "day", "sandbox", or "" (the total only).
	By string `json:"by,omitempty" doc:"By groups the rows: \"day\", \"sandbox\", or \"\" (the total only)."`
	// Since starts the report (zero: the first of the current month, UTC).
	Since time.Time `json:"since,omitzero" doc:"Since starts the report (zero: the first of the current month, UTC)."`
	// Until ends it (zero: now).
	Until time.Time `json:"until,omitzero" doc:"Until ends it (zero: now)."`
	// Sandbox limits the report to one sandbox (id or name).
	Sandbox string `json:"sandbox,omitempty" doc:"Sandbox limits the report to one sandbox (id or name)."`
	// Tenant is the tenant to report on (admins only; "" is the caller's).
	Tenant string `json:"tenant,omitempty" doc:"Tenant is the tenant to report on (admins only; \"\" is the caller's)."`
}

// Prices are what metered usage costs, in US dollars.
type Prices struct {
	// ComputePerHour is the price of an hour of running, by instance type.
	ComputePerHour map[string]float64 `json:"compute_per_hour" doc:"ComputePerHour is the price of an hour of running, by instance type."`
	// CPUHour and MemoryGiBHour price a sandbox with custom limits (a
	// type not in ComputePerHour): cpus x CPUHour + GiB x MemoryGiBHour.
	CPUHour       float64 `json:"cpu_hour" doc:"CPUHour and MemoryGiBHour price a sandbox with custom limits (a type not in ComputePerHour): cpus x CPUHour + GiB x MemoryGiBHour."`
	MemoryGiBHour float64 `json:"memory_gib_hour" doc:"Price of one GiB of memory for an hour"`
	// LocalGBMonth is the price of a GB (10^9 bytes) kept a month (730
	// hours) in the local pool: sandbox roots, volumes, local snapshots.
	LocalGBMonth float64 `json:"local_gb_month" doc:"LocalGBMonth is the price of a GB (10^9 bytes) kept a month (730 hours) in the local pool: sandbox roots, volumes, local snapshots."`
	// RepositoryGBMonth is the price of a GB kept a month in the
	// repository.
	RepositoryGBMonth float64 `json:"repository_gb_month" doc:"RepositoryGBMonth is the price of a GB kept a month in the repository."`
}

// UsageLine is metered usage and its cost, for a period, a day or a
// sandbox.
type UsageLine struct {
	// Day is the UTC day (YYYY-MM-DD) of a by-day row.
	Day string `json:"day,omitempty" doc:"Day is the UTC day (YYYY-MM-DD) of a by-day row."`
	// Sandbox and SandboxName name the sandbox of a by-sandbox row (the
	// name is empty once the sandbox is purged); Subject is a volume id
	// for a volume's storage row.
	Sandbox      string `json:"sandbox,omitempty" doc:"Sandbox and SandboxName name the sandbox of a by-sandbox row (the name is empty once the sandbox is purged); Subject is a volume id for a volume's storage row."`
	SandboxName  string `json:"sandbox_name,omitempty" doc:"Name of the sandbox"`
	Subject      string `json:"subject,omitempty" doc:"What the line is about (a sandbox, a volume, the tenant)"`
	InstanceType string `json:"instance_type,omitempty" doc:"Instance type (small, medium, large ...) that sets the default limits"`
	// RunningSeconds is the time spent running (never paused or stopped).
	RunningSeconds float64 `json:"running_seconds" doc:"RunningSeconds is the time spent running (never paused or stopped)."`
	// ComputeSeconds splits RunningSeconds by instance type.
	ComputeSeconds   map[string]float64 `json:"compute_seconds,omitempty" doc:"ComputeSeconds splits RunningSeconds by instance type."`
	MemoryGiBSeconds float64            `json:"memory_gib_seconds" doc:"Memory used, in GiB-seconds"`
	// PoolGBHours: sandbox roots and volumes; SnapshotGBHours: local
	// snapshots; RepositoryGBHours: the tenant's repository.
	PoolGBHours       float64 `json:"pool_gb_hours" doc:"PoolGBHours: sandbox roots and volumes; SnapshotGBHours: local snapshots; RepositoryGBHours: the tenant's repository."`
	SnapshotGBHours   float64 `json:"snapshot_gb_hours" doc:"Snapshot storage, in GB-hours"`
	RepositoryGBHours float64 `json:"repository_gb_hours" doc:"Repository storage, in GB-hours"`
	ComputeCost       float64 `json:"compute_cost" doc:"Cost of compute"`
	StorageCost       float64 `json:"storage_cost" doc:"Cost of storage"`
	Cost              float64 `json:"cost" doc:"Total cost"`
}

// AlwaysOn compares what the tenant paid with auto-stop against what it
// would have paid had every sandbox run its whole life (from its creation,
// or the start of the report, to its deletion, or the end of the report).
type AlwaysOn struct {
	// RunningSeconds is the life of the sandboxes in the period: the
	// running time they would have had.
	RunningSeconds float64 `json:"running_seconds" doc:"RunningSeconds is the life of the sandboxes in the period: the running time they would have had."`
	// Cost is what always-on would have cost (its compute, plus the same
	// storage).
	Cost float64 `json:"cost" doc:"Cost is what always-on would have cost (its compute, plus the same storage)."`
	// ActualCost is what the period cost (Total.Cost).
	ActualCost float64 `json:"actual_cost" doc:"ActualCost is what the period cost (Total.Cost)."`
	// Saving is Cost - ActualCost; SavingPercent is it as a percentage of
	// Cost (0 when Cost is 0).
	Saving        float64 `json:"saving" doc:"Saving is Cost - ActualCost; SavingPercent is it as a percentage of Cost (0 when Cost is 0)."`
	SavingPercent float64 `json:"saving_percent" doc:"Percent saved against running always on"`
}

// UsageReport is a tenant's metered usage and its cost.
type UsageReport struct {
	Tenant   string    `json:"tenant" doc:"Id of the tenant that owns it"`
	Since    time.Time `json:"since" doc:"Start of the reported period (RFC 3339)"`
	Until    time.Time `json:"until" doc:"End of the reported period (RFC 3339)"`
	By       string    `json:"by,omitempty" doc:"How the rows are grouped"`
	Currency string    `json:"currency" doc:"Currency of the amounts (e.g. USD)"`
	Prices   Prices    `json:"prices" doc:"Prices the costs were computed with"`
	// Interval is the meter's checkpoint interval: at most this much
	// running time is lost to a crash of the daemon.
	Interval string      `json:"interval" doc:"Interval is the meter's checkpoint interval: at most this much running time is lost to a crash of the daemon."`
	Total    UsageLine   `json:"total" doc:"Total"`
	Rows     []UsageLine `json:"rows" doc:"One line per group"`
	AlwaysOn AlwaysOn    `json:"always_on" doc:"What running always on would have cost"`
}
