package sqldb

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/stead-dev/stead/internal/errs"
	"github.com/stead-dev/stead/internal/store"
)

const secretCols = "tenant_id, name, sealed, created_at, updated_at"

// PutSecret creates or replaces the tenant's secret s.Name.
func (s *Store) PutSecret(ctx context.Context, sec store.Secret) (store.Secret, bool, error) {
	switch {
	case sec.TenantID == "", sec.Name == "":
		return store.Secret{}, false, fmt.Errorf("put secret %q: empty tenant or name: %w", sec.Name, errs.ErrInvalid)
	case len(sec.Sealed) == 0:
		return store.Secret{}, false, fmt.Errorf("put secret %s: empty sealed value: %w", sec.Name, errs.ErrInvalid)
	}
	if sec.UpdatedAt.IsZero() {
		sec.UpdatedAt = now()
	}
	sec.UpdatedAt = normTime(sec.UpdatedAt)
	updated, err := FormatTime(sec.UpdatedAt)
	if err != nil {
		return store.Secret{}, false, fmt.Errorf("put secret %s: updated_at: %w", sec.Name, err)
	}
	created := false
	err = s.writeTx(ctx, func(tx *txn) error {
		var first string
		err := tx.QueryRowContext(ctx, "SELECT created_at FROM secrets WHERE tenant_id = ? AND name = ?", sec.TenantID, sec.Name).Scan(&first)
		switch {
		case errors.Is(err, sql.ErrNoRows):
			created = true
			if sec.CreatedAt.IsZero() {
				sec.CreatedAt = sec.UpdatedAt
			}
			sec.CreatedAt = normTime(sec.CreatedAt)
			c, err := FormatTime(sec.CreatedAt)
			if err != nil {
				return fmt.Errorf("created_at: %w", err)
			}
			_, err = tx.ExecContext(ctx, "INSERT INTO secrets ("+secretCols+") VALUES (?, ?, ?, ?, ?)",
				sec.TenantID, sec.Name, sec.Sealed, c, updated)
			if s.isForeignKey(err) {
				return fmt.Errorf("tenant %s: %w", sec.TenantID, errs.ErrNotFound)
			}
			return err
		case err != nil:
			return err
		}
		if sec.CreatedAt, err = parseTime(first); err != nil {
			return err
		}
		_, err = tx.ExecContext(ctx, "UPDATE secrets SET sealed = ?, updated_at = ? WHERE tenant_id = ? AND name = ?",
			sec.Sealed, updated, sec.TenantID, sec.Name)
		return err
	})
	if err != nil {
		return store.Secret{}, false, fmt.Errorf("put secret %s: %w", sec.Name, err)
	}
	return sec, created, nil
}

// GetSecret returns the tenant's secret name.
func (s *Store) GetSecret(ctx context.Context, tenantID, name string) (store.Secret, error) {
	row := s.r.QueryRowContext(ctx, "SELECT "+secretCols+" FROM secrets WHERE tenant_id = ? AND name = ?", tenantID, name)
	sec, err := scanSecret(row)
	if errors.Is(err, sql.ErrNoRows) {
		return store.Secret{}, fmt.Errorf("get secret %s: %w", name, errs.ErrNotFound)
	}
	if err != nil {
		return store.Secret{}, fmt.Errorf("get secret %s: %w", name, err)
	}
	return sec, nil
}

// ListSecrets returns the tenant's secrets ordered by name.
func (s *Store) ListSecrets(ctx context.Context, tenantID string) ([]store.Secret, error) {
	rows, err := s.r.QueryContext(ctx, "SELECT "+secretCols+" FROM secrets WHERE tenant_id = ? ORDER BY name", tenantID)
	if err != nil {
		return nil, fmt.Errorf("list secrets: %w", err)
	}
	defer rows.Close()
	out, err := scanAll(rows, scanSecret)
	if err != nil {
		return nil, fmt.Errorf("list secrets: %w", err)
	}
	return out, nil
}

// DeleteSecret removes the tenant's secret name.
func (s *Store) DeleteSecret(ctx context.Context, tenantID, name string) error {
	res, err := s.w.ExecContext(ctx, "DELETE FROM secrets WHERE tenant_id = ? AND name = ?", tenantID, name)
	if err != nil {
		return fmt.Errorf("delete secret %s: %w", name, err)
	}
	return deleted(res, "delete secret", name)
}

func scanSecret(sc scanner) (store.Secret, error) {
	var sec store.Secret
	var created, updated string
	if err := sc.Scan(&sec.TenantID, &sec.Name, &sec.Sealed, &created, &updated); err != nil {
		return store.Secret{}, err
	}
	var err error
	if sec.CreatedAt, err = parseTime(created); err != nil {
		return store.Secret{}, err
	}
	if sec.UpdatedAt, err = parseTime(updated); err != nil {
		return store.Secret{}, err
	}
	return sec, nil
}
