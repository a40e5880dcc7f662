package api

import (
	"context"
	"net/http"

	"github.com/danielgtaylor/huma/v2"

	"github.com/stead-dev/stead/client"
)

// ScheduleRef is the {sid} path parameter of one schedule (exported only
// because huma ignores unexported embedded fields).
type ScheduleRef struct {
	SID string `path:"sid" minLength:"1" maxLength:"128" doc:"Schedule id (sch-...)"`
}

// scheduleIntro opens the description of every schedule route.
const scheduleIntro = "A schedule runs an action on a sandbox at the times of a cron expression (five fields, or " +
	"@yearly, @monthly, @weekly, @daily, @hourly) read in an IANA time zone (default UTC): start (wake: start or " +
	"resume; nothing if running), stop (the service's stop hook and grace), restart (stop with the stop hook, then " +
	"start; a stopped sandbox is just started), snapshot (a local snapshot labelled sched-<id>-<time>) or push (to " +
	"the repository). Missed runs: a run time that passed while the daemon was down runs once when it is back, not " +
	"once per missed time; the schedule then continues from the next time after that moment. A deleted or archived " +
	"sandbox's runs are skipped, with the reason in last_error. "

// registerSchedules adds the schedule routes; s.op keeps them closed to
// sandbox-scoped tokens.
func (s *server) registerSchedules(b ScheduleBackend) {
	const tag = "schedules"

	create := s.op(http.MethodPost, "/v1/sandboxes/{id}/schedules", "create-schedule", "Add a schedule to a sandbox", tag, http.StatusCreated)
	create.Description = scheduleIntro + "An invalid expression or time zone is a 400 that quotes the parser; nothing is stored then."
	huma.Register(s.api, create, func(ctx context.Context, in *struct {
		SandboxRef
		Body client.CreateScheduleRequest
	}) (*out[client.Schedule], error) {
		const op = "create schedule"
		p, err := principal(ctx)
		if err != nil {
			return nil, s.fail(ctx, op, err)
		}
		sc, err := b.CreateSchedule(ctx, p.TenantID, in.ID, in.Body)
		if err != nil {
			return nil, s.fail(ctx, op, err)
		}
		return &out[client.Schedule]{Body: sc}, nil
	})

	list := s.op(http.MethodGet, "/v1/sandboxes/{id}/schedules", "list-schedules", "List a sandbox's schedules", tag, 0)
	list.Description = scheduleIntro + "Each schedule comes with its next three run times (none while disabled) and the outcome of its last run."
	huma.Register(s.api, list, func(ctx context.Context, in *struct {
		SandboxRef
		PageQuery
	}) (*out[client.Page[client.Schedule]], error) {
		const op = "list schedules"
		p, err := principal(ctx)
		if err != nil {
			return nil, s.fail(ctx, op, err)
		}
		l, err := b.ListSchedules(ctx, p.TenantID, in.ID)
		if err != nil {
			return nil, s.fail(ctx, op, err)
		}
		if l == nil {
			l = []client.Schedule{}
		}
		return pageOf(l, in.PageQuery)
	})

	all := s.op(http.MethodGet, "/v1/schedules", "list-all-schedules", "List the schedules of every sandbox of the tenant", tag, 0)
	all.Description = scheduleIntro + "A key limited to some sandboxes lists each of its sandboxes' schedules instead (GET /v1/sandboxes/{id}/schedules)."
	huma.Register(s.api, all, func(ctx context.Context, in *struct{ PageQuery }) (*out[client.Page[client.Schedule]], error) {
		const op = "list schedules"
		p, err := principal(ctx)
		if err != nil {
			return nil, s.fail(ctx, op, err)
		}
		l, err := b.ListSchedules(ctx, p.TenantID, "")
		if err != nil {
			return nil, s.fail(ctx, op, err)
		}
		if l == nil {
			l = []client.Schedule{}
		}
		return pageOf(l, in.PageQuery)
	})

	update := s.op(http.MethodPatch, "/v1/sandboxes/{id}/schedules/{sid}", "update-schedule", "Change, pause or resume a schedule", tag, 0)
	update.Description = scheduleIntro + "Sets the fields given. enabled=false pauses the schedule; enabled=true resumes it " +
		"from the next run time after now (times missed while paused are not run). A new expression or zone takes effect " +
		"from now."
	huma.Register(s.api, update, func(ctx context.Context, in *struct {
		SandboxRef
		ScheduleRef
		Body client.UpdateScheduleRequest
	}) (*out[client.Schedule], error) {
		const op = "update schedule"
		p, err := principal(ctx)
		if err != nil {
			return nil, s.fail(ctx, op, err)
		}
		sc, err := b.UpdateSchedule(ctx, p.TenantID, in.ID, in.SID, in.Body)
		if err != nil {
			return nil, s.fail(ctx, op, err)
		}
		return &out[client.Schedule]{Body: sc}, nil
	})

	del := s.op(http.MethodDelete, "/v1/sandboxes/{id}/schedules/{sid}", "delete-schedule", "Remove a schedule", tag, http.StatusNoContent)
	del.Description = scheduleIntro + "A run in progress finishes; the schedule does not run again."
	huma.Register(s.api, del, func(ctx context.Context, in *struct {
		SandboxRef
		ScheduleRef
	}) (*struct{}, error) {
		const op = "delete schedule"
		p, err := principal(ctx)
		if err != nil {
			return nil, s.fail(ctx, op, err)
		}
		if err := b.DeleteSchedule(ctx, p.TenantID, in.ID, in.SID); err != nil {
			return nil, s.fail(ctx, op, err)
		}
		return nil, nil
	})
}
