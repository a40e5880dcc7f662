package client

import "time"

// UsageQuery selects a usage report.
type UsageQuery struct {
	// By groups the rows: "day", "sandbox", or "" (the total only).
	By string `json:"by,omitempty"`
	// Since starts the report (zero: the first of the current month, UTC).
	Since time.Time `json:"since,omitzero"`
	// Until ends it (zero: now).
	Until time.Time `json:"until,omitzero"`
	// Sandbox limits the report to one sandbox (id or name).
	Sandbox string `json:"sandbox,omitempty"`
	// Tenant is the tenant to report on (admins only; "" is the caller's).
	Tenant string `json:"tenant,omitempty"`
}

// Prices are what metered usage costs, in US dollars.
type Prices struct {
	// ComputePerHour is the price of an hour of running, by instance type.
	ComputePerHour map[string]float64 `json:"compute_per_hour"`
	// CPUHour and MemoryGiBHour price a sandbox with custom limits (a
	// type not in ComputePerHour): cpus x CPUHour + GiB x MemoryGiBHour.
	CPUHour       float64 `json:"cpu_hour"`
	MemoryGiBHour float64 `json:"memory_gib_hour"`
	// LocalGBMonth is the price of a GB (10^9 bytes) kept a month (730
	// hours) in the local pool: sandbox roots, volumes, local snapshots.
	LocalGBMonth float64 `json:"local_gb_month"`
	// RepositoryGBMonth is the price of a GB kept a month in the
	// repository.
	RepositoryGBMonth float64 `json:"repository_gb_month"`
}

// UsageLine is metered usage and its cost, for a period, a day or a
// sandbox.
type UsageLine struct {
	// Day is the UTC day (YYYY-MM-DD) of a by-day row.
	Day string `json:"day,omitempty"`
	// Sandbox and SandboxName name the sandbox of a by-sandbox row (the
	// name is empty once the sandbox is purged); Subject is a volume id
	// for a volume's storage row.
	Sandbox      string `json:"sandbox,omitempty"`
	SandboxName  string `json:"sandbox_name,omitempty"`
	Subject      string `json:"subject,omitempty"`
	InstanceType string `json:"instance_type,omitempty"`
	// RunningSeconds is the time spent running (never paused or stopped).
	RunningSeconds float64 `json:"running_seconds"`
	// ComputeSeconds splits RunningSeconds by instance type.
	ComputeSeconds   map[string]float64 `json:"compute_seconds,omitempty"`
	MemoryGiBSeconds float64            `json:"memory_gib_seconds"`
	// PoolGBHours: sandbox roots and volumes; SnapshotGBHours: local
	// snapshots; RepositoryGBHours: the tenant's repository.
	PoolGBHours       float64 `json:"pool_gb_hours"`
	SnapshotGBHours   float64 `json:"snapshot_gb_hours"`
	RepositoryGBHours float64 `json:"repository_gb_hours"`
	ComputeCost       float64 `json:"compute_cost"`
	StorageCost       float64 `json:"storage_cost"`
	Cost              float64 `json:"cost"`
}

// AlwaysOn compares what the tenant paid with auto-stop against what it
// would have paid had every sandbox run its whole life (from its creation,
// or the start of the report, to its deletion, or the end of the report).
type AlwaysOn struct {
	// RunningSeconds is the life of the sandboxes in the period: the
	// running time they would have had.
	RunningSeconds float64 `json:"running_seconds"`
	// Cost is what always-on would have cost (its compute, plus the same
	// storage).
	Cost float64 `json:"cost"`
	// ActualCost is what the period cost (Total.Cost).
	ActualCost float64 `json:"actual_cost"`
	// Saving is Cost - ActualCost; SavingPercent is it as a percentage of
	// Cost (0 when Cost is 0).
	Saving        float64 `json:"saving"`
	SavingPercent float64 `json:"saving_percent"`
}

// UsageReport is a tenant's metered usage and its cost.
type UsageReport struct {
	Tenant   string    `json:"tenant"`
	Since    time.Time `json:"since"`
	Until    time.Time `json:"until"`
	By       string    `json:"by,omitempty"`
	Currency string    `json:"currency"`
	Prices   Prices    `json:"prices"`
	// Interval is the meter's checkpoint interval: at most this much
	// running time is lost to a crash of the daemon.
	Interval string      `json:"interval"`
	Total    UsageLine   `json:"total"`
	Rows     []UsageLine `json:"rows"`
	AlwaysOn AlwaysOn    `json:"always_on"`
}
