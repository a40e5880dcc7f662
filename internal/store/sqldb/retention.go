package sqldb

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/stead-dev/stead/internal/errs"
	"github.com/stead-dev/stead/internal/store"
)

const (
	retentionPolicyCols  = "tenant_id, archive_stopped_after, delete_archived_after, purge_deleted_after, warn_before, session_keep_within, observations_keep_within, updated_at"
	retentionWarningCols = "tenant_id, subject_kind, subject_id, action, due_at, warned_at"
)

// GetRetentionPolicy returns the tenant's stored retention policy.
func (s *Store) GetRetentionPolicy(ctx context.Context, tenantID string) (store.RetentionPolicy, error) {
	row := s.r.QueryRowContext(ctx, "SELECT "+retentionPolicyCols+" FROM retention_policies WHERE tenant_id = ?", tenantID)
	p, err := scanRetentionPolicy(row)
	if errors.Is(err, sql.ErrNoRows) {
		return store.RetentionPolicy{}, fmt.Errorf("get retention policy of tenant %s: %w", tenantID, errs.ErrNotFound)
	}
	if err != nil {
		return store.RetentionPolicy{}, fmt.Errorf("get retention policy of tenant %s: %w", tenantID, err)
	}
	return p, nil
}

// PutRetentionPolicy replaces the tenant's retention policy.
func (s *Store) PutRetentionPolicy(ctx context.Context, p store.RetentionPolicy) (store.RetentionPolicy, error) {
	if p.TenantID == "" {
		return store.RetentionPolicy{}, fmt.Errorf("put retention policy: empty tenant: %w", errs.ErrInvalid)
	}
	for _, d := range []*time.Duration{p.ArchiveStoppedAfter, p.DeleteArchivedAfter, p.PurgeDeletedAfter, p.WarnBefore, p.SessionKeepWithin, p.ObservationsKeepWithin} {
		if d != nil && *d < 0 {
			return store.RetentionPolicy{}, fmt.Errorf("put retention policy of tenant %s: negative duration %s: %w", p.TenantID, *d, errs.ErrInvalid)
		}
	}
	if p.UpdatedAt.IsZero() {
		p.UpdatedAt = now()
	}
	p.UpdatedAt = normTime(p.UpdatedAt)
	updated, err := FormatTime(p.UpdatedAt)
	if err != nil {
		return store.RetentionPolicy{}, fmt.Errorf("put retention policy of tenant %s: %w", p.TenantID, err)
	}
	_, err = s.w.ExecContext(ctx, "INSERT INTO retention_policies ("+retentionPolicyCols+") VALUES (?, ?, ?, ?, ?, ?, ?, ?) "+
		"ON CONFLICT (tenant_id) DO UPDATE SET archive_stopped_after = excluded.archive_stopped_after, "+
		"delete_archived_after = excluded.delete_archived_after, purge_deleted_after = excluded.purge_deleted_after, "+
		"warn_before = excluded.warn_before, session_keep_within = excluded.session_keep_within, "+
		"observations_keep_within = excluded.observations_keep_within, updated_at = excluded.updated_at",
		p.TenantID, durArg(p.ArchiveStoppedAfter), durArg(p.DeleteArchivedAfter), durArg(p.PurgeDeletedAfter), durArg(p.WarnBefore),
		durArg(p.SessionKeepWithin), durArg(p.ObservationsKeepWithin), updated)
	if s.isForeignKey(err) {
		return store.RetentionPolicy{}, fmt.Errorf("put retention policy: tenant %s: %w", p.TenantID, errs.ErrNotFound)
	}
	if err != nil {
		return store.RetentionPolicy{}, fmt.Errorf("put retention policy of tenant %s: %w", p.TenantID, err)
	}
	return p, nil
}

// RecordRetentionWarning stores w once per subject, action and due time.
func (s *Store) RecordRetentionWarning(ctx context.Context, w store.RetentionWarning) (store.RetentionWarning, bool, error) {
	if w.TenantID == "" || w.SubjectKind == "" || w.SubjectID == "" || w.Action == "" {
		return store.RetentionWarning{}, false, fmt.Errorf("record retention warning: empty tenant, subject or action: %w", errs.ErrInvalid)
	}
	if w.WarnedAt.IsZero() {
		w.WarnedAt = now()
	}
	w.WarnedAt, w.DueAt = normTime(w.WarnedAt), normTime(w.DueAt)
	due, err := FormatTime(w.DueAt)
	if err != nil {
		return store.RetentionWarning{}, false, fmt.Errorf("record retention warning: due_at: %w", err)
	}
	warned, err := FormatTime(w.WarnedAt)
	if err != nil {
		return store.RetentionWarning{}, false, fmt.Errorf("record retention warning: warned_at: %w", err)
	}
	var stored store.RetentionWarning
	created := false
	err = s.writeTx(ctx, func(tx *txn) error {
		res, err := tx.ExecContext(ctx, "INSERT INTO retention_warnings ("+retentionWarningCols+") VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING",
			w.TenantID, w.SubjectKind, w.SubjectID, w.Action, due, warned)
		if s.isForeignKey(err) {
			return fmt.Errorf("tenant %s: %w", w.TenantID, errs.ErrNotFound)
		}
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil {
			return err
		} else if n == 1 {
			created, stored = true, w
			return nil
		}
		stored, err = scanRetentionWarning(tx.QueryRowContext(ctx, "SELECT "+retentionWarningCols+" FROM retention_warnings "+
			"WHERE tenant_id = ? AND subject_kind = ? AND subject_id = ? AND action = ? AND due_at = ?",
			w.TenantID, w.SubjectKind, w.SubjectID, w.Action, due))
		return err
	})
	if err != nil {
		return store.RetentionWarning{}, false, fmt.Errorf("record retention warning of %s %s: %w", w.SubjectKind, w.SubjectID, err)
	}
	return stored, created, nil
}

// GetRetentionWarning returns the warning of one subject, action and due
// time.
func (s *Store) GetRetentionWarning(ctx context.Context, tenantID, kind, id, action string, due time.Time) (store.RetentionWarning, error) {
	d, err := FormatTime(normTime(due))
	if err != nil {
		return store.RetentionWarning{}, fmt.Errorf("get retention warning of %s %s: %w", kind, id, err)
	}
	w, err := scanRetentionWarning(s.r.QueryRowContext(ctx, "SELECT "+retentionWarningCols+" FROM retention_warnings "+
		"WHERE tenant_id = ? AND subject_kind = ? AND subject_id = ? AND action = ? AND due_at = ?", tenantID, kind, id, action, d))
	if errors.Is(err, sql.ErrNoRows) {
		return store.RetentionWarning{}, fmt.Errorf("get retention warning of %s %s: %w", kind, id, errs.ErrNotFound)
	}
	if err != nil {
		return store.RetentionWarning{}, fmt.Errorf("get retention warning of %s %s: %w", kind, id, err)
	}
	return w, nil
}

// ListRetentionWarnings returns the tenant's warnings of one subject (or
// all).
func (s *Store) ListRetentionWarnings(ctx context.Context, tenantID, kind, id string) ([]store.RetentionWarning, error) {
	q := "SELECT " + retentionWarningCols + " FROM retention_warnings WHERE tenant_id = ?"
	args := []any{tenantID}
	if kind != "" || id != "" {
		q += " AND subject_kind = ? AND subject_id = ?"
		args = append(args, kind, id)
	}
	rows, err := s.r.QueryContext(ctx, q+" ORDER BY warned_at, due_at, action", args...)
	if err != nil {
		return nil, fmt.Errorf("list retention warnings: %w", err)
	}
	defer rows.Close()
	out, err := scanAll(rows, scanRetentionWarning)
	if err != nil {
		return nil, fmt.Errorf("list retention warnings: %w", err)
	}
	return out, nil
}

// DeleteRetentionWarnings forgets every warning of one subject.
func (s *Store) DeleteRetentionWarnings(ctx context.Context, tenantID, kind, id string) error {
	if _, err := s.w.ExecContext(ctx, "DELETE FROM retention_warnings WHERE tenant_id = ? AND subject_kind = ? AND subject_id = ?", tenantID, kind, id); err != nil {
		return fmt.Errorf("delete retention warnings of %s %s: %w", kind, id, err)
	}
	return nil
}

// durArg is an optional duration as a column value (nil: NULL).
func durArg(d *time.Duration) any {
	if d == nil {
		return nil
	}
	return int64(*d)
}

func durPtr(n sql.NullInt64) *time.Duration {
	if !n.Valid {
		return nil
	}
	d := time.Duration(n.Int64)
	return &d
}

func scanRetentionPolicy(sc scanner) (store.RetentionPolicy, error) {
	var p store.RetentionPolicy
	var a, d, pu, w, sk, ok sql.NullInt64
	var updated string
	if err := sc.Scan(&p.TenantID, &a, &d, &pu, &w, &sk, &ok, &updated); err != nil {
		return store.RetentionPolicy{}, err
	}
	p.ArchiveStoppedAfter, p.DeleteArchivedAfter, p.PurgeDeletedAfter, p.WarnBefore = durPtr(a), durPtr(d), durPtr(pu), durPtr(w)
	p.SessionKeepWithin, p.ObservationsKeepWithin = durPtr(sk), durPtr(ok)
	var err error
	if p.UpdatedAt, err = parseTime(updated); err != nil {
		return store.RetentionPolicy{}, err
	}
	return p, nil
}

func scanRetentionWarning(sc scanner) (store.RetentionWarning, error) {
	var w store.RetentionWarning
	var due, warned string
	if err := sc.Scan(&w.TenantID, &w.SubjectKind, &w.SubjectID, &w.Action, &due, &warned); err != nil {
		return store.RetentionWarning{}, err
	}
	var err error
	if w.DueAt, err = parseTime(due); err != nil {
		return store.RetentionWarning{}, err
	}
	if w.WarnedAt, err = parseTime(warned); err != nil {
		return store.RetentionWarning{}, err
	}
	return w, nil
}
