package store

import (
	"context"
	"time"
)

// Storage kinds metered (StorageUsage.Kind).
const (
	// StoragePool is the pool space of a sandbox's root or a volume.
	StoragePool = "pool"
	// StorageSnapshots is the pool space of local snapshots.
	StorageSnapshots = "snapshots"
	// StorageRepository is what a tenant keeps in the off-box repository.
	StorageRepository = "repository"
)

// MeterInterval is one span during which a sandbox ran. While it is open
// the meter moves Checkpoint forward every tick, so a crash of the daemon
// loses at most one tick of it; closing sets Checkpoint to the end.
// Intervals outlive their sandbox (a purge keeps what it cost).
type MeterInterval struct {
	ID        int64  `json:"id"`
	TenantID  string `json:"tenant_id"`
	SandboxID string `json:"sandbox_id"`
	// InstanceType, CPUs and MemoryBytes are the sandbox's at the start
	// (a sandbox is resized only while stopped, so they hold throughout).
	InstanceType string    `json:"instance_type"`
	CPUs         float64   `json:"cpus"`
	MemoryBytes  int64     `json:"memory_bytes"`
	Start        time.Time `json:"start"`
	// Checkpoint is the last moment the sandbox is known to have run: the
	// end of a closed interval.
	Checkpoint time.Time `json:"checkpoint"`
	Open       bool      `json:"open"`
}

// MeterFilter selects intervals for ListMeterIntervals.
type MeterFilter struct {
	// TenantID limits the result to one tenant ("" = every tenant).
	TenantID string
	// SandboxID limits the result to one sandbox ("" = every sandbox).
	SandboxID string
	// Since drops closed intervals whose Checkpoint is before it (zero:
	// none); open intervals are always kept.
	Since time.Time
	// OpenOnly keeps open intervals only.
	OpenOnly bool
}

// StorageUsage is the storage one subject used on one UTC day.
type StorageUsage struct {
	TenantID string `json:"tenant_id"`
	// Subject is the sandbox or volume id the bytes belong to ("" for the
	// tenant as a whole: its repository).
	Subject string `json:"subject"`
	// Kind is StoragePool, StorageSnapshots or StorageRepository.
	Kind string `json:"kind"`
	// Day is the UTC midnight that starts the day.
	Day time.Time `json:"day"`
	// ByteSeconds is the integral of the size over the day's metered time.
	ByteSeconds float64 `json:"byte_seconds"`
	// Bytes is the size last sampled.
	Bytes int64 `json:"bytes"`
}

// MeterStore keeps what the meter records: running intervals of sandboxes
// and storage used per day.
//
// Contract, checked by storetest:
//   - OpenMeterInterval stores an open interval with Checkpoint = Start
//     and returns it with its ID; a sandbox holds at most one open
//     interval: opening another returns the open one, unchanged.
//     errs.ErrInvalid for an empty tenant or sandbox or a zero Start.
//   - CheckpointMeterIntervals moves the Checkpoint of every open interval
//     to at (never backwards) in one transaction and returns how many
//     intervals are open.
//   - CloseMeterInterval closes the sandbox's open interval at at (not
//     before its Start, not before its Checkpoint) and returns it;
//     errs.ErrNotFound when the sandbox has none open.
//   - ListMeterIntervals is ordered by Start, then ID.
//   - AddStorageUsage adds each ByteSeconds to the row of its tenant,
//     subject, kind and day (made if absent) and sets its Bytes, all in one
//     transaction: all or nothing. Day is truncated to the UTC day.
//   - ListStorageUsage returns rows of the tenant ("" = all) from the day
//     of since on, ordered by Day, TenantID, Kind, Subject.
//   - Every write is durable when it returns.
type MeterStore interface {
	OpenMeterInterval(ctx context.Context, iv MeterInterval) (MeterInterval, error)
	CheckpointMeterIntervals(ctx context.Context, at time.Time) (int, error)
	CloseMeterInterval(ctx context.Context, sandboxID string, at time.Time) (MeterInterval, error)
	ListMeterIntervals(ctx context.Context, f MeterFilter) ([]MeterInterval, error)
	AddStorageUsage(ctx context.Context, u []StorageUsage) error
	ListStorageUsage(ctx context.Context, tenantID string, since time.Time) ([]StorageUsage, error)
}
