package store

import (
	"context"
	"time"
)

// Schedule actions (Schedule.Action).
const (
	// ScheduleStart wakes the sandbox: start a stopped one, resume a
	// paused one; a running one is left as it is.
	ScheduleStart = "start"
	// ScheduleStop stops the sandbox (its stop hook and grace period).
	ScheduleStop = "stop"
	// ScheduleRestart stops the sandbox (stop hook, grace) and starts it
	// again; a stopped one is just started.
	ScheduleRestart = "restart"
	// ScheduleSnapshot takes a local snapshot of the sandbox.
	ScheduleSnapshot = "snapshot"
	// SchedulePush pushes a new snapshot of the sandbox to the repository.
	SchedulePush = "push"
)

// ScheduleActions are the valid Schedule.Action values.
var ScheduleActions = []string{ScheduleStart, ScheduleStop, ScheduleRestart, ScheduleSnapshot, SchedulePush}

// Outcomes of a schedule's last run (Schedule.LastResult).
const (
	ScheduleOK      = "ok"
	ScheduleFailed  = "failed"
	ScheduleSkipped = "skipped"
)

// Schedule is a cron-style action on one sandbox. The store keeps the
// expression as text: parsing it and computing NextRunAt is the caller's.
type Schedule struct {
	ID        string `json:"id"`
	TenantID  string `json:"tenant_id"`
	SandboxID string `json:"sandbox_id"` // the sandbox's id, never its name
	Cron      string `json:"cron"`
	// TZ is the IANA zone the expression is read in ("UTC" or a name).
	TZ string `json:"tz"`
	// Action is one of ScheduleActions.
	Action  string `json:"action"`
	Enabled bool   `json:"enabled"`
	// NextRunAt is when the schedule is due next (nil: never, e.g. while
	// disabled).
	NextRunAt *time.Time `json:"next_run_at,omitempty"`
	// LastRunAt, LastResult and LastError describe the last firing
	// (LastResult is ScheduleOK, ScheduleFailed or ScheduleSkipped;
	// LastError says why for the latter two).
	LastRunAt  *time.Time `json:"last_run_at,omitempty"`
	LastResult string     `json:"last_result,omitempty"`
	LastError  string     `json:"last_error,omitempty"`
	CreatedAt  time.Time  `json:"created_at"`
	UpdatedAt  time.Time  `json:"updated_at"`
}

// ScheduleStore holds the sandboxes' schedules.
//
// Contract, checked by storetest:
//   - CreateSchedule stores s (CreatedAt and UpdatedAt now when zero).
//     errs.ErrInvalid for an empty id, tenant, sandbox, cron or tz, or an
//     action not in ScheduleActions; errs.ErrNotFound when the sandbox is
//     absent or another tenant's; errs.ErrConflict for a taken id. Nothing
//     is stored then.
//   - GetSchedule, UpdateSchedule and DeleteSchedule return
//     errs.ErrNotFound for an absent id and for another tenant's.
//   - UpdateSchedule stores Cron, TZ, Action, Enabled, NextRunAt,
//     LastRunAt, LastResult, LastError and UpdatedAt (now when zero); the
//     id, tenant, sandbox and CreatedAt never change. The checks of
//     CreateSchedule on cron, tz and action apply.
//   - ListSchedules returns the tenant's schedules ("" = every tenant, for
//     the daemon), of one sandbox when sandboxID is not "", ordered by
//     CreatedAt, then ID.
//   - DueSchedules returns the enabled schedules of every tenant whose
//     NextRunAt is at or before now, ordered by NextRunAt, then ID.
//   - Purging a sandbox (DeleteSandbox) deletes its schedules in the same
//     transaction; deleting a tenant leaves none of its schedules.
//   - Times round-trip in UTC; writes are durable when they return.
type ScheduleStore interface {
	CreateSchedule(ctx context.Context, s Schedule) (Schedule, error)
	GetSchedule(ctx context.Context, tenantID, id string) (Schedule, error)
	ListSchedules(ctx context.Context, tenantID, sandboxID string) ([]Schedule, error)
	UpdateSchedule(ctx context.Context, s Schedule) (Schedule, error)
	DeleteSchedule(ctx context.Context, tenantID, id string) error
	DueSchedules(ctx context.Context, now time.Time) ([]Schedule, error)
}
