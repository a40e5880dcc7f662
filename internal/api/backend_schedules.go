package api

import (
	"context"

	"github.com/stead-dev/stead/client"
)

// ScheduleBackend keeps the sandboxes' cron schedules. NewHandler registers
// the /v1/sandboxes/{id}/schedules and /v1/schedules routes only when its
// Backend also implements this interface. The routes are closed to
// sandbox-scoped tokens: an agent does not schedule its own sandbox's stops.
//
// As with Backend, every method gets the caller's tenant; another tenant's
// sandbox or schedule is absent (errs.ErrNotFound), and so is a schedule
// of another sandbox than the one the path names. sandbox may be an id or
// a name.
type ScheduleBackend interface {
	// CreateSchedule adds a schedule to a sandbox. An invalid expression,
	// time zone or action is errs.ErrInvalid with the parser's message,
	// and nothing is stored.
	CreateSchedule(ctx context.Context, tenant, sandbox string, req client.CreateScheduleRequest) (client.Schedule, error)
	// ListSchedules returns the sandbox's schedules ("" sandbox: every
	// sandbox of the tenant), oldest first, each with its next run times.
	ListSchedules(ctx context.Context, tenant, sandbox string) ([]client.Schedule, error)
	// UpdateSchedule changes the fields req sets, with the checks of
	// CreateSchedule; a refused change changes nothing.
	UpdateSchedule(ctx context.Context, tenant, sandbox, id string, req client.UpdateScheduleRequest) (client.Schedule, error)
	// DeleteSchedule removes a schedule.
	DeleteSchedule(ctx context.Context, tenant, sandbox, id string) error
}
