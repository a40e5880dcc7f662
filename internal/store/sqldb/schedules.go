package sqldb

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/stead-dev/stead/internal/errs"
	"github.com/stead-dev/stead/internal/store"
)

const scheduleCols = "id, tenant_id, sandbox_id, cron, tz, action, enabled, next_run_at, last_run_at, last_result, last_error, created_at, updated_at"

// checkSchedule applies the checks CreateSchedule and UpdateSchedule share.
func checkSchedule(verb string, sc store.Schedule) error {
	switch {
	case sc.ID == "", sc.TenantID == "", sc.SandboxID == "":
		return fmt.Errorf("%s %q: empty id, tenant or sandbox: %w", verb, sc.ID, errs.ErrInvalid)
	case sc.Cron == "", sc.TZ == "":
		return fmt.Errorf("%s %s: empty cron or tz: %w", verb, sc.ID, errs.ErrInvalid)
	case !slices.Contains(store.ScheduleActions, sc.Action):
		return fmt.Errorf("%s %s: unknown action %q: %w", verb, sc.ID, sc.Action, errs.ErrInvalid)
	}
	return nil
}

// scheduleTimes formats the optional times of sc.
func scheduleTimes(sc store.Schedule) (next, last any, err error) {
	if next, err = formatTimePtr(sc.NextRunAt); err != nil {
		return nil, nil, fmt.Errorf("next_run_at: %w", err)
	}
	if last, err = formatTimePtr(sc.LastRunAt); err != nil {
		return nil, nil, fmt.Errorf("last_run_at: %w", err)
	}
	return next, last, nil
}

func normSchedule(sc store.Schedule) store.Schedule {
	sc.CreatedAt, sc.UpdatedAt = normTime(sc.CreatedAt), normTime(sc.UpdatedAt)
	sc.NextRunAt, sc.LastRunAt = normTimePtr(sc.NextRunAt), normTimePtr(sc.LastRunAt)
	return sc
}

// CreateSchedule stores a new schedule of one of the tenant's sandboxes.
func (s *Store) CreateSchedule(ctx context.Context, sc store.Schedule) (store.Schedule, error) {
	if err := checkSchedule("create schedule", sc); err != nil {
		return store.Schedule{}, err
	}
	if sc.CreatedAt.IsZero() {
		sc.CreatedAt = now()
	}
	if sc.UpdatedAt.IsZero() {
		sc.UpdatedAt = sc.CreatedAt
	}
	sc = normSchedule(sc)
	created, err := FormatTime(sc.CreatedAt)
	if err != nil {
		return store.Schedule{}, fmt.Errorf("create schedule %s: %w", sc.ID, err)
	}
	updated, err := FormatTime(sc.UpdatedAt)
	if err != nil {
		return store.Schedule{}, fmt.Errorf("create schedule %s: %w", sc.ID, err)
	}
	next, last, err := scheduleTimes(sc)
	if err != nil {
		return store.Schedule{}, fmt.Errorf("create schedule %s: %w", sc.ID, err)
	}
	err = s.writeTx(ctx, func(tx *txn) error {
		var n int
		if err := tx.QueryRowContext(ctx, "SELECT COUNT(*) FROM sandboxes WHERE id = ? AND tenant_id = ?", sc.SandboxID, sc.TenantID).Scan(&n); err != nil {
			return err
		}
		if n == 0 {
			return fmt.Errorf("sandbox %s: %w", sc.SandboxID, errs.ErrNotFound)
		}
		_, err := tx.ExecContext(ctx, "INSERT INTO schedules ("+scheduleCols+") VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
			sc.ID, sc.TenantID, sc.SandboxID, sc.Cron, sc.TZ, sc.Action, sc.Enabled, next, last, sc.LastResult, sc.LastError, created, updated)
		if s.isUnique(err) {
			return fmt.Errorf("id taken: %w", errs.ErrConflict)
		}
		return err
	})
	if err != nil {
		return store.Schedule{}, fmt.Errorf("create schedule %s: %w", sc.ID, err)
	}
	return sc, nil
}

// GetSchedule returns the tenant's schedule id.
func (s *Store) GetSchedule(ctx context.Context, tenantID, id string) (store.Schedule, error) {
	row := s.r.QueryRowContext(ctx, "SELECT "+scheduleCols+" FROM schedules WHERE tenant_id = ? AND id = ?", tenantID, id)
	sc, err := scanSchedule(row)
	if errors.Is(err, sql.ErrNoRows) {
		return store.Schedule{}, fmt.Errorf("get schedule %s: %w", id, errs.ErrNotFound)
	}
	if err != nil {
		return store.Schedule{}, fmt.Errorf("get schedule %s: %w", id, err)
	}
	return sc, nil
}

// ListSchedules returns the tenant's schedules ("" = every tenant), of one
// sandbox when sandboxID is set, ordered by creation, then id.
func (s *Store) ListSchedules(ctx context.Context, tenantID, sandboxID string) ([]store.Schedule, error) {
	q := "SELECT " + scheduleCols + " FROM schedules WHERE (? = '' OR tenant_id = ?) AND (? = '' OR sandbox_id = ?) ORDER BY created_at, id"
	return queryAll(ctx, s.r, "list schedules", scanSchedule, q, tenantID, tenantID, sandboxID, sandboxID)
}

// UpdateSchedule stores the changeable fields of a schedule.
func (s *Store) UpdateSchedule(ctx context.Context, sc store.Schedule) (store.Schedule, error) {
	if err := checkSchedule("update schedule", sc); err != nil {
		return store.Schedule{}, err
	}
	if sc.UpdatedAt.IsZero() {
		sc.UpdatedAt = now()
	}
	sc = normSchedule(sc)
	updated, err := FormatTime(sc.UpdatedAt)
	if err != nil {
		return store.Schedule{}, fmt.Errorf("update schedule %s: %w", sc.ID, err)
	}
	next, last, err := scheduleTimes(sc)
	if err != nil {
		return store.Schedule{}, fmt.Errorf("update schedule %s: %w", sc.ID, err)
	}
	out, err := updateOne(ctx, s, scanSchedule, `UPDATE schedules SET cron = ?, tz = ?, action = ?, enabled = ?, next_run_at = ?,
			last_run_at = ?, last_result = ?, last_error = ?, updated_at = ? WHERE tenant_id = ? AND id = ?`,
		[]any{sc.Cron, sc.TZ, sc.Action, sc.Enabled, next, last, sc.LastResult, sc.LastError, updated, sc.TenantID, sc.ID},
		"SELECT "+scheduleCols+" FROM schedules WHERE id = ?", sc.ID)
	if err != nil {
		return store.Schedule{}, fmt.Errorf("update schedule %s: %w", sc.ID, err)
	}
	return out, nil
}

// DeleteSchedule removes the tenant's schedule id.
func (s *Store) DeleteSchedule(ctx context.Context, tenantID, id string) error {
	res, err := s.w.ExecContext(ctx, "DELETE FROM schedules WHERE tenant_id = ? AND id = ?", tenantID, id)
	if err != nil {
		return fmt.Errorf("delete schedule %s: %w", id, err)
	}
	return deleted(res, "delete schedule", id)
}

// DueSchedules returns the enabled schedules due at now, every tenant's,
// the most overdue first.
func (s *Store) DueSchedules(ctx context.Context, at time.Time) ([]store.Schedule, error) {
	t, err := FormatTime(at)
	if err != nil {
		return nil, fmt.Errorf("due schedules: %w", err)
	}
	rows, err := s.r.QueryContext(ctx, "SELECT "+scheduleCols+" FROM schedules WHERE enabled = 1 AND next_run_at IS NOT NULL AND next_run_at <= ? ORDER BY next_run_at, id", t)
	if err != nil {
		return nil, fmt.Errorf("due schedules: %w", err)
	}
	defer rows.Close()
	out, err := scanAll(rows, scanSchedule)
	if err != nil {
		return nil, fmt.Errorf("due schedules: %w", err)
	}
	return out, nil
}

func scanSchedule(sc scanner) (store.Schedule, error) {
	var out store.Schedule
	var next, last sql.NullString
	var created, updated string
	if err := sc.Scan(&out.ID, &out.TenantID, &out.SandboxID, &out.Cron, &out.TZ, &out.Action, &out.Enabled,
		&next, &last, &out.LastResult, &out.LastError, &created, &updated); err != nil {
		return store.Schedule{}, err
	}
	var err error
	if out.NextRunAt, err = parseTimePtr(next); err != nil {
		return store.Schedule{}, err
	}
	if out.LastRunAt, err = parseTimePtr(last); err != nil {
		return store.Schedule{}, err
	}
	if out.CreatedAt, err = parseTime(created); err != nil {
		return store.Schedule{}, err
	}
	if out.UpdatedAt, err = parseTime(updated); err != nil {
		return store.Schedule{}, err
	}
	return out, nil
}
