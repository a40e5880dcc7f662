package client

import (
	"context"
	"net/http"
	"net/url"
)

// schedulesPath returns the escaped path of a sandbox's schedules, or of
// one of them when id is not "".
func schedulesPath(sandbox, id string) string {
	p := "/v1/sandboxes/" + url.PathEscape(sandbox) + "/schedules"
	if id != "" {
		p += "/" + url.PathEscape(id)
	}
	return p
}

// CreateSchedule adds a schedule to a sandbox. An invalid cron expression
// or time zone is a 400 (IsInvalid) that quotes the parser, and nothing is
// stored.
func (c *Client) CreateSchedule(ctx context.Context, sandbox string, req CreateScheduleRequest) (Schedule, error) {
	var s Schedule
	err := c.do(ctx, http.MethodPost, schedulesPath(sandbox, ""), nil, req, &s)
	return s, err
}

// ListSchedules lists a sandbox's schedules, each with its next run times.
func (c *Client) ListSchedules(ctx context.Context, sandbox string) ([]Schedule, error) {
	list, err := listAll[Schedule](ctx, c, schedulesPath(sandbox, ""), nil)
	return list, err
}

// ListAllSchedules lists the schedules of every sandbox of the tenant.
func (c *Client) ListAllSchedules(ctx context.Context) ([]Schedule, error) {
	list, err := listAll[Schedule](ctx, c, "/v1/schedules", nil)
	return list, err
}

// UpdateSchedule changes a sandbox's schedule id (enable, disable, a new
// expression, zone or action).
func (c *Client) UpdateSchedule(ctx context.Context, sandbox, id string, req UpdateScheduleRequest) (Schedule, error) {
	var s Schedule
	err := c.do(ctx, http.MethodPatch, schedulesPath(sandbox, id), nil, req, &s)
	return s, err
}

// DeleteSchedule removes a sandbox's schedule id.
func (c *Client) DeleteSchedule(ctx context.Context, sandbox, id string) error {
	return c.do(ctx, http.MethodDelete, schedulesPath(sandbox, id), nil, nil, nil)
}
