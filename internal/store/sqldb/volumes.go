package sqldb

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/stead-dev/stead/internal/errs"
	"github.com/stead-dev/stead/internal/store"
)

const volumeCols = "tenant_id, id, name, size_bytes, state, created_at, deleted_at, purge_at, origin, node"

// CreateVolume stores a volume record.
func (s *Store) CreateVolume(ctx context.Context, v store.Volume) error {
	switch {
	case v.ID == "":
		return fmt.Errorf("create volume: empty id: %w", errs.ErrInvalid)
	case v.TenantID == "", v.Name == "", v.State == "":
		return fmt.Errorf("create volume %s: empty tenant, name or state: %w", v.ID, errs.ErrInvalid)
	}
	if v.CreatedAt.IsZero() {
		v.CreatedAt = now()
	}
	created, err := FormatTime(v.CreatedAt)
	if err != nil {
		return fmt.Errorf("create volume %s: created_at: %w", v.ID, err)
	}
	del, err := formatTimePtr(v.DeletedAt)
	if err != nil {
		return fmt.Errorf("create volume %s: deleted_at: %w", v.ID, err)
	}
	purge, err := formatTimePtr(v.PurgeAt)
	if err != nil {
		return fmt.Errorf("create volume %s: purge_at: %w", v.ID, err)
	}
	_, err = s.w.ExecContext(ctx, "INSERT INTO volumes ("+volumeCols+") VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
		v.TenantID, v.ID, v.Name, v.SizeBytes, v.State, created, del, purge, v.Origin, v.Node)
	switch {
	case s.isUnique(err):
		return fmt.Errorf("create volume %s: id or name %q already taken: %w", v.ID, v.Name, errs.ErrConflict)
	case s.isForeignKey(err):
		return fmt.Errorf("create volume %s: tenant %s: %w", v.ID, v.TenantID, errs.ErrNotFound)
	case err != nil:
		return fmt.Errorf("create volume %s: %w", v.ID, err)
	}
	return nil
}

// GetVolume finds the tenant's volume by id, or by name.
func (s *Store) GetVolume(ctx context.Context, tenantID, idOrName string) (store.Volume, error) {
	row := s.r.QueryRowContext(ctx, "SELECT "+volumeCols+" FROM volumes WHERE tenant_id = ? AND (id = ? OR name = ?) ORDER BY id = ? DESC LIMIT 1",
		tenantID, idOrName, idOrName, idOrName)
	v, err := scanVolume(row)
	if errors.Is(err, sql.ErrNoRows) {
		return store.Volume{}, fmt.Errorf("get volume %s: %w", idOrName, errs.ErrNotFound)
	}
	if err != nil {
		return store.Volume{}, fmt.Errorf("get volume %s: %w", idOrName, err)
	}
	return v, nil
}

// ListVolumes returns volumes ordered by CreatedAt, then ID.
func (s *Store) ListVolumes(ctx context.Context, tenantID string, includeDeleted bool) ([]store.Volume, error) {
	q := "SELECT " + volumeCols + " FROM volumes WHERE (? = '' OR tenant_id = ?)"
	if !includeDeleted {
		q += " AND state <> 'deleted'"
	}
	rows, err := s.r.QueryContext(ctx, q+" ORDER BY created_at, id", tenantID, tenantID)
	if err != nil {
		return nil, fmt.Errorf("list volumes: %w", err)
	}
	defer rows.Close()
	out, err := scanAll(rows, scanVolume)
	if err != nil {
		return nil, fmt.Errorf("list volumes: %w", err)
	}
	return out, nil
}

// UpdateVolume stores a volume's size, state, deletion times and node.
func (s *Store) UpdateVolume(ctx context.Context, v store.Volume) error {
	if v.State == "" {
		return fmt.Errorf("update volume %s: empty state: %w", v.ID, errs.ErrInvalid)
	}
	del, err := formatTimePtr(v.DeletedAt)
	if err != nil {
		return fmt.Errorf("update volume %s: deleted_at: %w", v.ID, err)
	}
	purge, err := formatTimePtr(v.PurgeAt)
	if err != nil {
		return fmt.Errorf("update volume %s: purge_at: %w", v.ID, err)
	}
	res, err := s.w.ExecContext(ctx, "UPDATE volumes SET size_bytes = ?, state = ?, deleted_at = ?, purge_at = ?, node = ? WHERE tenant_id = ? AND id = ?",
		v.SizeBytes, v.State, del, purge, v.Node, v.TenantID, v.ID)
	if err != nil {
		return fmt.Errorf("update volume %s: %w", v.ID, err)
	}
	return deleted(res, "update volume", v.ID)
}

// DeleteVolume removes the tenant's volume record.
func (s *Store) DeleteVolume(ctx context.Context, tenantID, id string) error {
	res, err := s.w.ExecContext(ctx, "DELETE FROM volumes WHERE tenant_id = ? AND id = ?", tenantID, id)
	if err != nil {
		return fmt.Errorf("delete volume %s: %w", id, err)
	}
	return deleted(res, "delete volume", id)
}

func scanVolume(sc scanner) (store.Volume, error) {
	var v store.Volume
	var created string
	var del, purge sql.NullString
	if err := sc.Scan(&v.TenantID, &v.ID, &v.Name, &v.SizeBytes, &v.State, &created, &del, &purge, &v.Origin, &v.Node); err != nil {
		return store.Volume{}, err
	}
	var err error
	if v.CreatedAt, err = parseTime(created); err != nil {
		return store.Volume{}, err
	}
	if v.DeletedAt, err = parseTimePtr(del); err != nil {
		return store.Volume{}, err
	}
	if v.PurgeAt, err = parseTimePtr(purge); err != nil {
		return store.Volume{}, err
	}
	return v, nil
}
