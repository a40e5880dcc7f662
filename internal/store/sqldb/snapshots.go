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

const snapshotCols = "tenant_id, id, sandbox_id, sandbox_name, parent_id, label, description, kind, frozen_ns, created_at, template_id, spec"

// CreateSnapshot stores a snapshot record.
func (s *Store) CreateSnapshot(ctx context.Context, sn store.Snapshot) error {
	switch {
	case sn.ID == "":
		return fmt.Errorf("create snapshot: empty id: %w", errs.ErrInvalid)
	case sn.TenantID == "", sn.SandboxID == "", sn.Kind == "":
		return fmt.Errorf("create snapshot %s: empty tenant, sandbox or kind: %w", sn.ID, errs.ErrInvalid)
	}
	if sn.CreatedAt.IsZero() {
		sn.CreatedAt = now()
	}
	created, err := FormatTime(sn.CreatedAt)
	if err != nil {
		return fmt.Errorf("create snapshot %s: created_at: %w", sn.ID, err)
	}
	_, err = s.w.ExecContext(ctx, "INSERT INTO snapshots ("+snapshotCols+") VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
		sn.TenantID, sn.ID, sn.SandboxID, sn.SandboxName, sn.ParentID, sn.Label, sn.Description, sn.Kind, int64(sn.FrozenFor), created, sn.TemplateID, sn.Spec)
	switch {
	case s.isUnique(err):
		return fmt.Errorf("create snapshot %s: id already taken: %w", sn.ID, errs.ErrConflict)
	case s.isForeignKey(err):
		return fmt.Errorf("create snapshot %s: tenant %s: %w", sn.ID, sn.TenantID, errs.ErrNotFound)
	case err != nil:
		return fmt.Errorf("create snapshot %s: %w", sn.ID, err)
	}
	return nil
}

// GetSnapshot returns the tenant's snapshot, or errs.ErrNotFound.
func (s *Store) GetSnapshot(ctx context.Context, tenantID, id string) (store.Snapshot, error) {
	row := s.r.QueryRowContext(ctx, "SELECT "+snapshotCols+" FROM snapshots WHERE tenant_id = ? AND id = ?", tenantID, id)
	sn, err := scanSnapshot(row)
	if errors.Is(err, sql.ErrNoRows) {
		return store.Snapshot{}, fmt.Errorf("get snapshot %s: %w", id, errs.ErrNotFound)
	}
	if err != nil {
		return store.Snapshot{}, fmt.Errorf("get snapshot %s: %w", id, err)
	}
	return sn, nil
}

// ListSnapshots returns the tenant's snapshots (of one sandbox when
// sandboxID is not "") ordered by CreatedAt, then ID.
func (s *Store) ListSnapshots(ctx context.Context, tenantID, sandboxID string) ([]store.Snapshot, error) {
	q := "SELECT " + snapshotCols + " FROM snapshots WHERE tenant_id = ?"
	args := []any{tenantID}
	if sandboxID != "" {
		q += " AND sandbox_id = ?"
		args = append(args, sandboxID)
	}
	return queryAll(ctx, s.r, "list snapshots", scanSnapshot, q+" ORDER BY created_at, id", args...)
}

// DeleteSnapshot removes the tenant's snapshot record, or returns
// errs.ErrNotFound.
func (s *Store) DeleteSnapshot(ctx context.Context, tenantID, id string) error {
	res, err := s.w.ExecContext(ctx, "DELETE FROM snapshots WHERE tenant_id = ? AND id = ?", tenantID, id)
	if err != nil {
		return fmt.Errorf("delete snapshot %s: %w", id, err)
	}
	return deleted(res, "delete snapshot", id)
}

func scanSnapshot(sc scanner) (store.Snapshot, error) {
	var sn store.Snapshot
	var created string
	var frozen int64
	if err := sc.Scan(&sn.TenantID, &sn.ID, &sn.SandboxID, &sn.SandboxName, &sn.ParentID, &sn.Label, &sn.Description, &sn.Kind, &frozen, &created, &sn.TemplateID, &sn.Spec); err != nil {
		return store.Snapshot{}, err
	}
	sn.FrozenFor = time.Duration(frozen)
	var err error
	if sn.CreatedAt, err = parseTime(created); err != nil {
		return store.Snapshot{}, err
	}
	return sn, nil
}
