package api

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stead-dev/stead/client"
	"github.com/stead-dev/stead/internal/errs"
)

// scheduleFake serves schedules on top of fakeBackend: sandbox "bad-cron"
// refuses every expression as the service's parser would.
type scheduleFake struct {
	*fakeBackend
	got []string // "method tenant sandbox id" of every call
}

func newScheduleFake() *scheduleFake { return &scheduleFake{fakeBackend: &fakeBackend{}} }

var _ ScheduleBackend = (*scheduleFake)(nil)

func (f *scheduleFake) note(method, tenant, sandbox, id string) {
	f.record(method, tenant, sandbox)
	f.mu.Lock()
	f.got = append(f.got, strings.Join([]string{method, tenant, sandbox, id}, " "))
	f.mu.Unlock()
}

func (f *scheduleFake) CreateSchedule(_ context.Context, tenant, sandbox string, req client.CreateScheduleRequest) (client.Schedule, error) {
	f.note("CreateSchedule", tenant, sandbox, req.Cron+"|"+req.TZ+"|"+req.Action)
	if sandbox == "bad-cron" {
		return client.Schedule{}, fmt.Errorf("cron expression %q: expected exactly 5 fields: %w", req.Cron, errs.ErrInvalid)
	}
	at := time.Date(2027, 1, 1, 3, 0, 0, 0, time.UTC)
	return client.Schedule{ID: "sch-1", Sandbox: sandbox, Cron: req.Cron, TZ: "UTC", Action: req.Action, Enabled: true, NextRuns: []time.Time{at}}, f.Err
}

func (f *scheduleFake) ListSchedules(_ context.Context, tenant, sandbox string) ([]client.Schedule, error) {
	f.note("ListSchedules", tenant, sandbox, "")
	return nil, f.Err
}

func (f *scheduleFake) UpdateSchedule(_ context.Context, tenant, sandbox, id string, req client.UpdateScheduleRequest) (client.Schedule, error) {
	en := "nil"
	if req.Enabled != nil {
		en = fmt.Sprint(*req.Enabled)
	}
	f.note("UpdateSchedule", tenant, sandbox, id+"|enabled="+en)
	return client.Schedule{ID: id, Sandbox: sandbox}, f.Err
}

func (f *scheduleFake) DeleteSchedule(_ context.Context, tenant, sandbox, id string) error {
	f.note("DeleteSchedule", tenant, sandbox, id)
	return f.Err
}

// TestScheduleRoutesPassTheirArguments: each route reaches the backend
// with the caller's tenant, the sandbox and the schedule of the path; an
// empty list is [], not null; the parser's refusal is a 400 that quotes
// it; an unknown action or an empty expression is refused before the
// backend.
func TestScheduleRoutesPassTheirArguments(t *testing.T) {
	f := newScheduleFake()
	c, srv := newTestServer(t, f, aliceKey)
	ctx := testCtx(t)
	sc, err := c.CreateSchedule(ctx, "web", client.CreateScheduleRequest{Cron: "0 3 1 * *", TZ: "Europe/Berlin", Action: "restart"})
	if err != nil || sc.ID != "sch-1" || len(sc.NextRuns) != 1 {
		t.Fatalf("create: %+v %v", sc, err)
	}
	if body := doRaw(t, srv, http.MethodGet, "/v1/sandboxes/web/schedules", "", http.StatusOK); strings.TrimSpace(body) != emptyPage {
		t.Fatalf("empty list: %s", body)
	}
	if body := doRaw(t, srv, http.MethodGet, "/v1/schedules", "", http.StatusOK); strings.TrimSpace(body) != emptyPage {
		t.Fatalf("empty tenant list: %s", body)
	}
	off := false
	if _, err := c.UpdateSchedule(ctx, "web", "sch-1", client.UpdateScheduleRequest{Enabled: &off}); err != nil {
		t.Fatal(err)
	}
	if err := c.DeleteSchedule(ctx, "web", "sch-1"); err != nil {
		t.Fatal(err)
	}
	want := []string{
		"CreateSchedule t-alice web 0 3 1 * *|Europe/Berlin|restart",
		"ListSchedules t-alice web ",
		"ListSchedules t-alice  ",
		"UpdateSchedule t-alice web sch-1|enabled=false",
		"DeleteSchedule t-alice web sch-1",
	}
	if strings.Join(f.got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("backend calls:\n%s\nwant:\n%s", strings.Join(f.got, "\n"), strings.Join(want, "\n"))
	}
	_, err = c.CreateSchedule(ctx, "bad-cron", client.CreateScheduleRequest{Cron: "0 3 1 *", Action: "stop"})
	if client.StatusCode(err) != http.StatusBadRequest || !strings.Contains(err.Error(), "expected exactly 5 fields") {
		t.Fatalf("invalid cron: %v", err)
	}
	before := len(f.Calls())
	doRaw(t, srv, http.MethodPost, "/v1/sandboxes/web/schedules", `{"cron":"@daily","action":"reboot"}`, http.StatusUnprocessableEntity)
	doRaw(t, srv, http.MethodPost, "/v1/sandboxes/web/schedules", `{"cron":"","action":"stop"}`, http.StatusUnprocessableEntity)
	doRaw(t, srv, http.MethodPatch, "/v1/sandboxes/web/schedules/sch-1", `{"action":"reboot"}`, http.StatusUnprocessableEntity)
	if calls := f.Calls(); len(calls) != before {
		t.Fatalf("bad input reached the backend: %v", calls[before:])
	}
}

// TestScheduleRoutesAreClosedToSandboxTokens: the agent inside a sandbox
// neither lists nor changes schedules (of its own sandbox included).
func TestScheduleRoutesAreClosedToSandboxTokens(t *testing.T) {
	f := newScheduleFake()
	for r := range agentRoutes(t, f) {
		if strings.Contains(r, "schedules") {
			t.Errorf("%s is open to sandbox tokens", r)
		}
	}
	f.AuthenticateFunc = func(context.Context, string) (Principal, error) {
		return Principal{TenantID: "t-alice", KeyID: "sandbox:sb-1", Sandbox: "sb-1"}, nil
	}
	_, srv := newTestServer(t, f, aliceKey)
	doRaw(t, srv, http.MethodGet, "/v1/sandboxes/sb-1/schedules", "", http.StatusForbidden)
	doRaw(t, srv, http.MethodPost, "/v1/sandboxes/sb-1/schedules", `{"cron":"@daily","action":"stop"}`, http.StatusForbidden)
	doRaw(t, srv, http.MethodGet, "/v1/schedules", "", http.StatusForbidden)
	if calls := f.Calls(); len(calls) != 0 {
		t.Fatalf("a sandbox token reached the backend: %v", calls)
	}
}
