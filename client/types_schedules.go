package client

import "time"

// Schedule is a cron-style action on one sandbox: start (wake), stop,
// restart, snapshot or push at the times a cron expression names.
//
// Missed runs: a schedule whose run time passed while the daemon was down
// runs once when the daemon is back (not once per missed time), then
// continues from the next run time after that moment.
type Schedule struct {
	ID          string `json:"id" doc:"Unique id"`
	Sandbox     string `json:"sandbox" doc:"The sandbox's id"`
	SandboxName string `json:"sandbox_name,omitempty" doc:"Name of the sandbox"`
	Cron        string `json:"cron" doc:"Five-field cron expression (minute hour day-of-month month day-of-week) or @yearly, @monthly, @weekly, @daily, @hourly"`
	TZ          string `json:"tz" doc:"IANA time zone the expression is read in (UTC when none was given)"`
	Action      string `json:"action" enum:"start,stop,restart,snapshot,push" doc:"What was done"`
	Enabled     bool   `json:"enabled" doc:"Whether it is on"`
	// NextRuns are the next run times (up to 3; none while disabled).
	NextRuns   []time.Time `json:"next_runs" doc:"The next run times, up to 3 (empty while disabled)"`
	LastRunAt  *time.Time  `json:"last_run_at,omitempty" doc:"When the schedule last ran (RFC 3339)"`
	LastResult string      `json:"last_result,omitempty" doc:"ok, failed or skipped"`
	LastError  string      `json:"last_error,omitempty" doc:"Why the last run failed or was skipped"`
	CreatedAt  time.Time   `json:"created_at" doc:"When it was created (RFC 3339)"`
	UpdatedAt  time.Time   `json:"updated_at" doc:"When it last changed (RFC 3339)"`
}

// CreateScheduleRequest adds a schedule to a sandbox.
type CreateScheduleRequest struct {
	Cron   string `json:"cron" minLength:"1" maxLength:"200" doc:"Five-field cron expression or @yearly, @monthly, @weekly, @daily, @hourly"`
	TZ     string `json:"tz,omitempty" maxLength:"64" doc:"IANA time zone, e.g. Europe/Berlin (default UTC)"`
	Action string `json:"action" enum:"start,stop,restart,snapshot,push" doc:"start wakes (starts or resumes), stop runs the stop hook, restart stops (stop hook) then starts, snapshot takes a local snapshot, push pushes to the repository"`
	// Disabled adds the schedule paused.
	Disabled bool `json:"disabled,omitempty" doc:"Add it paused (enable it later with PATCH enabled=true)"`
}

// UpdateScheduleRequest changes a schedule; absent fields stay as they are.
type UpdateScheduleRequest struct {
	Cron    *string `json:"cron,omitempty" maxLength:"200" doc:"Cron expression (5 fields)"`
	TZ      *string `json:"tz,omitempty" maxLength:"64" doc:"IANA time zone of the cron expression (default UTC)"`
	Action  *string `json:"action,omitempty" enum:"start,stop,restart,snapshot,push" doc:"What was done"`
	Enabled *bool   `json:"enabled,omitempty" doc:"false pauses the schedule, true resumes it from the next run time after now (missed times are not run)"`
}
