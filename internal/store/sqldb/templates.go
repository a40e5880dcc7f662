package sqldb

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/stead-dev/stead/internal/errs"
	"github.com/stead-dev/stead/internal/store"
)

const templateCols = "tenant_id, id, kind, source, digest, config, size_bytes, created_at"

// CreateTemplate stores t. Template ids are unique per tenant. A zero
// CreatedAt is set to the current time. It returns errs.ErrConflict when the
// tenant already has the id, errs.ErrNotFound when the tenant does not exist
// and errs.ErrInvalid for an empty id or tenant.
func (s *Store) CreateTemplate(ctx context.Context, t store.Template) error {
	switch {
	case t.ID == "":
		return fmt.Errorf("create template: empty id: %w", errs.ErrInvalid)
	case t.TenantID == "":
		return fmt.Errorf("create template %s: empty tenant: %w", t.ID, errs.ErrInvalid)
	}
	if t.CreatedAt.IsZero() {
		t.CreatedAt = now()
	}
	created, err := FormatTime(t.CreatedAt)
	if err != nil {
		return fmt.Errorf("create template %s: created_at: %w", t.ID, err)
	}
	_, err = s.w.ExecContext(ctx, "INSERT INTO templates ("+templateCols+") VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
		t.TenantID, t.ID, t.Kind, t.Source, t.Digest, t.Config, t.SizeBytes, created)
	switch {
	case s.isUnique(err):
		return fmt.Errorf("create template %s: id already taken: %w", t.ID, errs.ErrConflict)
	case s.isForeignKey(err):
		return fmt.Errorf("create template %s: tenant %s: %w", t.ID, t.TenantID, errs.ErrNotFound)
	case err != nil:
		return fmt.Errorf("create template %s: %w", t.ID, err)
	}
	return nil
}

// GetTemplate returns the tenant's template, or errs.ErrNotFound.
func (s *Store) GetTemplate(ctx context.Context, tenantID, id string) (store.Template, error) {
	row := s.r.QueryRowContext(ctx, "SELECT "+templateCols+" FROM templates WHERE tenant_id = ? AND id = ?", tenantID, id)
	t, err := scanTemplate(row)
	if errors.Is(err, sql.ErrNoRows) {
		return store.Template{}, fmt.Errorf("get template %s: %w", id, errs.ErrNotFound)
	}
	if err != nil {
		return store.Template{}, fmt.Errorf("get template %s: %w", id, err)
	}
	return t, nil
}

// ListTemplates returns the tenant's templates ordered by CreatedAt, then ID.
func (s *Store) ListTemplates(ctx context.Context, tenantID string) ([]store.Template, error) {
	rows, err := s.r.QueryContext(ctx,
		"SELECT "+templateCols+" FROM templates WHERE tenant_id = ? ORDER BY created_at, id", tenantID)
	if err != nil {
		return nil, fmt.Errorf("list templates of tenant %s: %w", tenantID, err)
	}
	defer rows.Close()
	out, err := scanAll(rows, scanTemplate)
	if err != nil {
		return nil, fmt.Errorf("list templates of tenant %s: %w", tenantID, err)
	}
	return out, nil
}

// DeleteTemplate removes the tenant's template, or returns errs.ErrNotFound.
// Sandboxes cloned from it keep their TemplateID.
func (s *Store) DeleteTemplate(ctx context.Context, tenantID, id string) error {
	res, err := s.w.ExecContext(ctx, "DELETE FROM templates WHERE tenant_id = ? AND id = ?", tenantID, id)
	if err != nil {
		return fmt.Errorf("delete template %s: %w", id, err)
	}
	return deleted(res, "delete template", id)
}

func scanTemplate(sc scanner) (store.Template, error) {
	var t store.Template
	var created string
	if err := sc.Scan(&t.TenantID, &t.ID, &t.Kind, &t.Source, &t.Digest, &t.Config, &t.SizeBytes, &created); err != nil {
		return store.Template{}, err
	}
	var err error
	if t.CreatedAt, err = parseTime(created); err != nil {
		return store.Template{}, err
	}
	return t, nil
}
