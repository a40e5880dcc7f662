package sandbox

import (
	"context"
	"crypto/rand"
	"encoding/base32"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/stead-dev/stead/client"
	"github.com/stead-dev/stead/internal/api"
	"github.com/stead-dev/stead/internal/errs"
	"github.com/stead-dev/stead/internal/events"
	"github.com/stead-dev/stead/internal/schedule"
	"github.com/stead-dev/stead/internal/store"
)

// Schedules: cron-style actions on sandboxes (api.ScheduleBackend), fired
// by TickSchedules.
//
// Each schedule has a next run time (next_run_at) in the store. A tick
// fires every enabled schedule whose next run time is at or before now
// (Options.Now), then records the run (last_run_at, its result) and sets
// the next run time to the first one after now. So:
//
//   - Missed runs: a schedule whose next run time passed while the daemon
//     was down runs once when the daemon is back (RunSchedules ticks at
//     once on start-up), not once per missed time, and then continues from
//     the next run time after that moment. A clock that jumps over several
//     run times fires the schedule once, likewise.
//   - A run is recorded after its action: a daemon killed during a run
//     runs it again at start-up (at least once, never silently dropped).
//   - Actions: start wakes the sandbox (starts a stopped one, resumes a
//     paused one; a running one is left as it is, and that is ok); stop
//     stops it as StopSandbox does (the service's stop hook, then its
//     grace period); restart stops it the same way and starts it again,
//     under the sandbox's lock throughout (a stopped sandbox is just
//     started); snapshot takes a local snapshot labelled
//     sched-<schedule id>-<run time>; push pushes a new snapshot to the
//     repository and waits for the push.
//   - A deleted, archived or still-creating sandbox is not acted on: the
//     run is recorded as skipped with the reason. A failed action is
//     recorded as failed with its error; neither stops the schedule or
//     the other schedules.
//   - Every run writes an audit record (action schedule.<action>, target
//     the sandbox) and an event: schedule.fired (data result ok or
//     skipped, reason) or schedule.failed (data error).
//   - The schedules of one sandbox due at one tick run one after the
//     other, in next-run order; those of different sandboxes run
//     concurrently. A tick returns when all its runs are done; a schedule
//     whose run is in progress is left out of later ticks until its run
//     is recorded (so it never runs twice at once).

var _ api.ScheduleBackend = (*Service)(nil)

// scheduleNextRuns is how many next run times a schedule shows.
const scheduleNextRuns = 3

// schedState serialises the scheduler's record of a run with API changes
// of the same schedule, and keeps a schedule from being fired twice at
// once.
type schedState struct {
	mu      sync.Mutex
	running map[string]bool // schedule id → a run is in progress
}

func newScheduleID() string {
	var b [8]byte
	rand.Read(b[:])
	return "sch-" + strings.ToLower(base32.StdEncoding.WithPadding(base32.NoPadding).EncodeToString(b[:]))
}

// checkScheduleAction returns errs.ErrInvalid for an unknown action.
func checkScheduleAction(action string) error {
	if !slices.Contains(store.ScheduleActions, action) {
		return fmt.Errorf("schedule action %q (want %s): %w", action, strings.Join(store.ScheduleActions, ", "), errs.ErrInvalid)
	}
	return nil
}

// scheduleView is the API's form of sc on sandbox name.
func scheduleView(sc store.Schedule, name string) client.Schedule {
	v := client.Schedule{ID: sc.ID, Sandbox: sc.SandboxID, SandboxName: name, Cron: sc.Cron, TZ: sc.TZ,
		Action: sc.Action, Enabled: sc.Enabled, NextRuns: []time.Time{}, LastRunAt: sc.LastRunAt,
		LastResult: sc.LastResult, LastError: sc.LastError, CreatedAt: sc.CreatedAt, UpdatedAt: sc.UpdatedAt}
	if sc.Enabled && sc.NextRunAt != nil {
		v.NextRuns = append(v.NextRuns, *sc.NextRunAt)
		if sp, err := schedule.Parse(sc.Cron, sc.TZ); err == nil {
			v.NextRuns = append(v.NextRuns, sp.NextN(*sc.NextRunAt, scheduleNextRuns-1)...)
		}
	}
	return v
}

// nextRun returns sp's first run time after now, or nil when there is none.
func nextRun(sp schedule.Spec, now time.Time) *time.Time {
	n := sp.Next(now)
	if n.IsZero() {
		return nil
	}
	return &n
}

// CreateSchedule adds a schedule to a sandbox of the tenant.
func (s *Service) CreateSchedule(ctx context.Context, tenant, sandbox string, req client.CreateScheduleRequest) (client.Schedule, error) {
	sp, err := schedule.Parse(req.Cron, req.TZ)
	if err != nil {
		return client.Schedule{}, err
	}
	if err := checkScheduleAction(req.Action); err != nil {
		return client.Schedule{}, err
	}
	sb, err := s.get(ctx, tenant, sandbox)
	if err != nil {
		return client.Schedule{}, err
	}
	if sb.State == store.StateDeleted {
		return client.Schedule{}, fmt.Errorf("sandbox %s is deleted (undelete it first): %w", sb.Name, errs.ErrConflict)
	}
	now := s.now()
	sc := store.Schedule{ID: newScheduleID(), TenantID: tenant, SandboxID: sb.ID, Cron: sp.Expr, TZ: sp.TZ,
		Action: req.Action, Enabled: !req.Disabled, CreatedAt: now, UpdatedAt: now}
	if sc.Enabled {
		sc.NextRunAt = nextRun(sp, now)
	}
	sc, err = s.st.CreateSchedule(ctx, sc)
	if err != nil {
		return client.Schedule{}, fmt.Errorf("add schedule to sandbox %s: %w", sb.Name, err)
	}
	s.log.Info("schedule added", "sandbox", sb.ID, "tenant", tenant, "schedule", sc.ID, "cron", sc.Cron, "tz", sc.TZ, "action", sc.Action)
	return scheduleView(sc, sb.Name), nil
}

// ListSchedules lists the schedules of a sandbox of the tenant, or of all
// its sandboxes when sandbox is "".
func (s *Service) ListSchedules(ctx context.Context, tenant, sandbox string) ([]client.Schedule, error) {
	names := map[string]string{}
	sbID := ""
	if sandbox != "" {
		sb, err := s.get(ctx, tenant, sandbox)
		if err != nil {
			return nil, err
		}
		sbID, names[sb.ID] = sb.ID, sb.Name
	} else {
		sbs, err := s.st.ListSandboxes(ctx, store.SandboxFilter{TenantID: tenant, IncludeDeleted: true})
		if err != nil {
			return nil, fmt.Errorf("list schedules: %w", err)
		}
		for _, sb := range sbs {
			names[sb.ID] = sb.Name
		}
	}
	list, err := s.st.ListSchedules(ctx, tenant, sbID)
	if err != nil {
		return nil, err
	}
	out := make([]client.Schedule, 0, len(list))
	for _, sc := range list {
		out = append(out, scheduleView(sc, names[sc.SandboxID]))
	}
	return out, nil
}

// scheduleOf returns the tenant's schedule id of sandbox (id or name); a
// schedule of another sandbox is absent.
func (s *Service) scheduleOf(ctx context.Context, tenant, sandbox, id string) (store.Schedule, store.Sandbox, error) {
	sb, err := s.get(ctx, tenant, sandbox)
	if err != nil {
		return store.Schedule{}, sb, err
	}
	sc, err := s.st.GetSchedule(ctx, tenant, id)
	if errors.Is(err, errs.ErrNotFound) || err == nil && sc.SandboxID != sb.ID {
		return store.Schedule{}, sb, fmt.Errorf("schedule %s of sandbox %s: %w (stead schedule ls %s shows its schedules)", id, sandbox, errs.ErrNotFound, sandbox)
	}
	return sc, sb, err
}

// UpdateSchedule changes a schedule: a new expression, zone or action, or
// enabled on or off. A schedule that is enabled, or whose expression or
// zone changes, is due next at the first run time after now (times
// missed while it was disabled are not run).
func (s *Service) UpdateSchedule(ctx context.Context, tenant, sandbox, id string, req client.UpdateScheduleRequest) (client.Schedule, error) {
	s.sched.mu.Lock()
	defer s.sched.mu.Unlock()
	sc, sb, err := s.scheduleOf(ctx, tenant, sandbox, id)
	if err != nil {
		return client.Schedule{}, err
	}
	cron, tz, retime := sc.Cron, sc.TZ, false
	if req.Cron != nil {
		cron, retime = *req.Cron, true
	}
	if req.TZ != nil {
		tz, retime = *req.TZ, true
	}
	sp, err := schedule.Parse(cron, tz)
	if err != nil {
		return client.Schedule{}, err
	}
	if req.Action != nil {
		if err := checkScheduleAction(*req.Action); err != nil {
			return client.Schedule{}, err
		}
		sc.Action = *req.Action
	}
	if req.Enabled != nil && *req.Enabled != sc.Enabled {
		sc.Enabled, retime = *req.Enabled, true
	}
	now := s.now()
	sc.Cron, sc.TZ, sc.UpdatedAt = sp.Expr, sp.TZ, now
	switch {
	case !sc.Enabled:
		sc.NextRunAt = nil
	case retime || sc.NextRunAt == nil:
		sc.NextRunAt = nextRun(sp, now)
	}
	if sc, err = s.st.UpdateSchedule(ctx, sc); err != nil {
		return client.Schedule{}, err
	}
	s.log.Info("schedule changed", "sandbox", sb.ID, "tenant", tenant, "schedule", sc.ID, "cron", sc.Cron, "tz", sc.TZ, "action", sc.Action, "enabled", sc.Enabled)
	return scheduleView(sc, sb.Name), nil
}

// DeleteSchedule removes a schedule (a run in progress finishes).
func (s *Service) DeleteSchedule(ctx context.Context, tenant, sandbox, id string) error {
	sc, sb, err := s.scheduleOf(ctx, tenant, sandbox, id)
	if err != nil {
		return err
	}
	if err := s.st.DeleteSchedule(ctx, tenant, sc.ID); err != nil {
		return err
	}
	s.log.Info("schedule removed", "sandbox", sb.ID, "tenant", tenant, "schedule", sc.ID)
	return nil
}

// RunSchedules ticks the schedules at once (the missed-run rule at
// start-up), then every interval, until ctx ends; it returns when the
// runs it started are done. Each tick runs in its own goroutine, so a
// long run (a push of a large sandbox, a stop hook's grace) holds up no
// other schedule; a schedule whose run is still in progress is not fired
// again by a later tick.
func (s *Service) RunSchedules(ctx context.Context, interval time.Duration) {
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Go(func() { s.TickSchedules(ctx) })
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			wg.Go(func() { s.TickSchedules(ctx) })
		}
	}
}

// TickSchedules fires every schedule due now (see the rules above) and
// returns how many it fired, once all their runs are done.
func (s *Service) TickSchedules(ctx context.Context) int {
	now := s.now()
	bySandbox := map[string][]store.Schedule{}
	var order []string
	// The query and the marks are one step under the lock that a run's
	// record also takes: a run recorded meanwhile is either not due here
	// or still marked running, never fired twice.
	s.sched.mu.Lock()
	due, err := s.st.DueSchedules(ctx, now)
	if err != nil {
		s.sched.mu.Unlock()
		s.log.Error("due schedules", "err", err)
		return 0
	}
	if s.sched.running == nil {
		s.sched.running = map[string]bool{}
	}
	for _, sc := range due {
		if s.sched.running[sc.ID] || !s.holds(sc.SandboxID) {
			continue // running, or the schedule of another node's sandbox
		}
		s.sched.running[sc.ID] = true
		if _, ok := bySandbox[sc.SandboxID]; !ok {
			order = append(order, sc.SandboxID)
		}
		bySandbox[sc.SandboxID] = append(bySandbox[sc.SandboxID], sc)
	}
	s.sched.mu.Unlock()
	var wg sync.WaitGroup
	n := 0
	for _, id := range order {
		n += len(bySandbox[id])
		wg.Go(func() {
			for _, sc := range bySandbox[id] {
				s.fireSchedule(ctx, sc, now)
			}
		})
	}
	wg.Wait()
	return n
}

// skipError is a run that was not attempted, and why.
type skipError struct{ reason string }

func (e *skipError) Error() string { return "skipped: " + e.reason }

// fireSchedule runs sc's action once and records the run.
func (s *Service) fireSchedule(ctx context.Context, sc store.Schedule, now time.Time) {
	defer func() {
		s.sched.mu.Lock()
		delete(s.sched.running, sc.ID)
		s.sched.mu.Unlock()
	}()
	t0 := time.Now()
	err := s.runScheduleAction(ctx, sc, now)
	result, msg := store.ScheduleOK, ""
	var skip *skipError
	switch {
	case errors.As(err, &skip):
		result, msg = store.ScheduleSkipped, skip.reason
	case err != nil:
		result, msg = store.ScheduleFailed, errs.Message(err)
	}
	s.record(ctx, sc.TenantID, "schedule."+sc.Action, sc.SandboxID, err)
	data := map[string]string{"schedule": sc.ID, "action": sc.Action, "cron": sc.Cron, "result": result}
	if result == store.ScheduleFailed {
		data["error"] = msg
		s.event(ctx, events.ScheduleFailed, sc.TenantID, sc.SandboxID, data)
		s.log.Warn("schedule failed", "schedule", sc.ID, "sandbox", sc.SandboxID, "tenant", sc.TenantID, "action", sc.Action, "err", err)
	} else {
		if msg != "" {
			data["reason"] = msg
		}
		s.event(ctx, events.ScheduleFired, sc.TenantID, sc.SandboxID, data)
		s.log.Info("schedule fired", "schedule", sc.ID, "sandbox", sc.SandboxID, "tenant", sc.TenantID, "action", sc.Action, "result", result, "reason", msg, "dur", time.Since(t0))
	}
	s.recordScheduleRun(ctx, sc, now, result, msg)
}

// recordScheduleRun stores a run's outcome and the schedule's next run
// time: the first after now, unless a change made while the action ran
// already set a later one.
func (s *Service) recordScheduleRun(ctx context.Context, sc store.Schedule, now time.Time, result, msg string) {
	ctx = context.WithoutCancel(ctx)
	s.sched.mu.Lock()
	defer s.sched.mu.Unlock()
	cur, err := s.st.GetSchedule(ctx, sc.TenantID, sc.ID)
	if errors.Is(err, errs.ErrNotFound) {
		return // removed meanwhile, or gone with its sandbox
	}
	if err != nil {
		s.log.Error("record schedule run", "schedule", sc.ID, "err", err)
		return
	}
	cur.LastRunAt, cur.LastResult, cur.LastError = &now, result, msg
	if cur.Enabled && (cur.NextRunAt == nil || !cur.NextRunAt.After(now)) {
		sp, err := schedule.Parse(cur.Cron, cur.TZ)
		if err != nil {
			// Stored by an older parser that was laxer: stop it, and say why.
			cur.Enabled, cur.NextRunAt = false, nil
			cur.LastError = strings.TrimSpace(cur.LastError + "; disabled: " + errs.Message(err))
		} else {
			cur.NextRunAt = nextRun(sp, now)
		}
	}
	cur.UpdatedAt = s.now()
	if _, err := s.st.UpdateSchedule(ctx, cur); err != nil {
		s.log.Error("record schedule run", "schedule", sc.ID, "err", err)
	}
}

// runScheduleAction does what sc says to its sandbox.
func (s *Service) runScheduleAction(ctx context.Context, sc store.Schedule, now time.Time) error {
	sb, err := s.st.GetSandbox(ctx, sc.TenantID, sc.SandboxID)
	if err != nil {
		return fmt.Errorf("find sandbox %s: %w", sc.SandboxID, err)
	}
	switch sb.State {
	case store.StateDeleted, store.StateArchived:
		return &skipError{reason: fmt.Sprintf("sandbox %s is %s", sb.Name, sb.State)}
	case store.StateCreating:
		return &skipError{reason: fmt.Sprintf("sandbox %s is still being created", sb.Name)}
	}
	already := func(err error) error {
		if isAlready(err) {
			return nil // already where the action leads: nothing to do
		}
		return err
	}
	switch sc.Action {
	case store.ScheduleStart:
		_, err := s.StartSandbox(ctx, sc.TenantID, sb.ID)
		return already(err)
	case store.ScheduleStop:
		_, err := s.stop(ctx, sc.TenantID, sb.ID, "schedule")
		return already(err)
	case store.ScheduleRestart:
		_, err := s.restart(ctx, sc.TenantID, sb.ID)
		return err
	case store.ScheduleSnapshot:
		_, err := s.CreateSnapshot(ctx, sc.TenantID, sb.ID, client.CreateSnapshotRequest{
			Label:       "sched-" + sc.ID + "-" + now.UTC().Format("20060102T1504Z"),
			Description: "taken by schedule " + sc.ID + " (" + sc.Cron + " " + sc.TZ + ")",
		})
		return err
	case store.SchedulePush:
		op, err := s.PushSandbox(ctx, sc.TenantID, sb.ID, client.PushRequest{Wait: true})
		switch {
		case err != nil:
			return err
		case op.State == "failed":
			return fmt.Errorf("push %s: %s", op.ID, op.Error)
		case op.State != "succeeded":
			return fmt.Errorf("push %s: still %s when the scheduler stopped waiting", op.ID, op.State)
		}
		return nil
	}
	return checkScheduleAction(sc.Action)
}

// restart stops a running, paused or failed sandbox (its stop hook and
// grace, stop reason "restart") and starts it again, holding its lock
// throughout; a stopped sandbox is just started.
func (s *Service) restart(ctx context.Context, tenant, id string) (client.Sandbox, error) {
	return s.transition(ctx, tenant, id, "restart",
		[]store.SandboxState{store.StateRunning, store.StatePaused, store.StateError, store.StateStopped}, nil,
		func(ctx context.Context, sb store.Sandbox) (store.Sandbox, error) {
			if sb.State == store.StateStopped || sb.State == store.StateError {
				// A start, not a restart: one more running sandbox.
				release, err := s.admitStart(ctx, sb)
				if err != nil {
					return sb, err
				}
				defer release()
			}
			if sb.State != store.StateStopped {
				var err error
				if sb, err = s.stopLocked(ctx, sb, "restart"); err != nil {
					return sb, err
				}
			}
			tmpl, err := s.st.GetTemplate(ctx, sb.TenantID, sb.TemplateID)
			if err != nil {
				return sb, fmt.Errorf("template %s: %w", sb.TemplateID, err)
			}
			return s.startLocked(ctx, sb, tmpl)
		})
}
