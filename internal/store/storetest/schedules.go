package storetest

import (
	"testing"
	"time"

	"github.com/stead-dev/stead/internal/errs"
	"github.com/stead-dev/stead/internal/store"
)

func newSchedule(id, tenant, sandbox, action string, created time.Time) store.Schedule {
	next := created.Add(time.Hour)
	return store.Schedule{ID: id, TenantID: tenant, SandboxID: sandbox, Cron: "0 3 1 * *", TZ: "UTC",
		Action: action, Enabled: true, NextRunAt: &next, CreatedAt: created, UpdatedAt: created}
}

// scheduleIDs returns the ids of a list, or the list's error as the one
// element (so that a comparison shows it).
func scheduleIDs(list []store.Schedule, err error) []string {
	if err != nil {
		return []string{"error: " + err.Error()}
	}
	ids := []string{}
	for _, sc := range list {
		ids = append(ids, sc.ID)
	}
	return ids
}

// testSchedulesRoundTripUpdateListDelete checks the ScheduleStore contract
// for one tenant: a create round-trips (times in UTC), an update changes
// only what it may, lists are ordered and filtered by sandbox, a delete
// removes once.
func testSchedulesRoundTripUpdateListDelete(t *testing.T, s store.Store) {
	ctx := t.Context()
	createSandbox(t, s, newSandbox("sb1", store.DefaultTenant, "web", at(0)))
	createSandbox(t, s, newSandbox("sb2", store.DefaultTenant, "db", at(0)))
	want := newSchedule("sc-b", store.DefaultTenant, "sb1", store.ScheduleRestart, at(10))
	got, err := s.CreateSchedule(ctx, want)
	noErr(t, err, "create")
	checkTime(t, "returned created_at", got.CreatedAt, at(10))
	_, err = s.CreateSchedule(ctx, newSchedule("sc-a", store.DefaultTenant, "sb2", store.ScheduleSnapshot, at(10)))
	noErr(t, err, "create sc-a")
	_, err = s.CreateSchedule(ctx, newSchedule("sc-c", store.DefaultTenant, "sb1", store.ScheduleStop, at(5)))
	noErr(t, err, "create sc-c")

	got, err = s.GetSchedule(ctx, store.DefaultTenant, "sc-b")
	noErr(t, err, "get")
	if got.ID != "sc-b" || got.TenantID != store.DefaultTenant || got.SandboxID != "sb1" || got.Cron != "0 3 1 * *" ||
		got.TZ != "UTC" || got.Action != store.ScheduleRestart || !got.Enabled || got.LastRunAt != nil || got.LastResult != "" {
		t.Fatalf("get: %+v", got)
	}
	checkTime(t, "created_at", got.CreatedAt, at(10))
	checkTime(t, "updated_at", got.UpdatedAt, at(10))
	checkTimePtr(t, "next_run_at", got.NextRunAt, ptr(at(10).Add(time.Hour)))

	wantIDs(t, "tenant list", scheduleIDs(s.ListSchedules(ctx, store.DefaultTenant, "")), []string{"sc-c", "sc-a", "sc-b"})
	wantIDs(t, "sandbox list", scheduleIDs(s.ListSchedules(ctx, store.DefaultTenant, "sb1")), []string{"sc-c", "sc-b"})
	wantIDs(t, "every tenant", scheduleIDs(s.ListSchedules(ctx, "", "")), []string{"sc-c", "sc-a", "sc-b"})

	upd := got
	upd.Cron, upd.TZ, upd.Action, upd.Enabled = "@daily", "Europe/Berlin", store.ScheduleStart, false
	upd.NextRunAt, upd.LastRunAt = nil, ptr(at(20))
	upd.LastResult, upd.LastError = store.ScheduleFailed, "boom"
	upd.UpdatedAt = at(30)
	upd.SandboxID, upd.CreatedAt = "sb2", at(99) // never change
	got, err = s.UpdateSchedule(ctx, upd)
	noErr(t, err, "update")
	if got.Cron != "@daily" || got.TZ != "Europe/Berlin" || got.Action != store.ScheduleStart || got.Enabled ||
		got.NextRunAt != nil || got.LastResult != store.ScheduleFailed || got.LastError != "boom" || got.SandboxID != "sb1" {
		t.Fatalf("update returned %+v", got)
	}
	checkTime(t, "created_at after update", got.CreatedAt, at(10))
	checkTime(t, "updated_at after update", got.UpdatedAt, at(30))
	checkTimePtr(t, "last_run_at", got.LastRunAt, ptr(at(20)))
	again, err := s.GetSchedule(ctx, store.DefaultTenant, "sc-b")
	noErr(t, err, "get after update")
	if again.Cron != "@daily" || again.SandboxID != "sb1" || again.Enabled || again.NextRunAt != nil {
		t.Fatalf("get after update: %+v", again)
	}

	noErr(t, s.DeleteSchedule(ctx, store.DefaultTenant, "sc-b"), "delete")
	_, err = s.GetSchedule(ctx, store.DefaultTenant, "sc-b")
	wantErr(t, err, errs.ErrNotFound, "get after delete")
	wantErr(t, s.DeleteSchedule(ctx, store.DefaultTenant, "sc-b"), errs.ErrNotFound, "delete twice")
	_, err = s.UpdateSchedule(ctx, upd)
	wantErr(t, err, errs.ErrNotFound, "update after delete")
}

// testSchedulesRejectBadInput checks that bad input, an unknown or another
// tenant's sandbox and a taken id store nothing.
func testSchedulesRejectBadInput(t *testing.T, s store.Store) {
	ctx := t.Context()
	createTenant(t, s, "t-other")
	createSandbox(t, s, newSandbox("sb1", store.DefaultTenant, "web", at(0)))
	createSandbox(t, s, newSandbox("sb-other", "t-other", "web", at(0)))
	ok := newSchedule("sc-1", store.DefaultTenant, "sb1", store.ScheduleStart, at(1))
	for name, mut := range map[string]func(*store.Schedule){
		"empty id":      func(sc *store.Schedule) { sc.ID = "" },
		"empty tenant":  func(sc *store.Schedule) { sc.TenantID = "" },
		"empty sandbox": func(sc *store.Schedule) { sc.SandboxID = "" },
		"empty cron":    func(sc *store.Schedule) { sc.Cron = "" },
		"empty tz":      func(sc *store.Schedule) { sc.TZ = "" },
		"bad action":    func(sc *store.Schedule) { sc.Action = "reboot" },
	} {
		bad := ok
		mut(&bad)
		_, err := s.CreateSchedule(ctx, bad)
		wantErr(t, err, errs.ErrInvalid, "create with "+name)
	}
	bad := ok
	bad.SandboxID = "sb-absent"
	_, err := s.CreateSchedule(ctx, bad)
	wantErr(t, err, errs.ErrNotFound, "create for an absent sandbox")
	bad.SandboxID = "sb-other"
	_, err = s.CreateSchedule(ctx, bad)
	wantErr(t, err, errs.ErrNotFound, "create for another tenant's sandbox")
	bad = ok
	bad.TenantID = "t-nobody"
	_, err = s.CreateSchedule(ctx, bad)
	wantErr(t, err, errs.ErrNotFound, "create for an unknown tenant")
	if ids := scheduleIDs(s.ListSchedules(ctx, "", "")); len(ids) != 0 {
		t.Fatalf("stored after bad input: %q", ids)
	}
	_, err = s.CreateSchedule(ctx, ok)
	noErr(t, err, "create")
	dup := ok
	dup.Action = store.ScheduleStop
	_, err = s.CreateSchedule(ctx, dup)
	wantErr(t, err, errs.ErrConflict, "create with a taken id")
	upd := ok
	upd.Action = "reboot"
	_, err = s.UpdateSchedule(ctx, upd)
	wantErr(t, err, errs.ErrInvalid, "update with a bad action")
	got, err := s.GetSchedule(ctx, store.DefaultTenant, "sc-1")
	noErr(t, err, "get")
	if got.Action != store.ScheduleStart {
		t.Fatalf("a refused write changed the schedule: %+v", got)
	}
}

// testSchedulesOfAnotherTenantAreAbsent checks tenant isolation.
func testSchedulesOfAnotherTenantAreAbsent(t *testing.T, s store.Store) {
	ctx := t.Context()
	createTenant(t, s, "t-other")
	createSandbox(t, s, newSandbox("sb-other", "t-other", "web", at(0)))
	theirs := newSchedule("sc-x", "t-other", "sb-other", store.ScheduleStop, at(1))
	_, err := s.CreateSchedule(ctx, theirs)
	noErr(t, err, "create other")
	_, err = s.GetSchedule(ctx, store.DefaultTenant, "sc-x")
	wantErr(t, err, errs.ErrNotFound, "get another tenant's")
	mine := theirs
	mine.TenantID, mine.Action = store.DefaultTenant, store.ScheduleStart
	_, err = s.UpdateSchedule(ctx, mine)
	wantErr(t, err, errs.ErrNotFound, "update another tenant's")
	wantErr(t, s.DeleteSchedule(ctx, store.DefaultTenant, "sc-x"), errs.ErrNotFound, "delete another tenant's")
	if ids := scheduleIDs(s.ListSchedules(ctx, store.DefaultTenant, "sb-other")); len(ids) != 0 {
		t.Fatalf("another tenant's schedules listed: %q", ids)
	}
	got, err := s.GetSchedule(ctx, "t-other", "sc-x")
	noErr(t, err, "get own")
	if got.Action != store.ScheduleStop {
		t.Fatalf("another tenant changed it: %+v", got)
	}
}

// testDueSchedulesAreEnabledAndOverdue checks DueSchedules: enabled ones
// whose next run is at or before now, of every tenant, most overdue first.
func testDueSchedulesAreEnabledAndOverdue(t *testing.T, s store.Store) {
	ctx := t.Context()
	createTenant(t, s, "t-other")
	createSandbox(t, s, newSandbox("sb1", store.DefaultTenant, "web", at(0)))
	createSandbox(t, s, newSandbox("sb2", "t-other", "web", at(0)))
	mk := func(id, tenant, sb string, next *time.Time, enabled bool) {
		sc := newSchedule(id, tenant, sb, store.ScheduleSnapshot, at(0))
		sc.NextRunAt, sc.Enabled = next, enabled
		_, err := s.CreateSchedule(ctx, sc)
		noErr(t, err, "create "+id)
	}
	now := at(100)
	mk("sc-late", store.DefaultTenant, "sb1", ptr(at(50)), true)
	mk("sc-exact", "t-other", "sb2", ptr(at(100)), true)
	mk("sc-oldest", "t-other", "sb2", ptr(at(10)), true)
	mk("sc-future", store.DefaultTenant, "sb1", ptr(at(101)), true)
	mk("sc-disabled", store.DefaultTenant, "sb1", ptr(at(10)), false)
	mk("sc-never", store.DefaultTenant, "sb1", nil, true)
	wantIDs(t, "due", scheduleIDs(s.DueSchedules(ctx, now)), []string{"sc-oldest", "sc-late", "sc-exact"})
	wantIDs(t, "due before all", scheduleIDs(s.DueSchedules(ctx, at(0))), []string{})
}

// testPurgingDeletesSchedules checks that a sandbox's purge and its
// tenant's deletion take its schedules along.
func testPurgingDeletesSchedules(t *testing.T, s store.Store) {
	ctx := t.Context()
	createTenant(t, s, "t-gone")
	createSandbox(t, s, newSandbox("sb1", store.DefaultTenant, "web", at(0)))
	createSandbox(t, s, newSandbox("sb2", store.DefaultTenant, "db", at(0)))
	createSandbox(t, s, newSandbox("sb3", "t-gone", "web", at(0)))
	for _, sc := range []store.Schedule{
		newSchedule("sc-1", store.DefaultTenant, "sb1", store.ScheduleStop, at(1)),
		newSchedule("sc-2", store.DefaultTenant, "sb2", store.ScheduleStop, at(2)),
		newSchedule("sc-3", "t-gone", "sb3", store.ScheduleStop, at(3)),
	} {
		_, err := s.CreateSchedule(ctx, sc)
		noErr(t, err, "create "+sc.ID)
	}
	noErr(t, s.DeleteSandbox(ctx, store.DefaultTenant, "sb1"), "purge sb1")
	_, err := s.GetSchedule(ctx, store.DefaultTenant, "sc-1")
	wantErr(t, err, errs.ErrNotFound, "schedule of a purged sandbox")
	// A new sandbox that happens to get the same id has no schedules.
	createSandbox(t, s, newSandbox("sb1", store.DefaultTenant, "web", at(5)))
	if ids := scheduleIDs(s.ListSchedules(ctx, store.DefaultTenant, "sb1")); len(ids) != 0 {
		t.Fatalf("recreated sandbox lists %q", ids)
	}
	noErr(t, s.DeleteSandbox(ctx, "t-gone", "sb3"), "purge sb3")
	noErr(t, s.DeleteTenant(ctx, "t-gone"), "delete tenant")
	wantIDs(t, "left", scheduleIDs(s.ListSchedules(ctx, "", "")), []string{"sc-2"})
	wantIDs(t, "due left", scheduleIDs(s.DueSchedules(ctx, at(100000))), []string{"sc-2"})
}
