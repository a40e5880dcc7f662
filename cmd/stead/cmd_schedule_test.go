package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stead-dev/stead/client"
	"github.com/stead-dev/stead/internal/api"
	"github.com/stead-dev/stead/internal/errs"
)

// scheduleBackend is an in-memory api.ScheduleBackend for the CLI tests:
// sandbox "missing" is absent, a cron with fewer than five fields is
// refused as the daemon's parser refuses it.
type scheduleBackend struct {
	*cliBackend
	mu   sync.Mutex
	list []client.Schedule
	reqs []client.CreateScheduleRequest
}

var _ api.ScheduleBackend = (*scheduleBackend)(nil)

func (b *scheduleBackend) CreateSchedule(_ context.Context, _, sandbox string, req client.CreateScheduleRequest) (client.Schedule, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.reqs = append(b.reqs, req)
	if sandbox == "missing" {
		return client.Schedule{}, fmt.Errorf("sandbox %s: %w", sandbox, errs.ErrNotFound)
	}
	if !strings.HasPrefix(req.Cron, "@") && len(strings.Fields(req.Cron)) != 5 {
		return client.Schedule{}, fmt.Errorf("cron expression %q has %d fields, want 5: %w", req.Cron, len(strings.Fields(req.Cron)), errs.ErrInvalid)
	}
	tz := req.TZ
	if tz == "" {
		tz = "UTC"
	}
	sc := client.Schedule{ID: fmt.Sprintf("sch-%d", len(b.list)+1), Sandbox: "sb-1", SandboxName: sandbox, Cron: req.Cron, TZ: tz,
		Action: req.Action, Enabled: !req.Disabled, NextRuns: []time.Time{}}
	if sc.Enabled {
		sc.NextRuns = []time.Time{
			time.Date(2027, 1, 1, 2, 0, 0, 0, time.UTC), time.Date(2027, 2, 1, 2, 0, 0, 0, time.UTC), time.Date(2027, 3, 1, 2, 0, 0, 0, time.UTC)}
	}
	b.list = append(b.list, sc)
	return sc, nil
}

func (b *scheduleBackend) ListSchedules(_ context.Context, _, sandbox string) ([]client.Schedule, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if sandbox == "missing" {
		return nil, fmt.Errorf("sandbox %s: %w", sandbox, errs.ErrNotFound)
	}
	var out []client.Schedule
	for _, sc := range b.list {
		if sandbox == "" || sc.SandboxName == sandbox {
			out = append(out, sc)
		}
	}
	return out, nil
}

func (b *scheduleBackend) UpdateSchedule(_ context.Context, _, sandbox, id string, req client.UpdateScheduleRequest) (client.Schedule, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for i, sc := range b.list {
		if sc.ID == id && sc.SandboxName == sandbox {
			if req.Enabled != nil {
				b.list[i].Enabled = *req.Enabled
			}
			return b.list[i], nil
		}
	}
	return client.Schedule{}, fmt.Errorf("schedule %s: %w", id, errs.ErrNotFound)
}

func (b *scheduleBackend) DeleteSchedule(_ context.Context, _, sandbox, id string) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	for i, sc := range b.list {
		if sc.ID == id && sc.SandboxName == sandbox {
			b.list = append(b.list[:i], b.list[i+1:]...)
			return nil
		}
	}
	return fmt.Errorf("schedule %s: %w", id, errs.ErrNotFound)
}

// TestScheduleCommands: add sends the flags and prints the next runs in
// the schedule's zone; ls shows next runs (or paused) per schedule; pause
// and resume flip enabled; rm removes; bad input exits 2 (usage) or 1 (refused by
// the daemon) and says why.
func TestScheduleCommands(t *testing.T) {
	b := &scheduleBackend{cliBackend: &cliBackend{}}
	srv := httptest.NewServer(api.NewHandler(b, api.Options{Logger: slog.New(slog.DiscardHandler)}))
	t.Cleanup(srv.Close)

	out, _ := mustStead(t, srv, "schedule", "add", "agent-1", "--cron", "0 3 1 * *", "--action", "restart", "--tz", "Europe/Berlin")
	if got := b.reqs[0]; got != (client.CreateScheduleRequest{Cron: "0 3 1 * *", TZ: "Europe/Berlin", Action: "restart"}) {
		t.Fatalf("add sent %+v", got)
	}
	if !strings.Contains(out, "schedule sch-1 added: restart of agent-1") || !strings.Contains(out, "2027-01-01 03:00 CET, 2027-02-01 03:00 CET") {
		t.Fatalf("add printed %q", out)
	}
	mustStead(t, srv, "schedule", "add", "db", "--cron", "@daily", "--action", "snapshot", "--disabled")
	out, _ = mustStead(t, srv, "schedule", "ls")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 3 || !strings.HasPrefix(lines[0], "ID") || !strings.Contains(lines[0], "NEXT RUNS") ||
		!strings.Contains(lines[1], "agent-1") || strings.Count(lines[1], "CET") != 3 ||
		!strings.Contains(lines[2], "db") || !strings.Contains(lines[2], "paused") {
		t.Fatalf("ls:\n%s", out)
	}
	out, _ = mustStead(t, srv, "schedule", "ls", "db", "--json")
	var list []client.Schedule
	if err := json.Unmarshal([]byte(out), &list); err != nil || len(list) != 1 || list[0].ID != "sch-2" {
		t.Fatalf("ls db --json: %q %v", out, err)
	}
	if out, _ := mustStead(t, srv, "schedule", "resume", "db", "sch-2"); !strings.Contains(out, "schedule sch-2 resumed") {
		t.Fatalf("resume: %q", out)
	}
	if out, _ := mustStead(t, srv, "schedule", "pause", "agent-1", "sch-1"); out != "schedule sch-1 paused\n" || b.list[0].Enabled {
		t.Fatalf("pause: %q %+v", out, b.list[0])
	}
	if out, _ := mustStead(t, srv, "schedule", "rm", "agent-1", "sch-1"); out != "schedule sch-1 removed\n" || len(b.list) != 1 {
		t.Fatalf("rm: %q %+v", out, b.list)
	}

	for _, tc := range []struct {
		args []string
		code int
		says string
	}{
		{[]string{"schedule"}, exitOK, "cron"},
		{[]string{"schedule", "add", "agent-1", "--action", "stop"}, exitUsage, "needs --cron and --action"},
		{[]string{"schedule", "add"}, exitUsage, "takes 1"},
		{[]string{"schedule", "add", "agent-1", "--cron", "0 3 1 *", "--action", "stop"}, exitError, "has 4 fields, want 5"},
		{[]string{"schedule", "add", "agent-1", "--cron", "@daily", "--action", "reboot"}, exitError, "action"},
		{[]string{"schedule", "add", "missing", "--cron", "@daily", "--action", "stop"}, exitNotFound, "missing"},
		{[]string{"schedule", "rm", "agent-1"}, exitUsage, "takes 2"},
		{[]string{"schedule", "rm", "agent-1", "sch-404"}, exitNotFound, "sch-404"},
		{[]string{"schedule", "pause", "agent-1", "sch-404"}, exitNotFound, "sch-404"},
		{[]string{"schedule", "ls", "missing"}, exitNotFound, "missing"},
		{[]string{"schedule", "a", "b"}, exitUsage, "unknown command"},
	} {
		code, out, errOut := stead(t, srv, tc.args...)
		if code != tc.code || !strings.Contains(out+errOut, tc.says) {
			t.Errorf("stead %s: exit %d (want %d) %q %q, want it to say %q", strings.Join(tc.args, " "), code, tc.code, out, errOut, tc.says)
		}
	}
	if len(b.list) != 1 {
		t.Fatalf("refused adds stored something: %+v", b.list)
	}
}
