package sandbox

import (
	"context"
	"errors"
	"io"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stead-dev/stead/client"
	"github.com/stead-dev/stead/internal/audit"
	"github.com/stead-dev/stead/internal/errs"
	"github.com/stead-dev/stead/internal/events"
	"github.com/stead-dev/stead/internal/store"
)

// set moves the test clock (activity_test.go) to t.
func (c *testClock) set(t time.Time) {
	c.mu.Lock()
	c.t = t
	c.mu.Unlock()
}

// schedRig is the real service with a test clock, a real audit trail and
// an event sink that keeps what it hears.
type schedRig struct {
	s     *Service
	clock *testClock
	mu    sync.Mutex
	evs   []events.Event
}

func newSchedRig(t *testing.T, start time.Time) *schedRig {
	t.Helper()
	s := newService(t)
	r := &schedRig{s: s, clock: &testClock{t: start}}
	s.opts.Now = r.clock.now
	s.opts.Events = events.SinkFunc(func(_ context.Context, e events.Event) {
		r.mu.Lock()
		r.evs = append(r.evs, e)
		r.mu.Unlock()
	})
	al, err := audit.Open(context.Background(), s.st, filepath.Join(t.TempDir(), "audit.key"), audit.Options{})
	if err != nil {
		t.Fatal(err)
	}
	s.rec = al
	return r
}

// scheduleEvents returns "type action result/error" of the schedule
// events heard so far.
func (r *schedRig) scheduleEvents() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, e := range r.evs {
		if strings.HasPrefix(e.Type, "schedule.") {
			out = append(out, e.Type+" "+e.Data["action"]+" "+e.Data["result"])
		}
	}
	return out
}

// auditActions returns the actions of the daemon's audit entries that
// start with schedule., with their outcome.
func (r *schedRig) auditActions(t *testing.T) []string {
	t.Helper()
	es, err := r.s.st.ListAudit(context.Background(), store.AuditFilter{})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range es {
		if strings.HasPrefix(e.Action, "schedule.") {
			out = append(out, e.Action+" "+e.Target+" "+e.Outcome)
		}
	}
	return out
}

func (r *schedRig) tick(t *testing.T, at string, want int) {
	t.Helper()
	r.clock.set(mustTime(at))
	if n := r.s.TickSchedules(context.Background()); n != want {
		t.Fatalf("tick at %s fired %d schedules, want %d", at, n, want)
	}
}

func mustTime(s string) time.Time {
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		panic(err)
	}
	return t
}

func readSandboxFile(t *testing.T, s *Service, id, path string) string {
	t.Helper()
	rc, _, err := s.ReadFile(context.Background(), store.DefaultTenant, id, path)
	if errors.Is(err, errs.ErrNotFound) {
		return ""
	}
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	b, _ := io.ReadAll(rc)
	return string(b)
}

func getSchedule(t *testing.T, s *Service, sandbox, id string) client.Schedule {
	t.Helper()
	list, err := s.ListSchedules(context.Background(), store.DefaultTenant, sandbox)
	if err != nil {
		t.Fatal(err)
	}
	for _, sc := range list {
		if sc.ID == id {
			return sc
		}
	}
	t.Fatalf("schedule %s of %s not listed: %+v", id, sandbox, list)
	return client.Schedule{}
}

func wantRuns(t *testing.T, what string, got []time.Time, want ...string) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: next runs %v, want %v", what, got, want)
	}
	for i := range want {
		if !got[i].Equal(mustTime(want[i])) {
			t.Fatalf("%s: next runs %v, want %v", what, got, want)
		}
	}
}

// hookScript counts its starts in /workspace/starts and, given the stop
// line, writes /workspace/stops and exits.
const hookScript = `echo up >> /workspace/starts
while read line; do
  if [ "$line" = "/checkpoint" ]; then echo "stopped at $(cat /workspace/starts | wc -l)" >> /workspace/stops; exit 0; fi
done`

// TestMonthlyRestartFiresAtTheMonthBoundaryWithItsStopHook: a @monthly
// restart shows its next runs, does nothing before midnight of the 1st,
// and at it stops the sandbox through its service's stop hook (the hook's
// marker file proves it ran) and starts it again; the run is audited, an
// event tells it, and the schedule's next run is a month on.
func TestMonthlyRestartFiresAtTheMonthBoundaryWithItsStopHook(t *testing.T) {
	r := newSchedRig(t, mustTime("2026-11-30T23:58:00Z"))
	s, ctx := r.s, context.Background()
	sb, err := s.CreateSandbox(ctx, store.DefaultTenant, client.CreateSandboxRequest{Name: "agent", Service: &client.Service{
		Command: []string{"sh", "-c", hookScript}, StopLine: "/checkpoint", StopGrace: "10s",
	}})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the service's first start", func() bool { return readSandboxFile(t, s, sb.ID, "/workspace/starts") == "up\n" })
	sc, err := s.CreateSchedule(ctx, store.DefaultTenant, "agent", client.CreateScheduleRequest{Cron: "@monthly", Action: "restart"})
	if err != nil {
		t.Fatal(err)
	}
	wantRuns(t, "created", sc.NextRuns, "2026-12-01T00:00:00Z", "2027-01-01T00:00:00Z", "2027-02-01T00:00:00Z")

	r.tick(t, "2026-11-30T23:59:59Z", 0)
	if got := readSandboxFile(t, s, sb.ID, "/workspace/stops"); got != "" {
		t.Fatalf("stopped before the month ended: %q", got)
	}
	r.tick(t, "2026-12-01T00:00:00Z", 1)
	if got := readSandboxFile(t, s, sb.ID, "/workspace/stops"); got != "stopped at 1\n" {
		t.Fatalf("the stop hook did not run: stops %q", got)
	}
	v, err := s.GetSandbox(ctx, store.DefaultTenant, sb.ID)
	if err != nil || v.State != "running" {
		t.Fatalf("after the restart: %s %v", v.State, err)
	}
	waitFor(t, "the service's second start", func() bool { return readSandboxFile(t, s, sb.ID, "/workspace/starts") == "up\nup\n" })
	got := getSchedule(t, s, "agent", sc.ID)
	if got.LastResult != "ok" || got.LastRunAt == nil || !got.LastRunAt.Equal(mustTime("2026-12-01T00:00:00Z")) {
		t.Fatalf("run not recorded: %+v", got)
	}
	wantRuns(t, "after the run", got.NextRuns, "2027-01-01T00:00:00Z", "2027-02-01T00:00:00Z", "2027-03-01T00:00:00Z")
	if ev := r.scheduleEvents(); strings.Join(ev, ",") != "schedule.fired restart ok" {
		t.Fatalf("events %q", ev)
	}
	if au := r.auditActions(t); strings.Join(au, ",") != "schedule.restart "+sb.ID+" ok" {
		t.Fatalf("audit %q", au)
	}
	r.tick(t, "2026-12-01T00:00:30Z", 0) // fired once, not again within the minute
}

// TestStopFiresAtItsMinuteWithTheStopHook: "30 2 * * *" in Europe/Berlin
// stops the sandbox at 02:30 Berlin time (01:30 UTC in winter), through
// the stop hook, with stop reason schedule.
func TestStopFiresAtItsMinuteWithTheStopHook(t *testing.T) {
	r := newSchedRig(t, mustTime("2026-12-01T01:00:00Z"))
	s, ctx := r.s, context.Background()
	sb, err := s.CreateSandbox(ctx, store.DefaultTenant, client.CreateSandboxRequest{Name: "nightly", Service: &client.Service{
		Command: []string{"sh", "-c", hookScript}, StopLine: "/checkpoint", StopGrace: "10s",
	}})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the service's start", func() bool { return readSandboxFile(t, s, sb.ID, "/workspace/starts") == "up\n" })
	sc, err := s.CreateSchedule(ctx, store.DefaultTenant, sb.ID, client.CreateScheduleRequest{Cron: "30 2 * * *", TZ: "Europe/Berlin", Action: "stop"})
	if err != nil {
		t.Fatal(err)
	}
	wantRuns(t, "created", sc.NextRuns, "2026-12-01T01:30:00Z", "2026-12-02T01:30:00Z", "2026-12-03T01:30:00Z")
	r.tick(t, "2026-12-01T01:29:59Z", 0)
	if v, _ := s.GetSandbox(ctx, store.DefaultTenant, sb.ID); v.State != "running" {
		t.Fatalf("stopped early: %s", v.State)
	}
	r.tick(t, "2026-12-01T01:30:00Z", 1)
	v, _ := s.GetSandbox(ctx, store.DefaultTenant, sb.ID)
	if v.State != "stopped" || v.StopReason != "schedule" {
		t.Fatalf("after the stop: %s (%s)", v.State, v.StopReason)
	}
	if got := readSandboxFile(t, s, sb.ID, "/workspace/stops"); got != "stopped at 1\n" {
		t.Fatalf("the stop hook did not run: %q", got)
	}
	// The next day it is stopped already: that is a success, not a failure.
	r.tick(t, "2026-12-02T01:30:00Z", 1)
	if got := getSchedule(t, s, sb.ID, sc.ID); got.LastResult != "ok" || got.LastError != "" {
		t.Fatalf("stop of a stopped sandbox: %+v", got)
	}
}

// TestSnapshotScheduleTakesALabelledSnapshot, and a start schedule wakes
// the stopped sandbox.
func TestSnapshotAndStartSchedulesDoTheirAction(t *testing.T) {
	r := newSchedRig(t, mustTime("2026-12-01T10:15:00Z"))
	s, ctx := r.s, context.Background()
	sb, err := s.CreateSandbox(ctx, store.DefaultTenant, client.CreateSandboxRequest{Name: "snappy", NoStart: true})
	if err != nil {
		t.Fatal(err)
	}
	snapSc, err := s.CreateSchedule(ctx, store.DefaultTenant, "snappy", client.CreateScheduleRequest{Cron: "0 * * * *", Action: "snapshot"})
	if err != nil {
		t.Fatal(err)
	}
	startSc, err := s.CreateSchedule(ctx, store.DefaultTenant, "snappy", client.CreateScheduleRequest{Cron: "0 11 * * *", Action: "start"})
	if err != nil {
		t.Fatal(err)
	}
	r.tick(t, "2026-12-01T11:00:00Z", 2)
	snaps, err := s.ListSnapshots(ctx, store.DefaultTenant, sb.ID)
	if err != nil || len(snaps) != 1 || snaps[0].Label != "sched-"+snapSc.ID+"-20261201T1100Z" {
		t.Fatalf("snapshots %+v %v", snaps, err)
	}
	if v, _ := s.GetSandbox(ctx, store.DefaultTenant, sb.ID); v.State != "running" {
		t.Fatalf("start schedule left it %s", v.State)
	}
	if got := getSchedule(t, s, "snappy", startSc.ID); got.LastResult != "ok" {
		t.Fatalf("start: %+v", got)
	}
	// Paused: start resumes it.
	if _, err := s.PauseSandbox(ctx, store.DefaultTenant, sb.ID); err != nil {
		t.Fatal(err)
	}
	r.tick(t, "2026-12-02T11:00:00Z", 2)
	if v, _ := s.GetSandbox(ctx, store.DefaultTenant, sb.ID); v.State != "running" {
		t.Fatalf("start schedule left a paused sandbox %s", v.State)
	}
	if snaps, _ := s.ListSnapshots(ctx, store.DefaultTenant, sb.ID); len(snaps) != 2 {
		t.Fatalf("second snapshot: %+v", snaps)
	}
}

// TestMissedRunsFireOnceAtStartUp: the clock jumps three periods past a
// schedule's next run (a daemon that was down): a new service's
// RunSchedules fires it once at start-up, not three times, and the next
// run is the first after that moment.
func TestMissedRunsFireOnceAtStartUp(t *testing.T) {
	r := newSchedRig(t, mustTime("2026-12-01T10:30:00Z"))
	s, ctx := r.s, context.Background()
	sb, err := s.CreateSandbox(ctx, store.DefaultTenant, client.CreateSandboxRequest{Name: "sleepy", NoStart: true})
	if err != nil {
		t.Fatal(err)
	}
	sc, err := s.CreateSchedule(ctx, store.DefaultTenant, sb.ID, client.CreateScheduleRequest{Cron: "@hourly", Action: "snapshot"})
	if err != nil {
		t.Fatal(err)
	}
	// The daemon is down from 10:30 to 13:20: 11:00, 12:00 and 13:00 pass.
	r.clock.set(mustTime("2026-12-01T13:20:00Z"))
	opts := s.opts
	opts.Logger = s.log
	s2 := New(opts) // the restarted daemon, on the same store, pool and runtime
	s2.rec = s.rec
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); s2.RunSchedules(runCtx, time.Hour) }()
	waitFor(t, "the start-up run", func() bool {
		return getSchedule(t, s2, sb.ID, sc.ID).LastRunAt != nil
	})
	cancel()
	<-done
	if snaps, _ := s2.ListSnapshots(ctx, store.DefaultTenant, sb.ID); len(snaps) != 1 {
		t.Fatalf("missed runs: %d snapshots, want exactly 1", len(snaps))
	}
	got := getSchedule(t, s2, sb.ID, sc.ID)
	wantRuns(t, "after start-up", got.NextRuns, "2026-12-01T14:00:00Z", "2026-12-01T15:00:00Z", "2026-12-01T16:00:00Z")
	if n := s2.TickSchedules(ctx); n != 0 {
		t.Fatalf("a second tick at the same time fired %d", n)
	}
	// A clock jump within one daemon is the same: once.
	r.clock.set(mustTime("2026-12-01T17:59:00Z"))
	if n := s2.TickSchedules(ctx); n != 1 {
		t.Fatalf("tick after a jump of 4 periods fired %d, want 1", n)
	}
	if snaps, _ := s2.ListSnapshots(ctx, store.DefaultTenant, sb.ID); len(snaps) != 2 {
		t.Fatalf("after the jump: %d snapshots, want 2", len(snaps))
	}
}

// TestFailedAndSkippedRunsAreRecordedAndTheOthersStillFire: a push without
// a repository fails; the failure is recorded on the schedule, audited and
// told as schedule.failed, and the snapshot due at the same tick, and the
// push's own next run, still fire. A deleted sandbox's run is skipped with
// the reason. A disabled schedule does not fire; enabled again, it runs
// from the next time after now.
func TestFailedAndSkippedRunsAreRecordedAndTheOthersStillFire(t *testing.T) {
	r := newSchedRig(t, mustTime("2026-12-01T02:00:00Z"))
	s, ctx := r.s, context.Background()
	sb, err := s.CreateSandbox(ctx, store.DefaultTenant, client.CreateSandboxRequest{Name: "flaky", NoStart: true})
	if err != nil {
		t.Fatal(err)
	}
	push, err := s.CreateSchedule(ctx, store.DefaultTenant, sb.ID, client.CreateScheduleRequest{Cron: "0 3 * * *", Action: "push"})
	if err != nil {
		t.Fatal(err)
	}
	snap, err := s.CreateSchedule(ctx, store.DefaultTenant, sb.ID, client.CreateScheduleRequest{Cron: "0 3 * * *", Action: "snapshot"})
	if err != nil {
		t.Fatal(err)
	}
	r.tick(t, "2026-12-01T03:00:00Z", 2)
	got := getSchedule(t, s, sb.ID, push.ID)
	if got.LastResult != "failed" || !strings.Contains(got.LastError, "repository") {
		t.Fatalf("failed push not recorded: %+v", got)
	}
	wantRuns(t, "failed push", got.NextRuns, "2026-12-02T03:00:00Z", "2026-12-03T03:00:00Z", "2026-12-04T03:00:00Z")
	if got := getSchedule(t, s, sb.ID, snap.ID); got.LastResult != "ok" {
		t.Fatalf("snapshot beside the failed push: %+v", got)
	}
	ev := strings.Join(r.scheduleEvents(), ",")
	if !strings.Contains(ev, "schedule.failed push failed") || !strings.Contains(ev, "schedule.fired snapshot ok") {
		t.Fatalf("events %q", ev)
	}
	au := strings.Join(r.auditActions(t), ",")
	if !strings.Contains(au, "schedule.push "+sb.ID+" ") || !strings.Contains(au, "repository") || !strings.Contains(au, "schedule.snapshot "+sb.ID+" ok") {
		t.Fatalf("audit %q", au)
	}
	r.tick(t, "2026-12-02T03:00:00Z", 2) // the failing one is still scheduled
	if got := getSchedule(t, s, sb.ID, push.ID); !got.LastRunAt.Equal(mustTime("2026-12-02T03:00:00Z")) {
		t.Fatalf("second push run: %+v", got)
	}

	// Disabled: nothing fires, and no next runs are shown.
	off, on := false, true
	if got, err := s.UpdateSchedule(ctx, store.DefaultTenant, sb.ID, push.ID, client.UpdateScheduleRequest{Enabled: &off}); err != nil || len(got.NextRuns) != 0 {
		t.Fatalf("disable: %+v %v", got, err)
	}
	r.tick(t, "2026-12-03T03:00:00Z", 1)
	r.clock.set(mustTime("2026-12-05T12:00:00Z"))
	got, err = s.UpdateSchedule(ctx, store.DefaultTenant, sb.ID, push.ID, client.UpdateScheduleRequest{Enabled: &on})
	if err != nil {
		t.Fatal(err)
	}
	wantRuns(t, "re-enabled", got.NextRuns, "2026-12-06T03:00:00Z", "2026-12-07T03:00:00Z", "2026-12-08T03:00:00Z")

	// Deleted: skipped, with the reason.
	if _, err := s.DeleteSandbox(ctx, store.DefaultTenant, sb.ID, false); err != nil {
		t.Fatal(err)
	}
	r.tick(t, "2026-12-06T03:00:00Z", 2)
	got = getSchedule(t, s, sb.ID, snap.ID)
	if got.LastResult != "skipped" || !strings.Contains(got.LastError, "deleted") {
		t.Fatalf("run on a deleted sandbox: %+v", got)
	}
	if snaps, _ := s.ListSnapshots(ctx, store.DefaultTenant, sb.ID); len(snaps) != 3 {
		t.Fatalf("a skipped run took a snapshot: %d", len(snaps))
	}
	// Purged: its schedules go with it.
	if _, err := s.DeleteSandbox(ctx, store.DefaultTenant, sb.ID, true); err != nil {
		t.Fatal(err)
	}
	if list, err := s.st.ListSchedules(ctx, store.DefaultTenant, ""); err != nil || len(list) != 0 {
		t.Fatalf("schedules after the purge: %+v %v", list, err)
	}
}

// TestScheduleInputIsCheckedAndTenantScoped: a bad expression, zone or
// action is errs.ErrInvalid and stores nothing; another tenant's sandbox
// and schedule, and a schedule named through another sandbox, are absent.
func TestScheduleInputIsCheckedAndTenantScoped(t *testing.T) {
	r := newSchedRig(t, mustTime("2026-12-01T00:00:00Z"))
	s, ctx := r.s, context.Background()
	if err := s.st.CreateTenant(ctx, store.Tenant{ID: "t-other", Name: "other"}); err != nil {
		t.Fatal(err)
	}
	a, err := s.CreateSandbox(ctx, store.DefaultTenant, client.CreateSandboxRequest{Name: "a", NoStart: true})
	if err != nil {
		t.Fatal(err)
	}
	b, err := s.CreateSandbox(ctx, store.DefaultTenant, client.CreateSandboxRequest{Name: "b", NoStart: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, req := range []client.CreateScheduleRequest{
		{Cron: "0 3 * *", Action: "stop"},
		{Cron: "0 3 * * *", TZ: "Mars/Base", Action: "stop"},
		{Cron: "0 3 * * *", Action: "reboot"},
		{Cron: "@every 1h", Action: "stop"},
	} {
		if _, err := s.CreateSchedule(ctx, store.DefaultTenant, "a", req); !errors.Is(err, errs.ErrInvalid) {
			t.Errorf("create %+v: %v, want ErrInvalid", req, err)
		}
	}
	if list, _ := s.ListSchedules(ctx, store.DefaultTenant, ""); len(list) != 0 {
		t.Fatalf("stored after bad input: %+v", list)
	}
	sc, err := s.CreateSchedule(ctx, store.DefaultTenant, "a", client.CreateScheduleRequest{Cron: "@daily", Action: "stop"})
	if err != nil {
		t.Fatal(err)
	}
	bad := "61 * * * *"
	if _, err := s.UpdateSchedule(ctx, store.DefaultTenant, "a", sc.ID, client.UpdateScheduleRequest{Cron: &bad}); !errors.Is(err, errs.ErrInvalid) {
		t.Fatalf("update with a bad cron: %v", err)
	}
	if got := getSchedule(t, s, "a", sc.ID); got.Cron != "@daily" {
		t.Fatalf("a refused update changed it: %+v", got)
	}
	for what, err := range map[string]error{
		"create on another tenant's": func() error {
			_, err := s.CreateSchedule(ctx, "t-other", a.ID, client.CreateScheduleRequest{Cron: "@daily", Action: "stop"})
			return err
		}(),
		"list another tenant's": func() error { _, err := s.ListSchedules(ctx, "t-other", a.ID); return err }(),
		"update another tenant's": func() error {
			_, err := s.UpdateSchedule(ctx, "t-other", a.ID, sc.ID, client.UpdateScheduleRequest{})
			return err
		}(),
		"delete another tenant's":        s.DeleteSchedule(ctx, "t-other", a.ID, sc.ID),
		"delete through another sandbox": s.DeleteSchedule(ctx, store.DefaultTenant, b.ID, sc.ID),
	} {
		if !errors.Is(err, errs.ErrNotFound) {
			t.Errorf("%s: %v, want ErrNotFound", what, err)
		}
	}
	if list, _ := s.ListSchedules(ctx, "t-other", ""); len(list) != 0 {
		t.Fatalf("another tenant lists %+v", list)
	}
	if list, _ := s.ListSchedules(ctx, store.DefaultTenant, ""); len(list) != 1 || list[0].SandboxName != "a" {
		t.Fatalf("tenant list %+v", list)
	}
	if err := s.DeleteSchedule(ctx, store.DefaultTenant, "a", sc.ID); err != nil {
		t.Fatal(err)
	}
}

// waitFor polls cond for up to 15 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestConcurrentTicksFireAScheduleOnce: ticks that overlap (RunSchedules
// starts one per interval without waiting for the last) fire a due
// schedule once between them.
func TestConcurrentTicksFireAScheduleOnce(t *testing.T) {
	r := newSchedRig(t, mustTime("2026-12-01T10:30:00Z"))
	s, ctx := r.s, context.Background()
	sb, err := s.CreateSandbox(ctx, store.DefaultTenant, client.CreateSandboxRequest{Name: "busy", NoStart: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.CreateSchedule(ctx, store.DefaultTenant, sb.ID, client.CreateScheduleRequest{Cron: "@hourly", Action: "snapshot"}); err != nil {
		t.Fatal(err)
	}
	r.clock.set(mustTime("2026-12-01T11:00:00Z"))
	var wg sync.WaitGroup
	var mu sync.Mutex
	fired := 0
	for range 8 {
		wg.Go(func() {
			n := s.TickSchedules(ctx)
			mu.Lock()
			fired += n
			mu.Unlock()
		})
	}
	wg.Wait()
	snaps, _ := s.ListSnapshots(ctx, store.DefaultTenant, sb.ID)
	if fired != 1 || len(snaps) != 1 {
		t.Fatalf("8 overlapping ticks fired %d runs, took %d snapshots; want 1 and 1", fired, len(snaps))
	}
}

// TestPushSchedulePushesToTheRepository: with a repository, a push
// schedule's run leaves a pushed snapshot of the sandbox and is ok.
func TestPushSchedulePushesToTheRepository(t *testing.T) {
	r := newSchedRig(t, mustTime("2026-12-01T02:00:00Z"))
	s, ctx := r.s, context.Background()
	withRepo(t, s, t.TempDir())
	if _, err := s.InitRepo(ctx); err != nil {
		t.Fatal(err)
	}
	sb, err := s.CreateSandbox(ctx, store.DefaultTenant, client.CreateSandboxRequest{Name: "pushy"})
	if err != nil {
		t.Fatal(err)
	}
	sc, err := s.CreateSchedule(ctx, store.DefaultTenant, sb.ID, client.CreateScheduleRequest{Cron: "0 3 * * *", Action: "push"})
	if err != nil {
		t.Fatal(err)
	}
	r.tick(t, "2026-12-01T03:00:00Z", 1)
	if got := getSchedule(t, s, sb.ID, sc.ID); got.LastResult != "ok" {
		t.Fatalf("push run: %+v", got)
	}
	remote, err := s.ListRemoteSnapshots(ctx, store.DefaultTenant, sb.ID)
	if err != nil || len(remote) != 1 {
		t.Fatalf("pushed snapshots %+v %v", remote, err)
	}
}
