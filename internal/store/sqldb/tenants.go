package sqldb

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/stead-dev/stead/internal/errs"
	"github.com/stead-dev/stead/internal/store"
)

const tenantCols = "id, name, state, created_at, suspended_at"

// CreateTenant stores t. A zero CreatedAt is set to the current time and
// an empty State to store.TenantActive. It returns errs.ErrConflict when
// the id is taken and errs.ErrInvalid for an empty id or an unknown state.
func (s *Store) CreateTenant(ctx context.Context, t store.Tenant) error {
	if t.ID == "" {
		return fmt.Errorf("create tenant: empty id: %w", errs.ErrInvalid)
	}
	if t.State == "" {
		t.State = store.TenantActive
	}
	if !validTenantState(t.State) {
		return fmt.Errorf("create tenant %s: state %q: %w", t.ID, t.State, errs.ErrInvalid)
	}
	if t.CreatedAt.IsZero() {
		t.CreatedAt = now()
	}
	created, err := FormatTime(t.CreatedAt)
	if err != nil {
		return fmt.Errorf("create tenant %s: created_at: %w", t.ID, err)
	}
	suspended, err := formatTimePtr(t.SuspendedAt)
	if err != nil {
		return fmt.Errorf("create tenant %s: suspended_at: %w", t.ID, err)
	}
	_, err = s.w.ExecContext(ctx, "INSERT INTO tenants ("+tenantCols+") VALUES (?, ?, ?, ?, ?)",
		t.ID, t.Name, t.State, created, suspended)
	if s.isUnique(err) {
		return fmt.Errorf("create tenant %s: id already taken: %w", t.ID, errs.ErrConflict)
	}
	if err != nil {
		return fmt.Errorf("create tenant %s: %w", t.ID, err)
	}
	return nil
}

func validTenantState(st string) bool {
	return st == store.TenantActive || st == store.TenantSuspended
}

// GetTenant returns the tenant with the given id, or errs.ErrNotFound.
func (s *Store) GetTenant(ctx context.Context, id string) (store.Tenant, error) {
	row := s.r.QueryRowContext(ctx, "SELECT "+tenantCols+" FROM tenants WHERE id = ?", id)
	t, err := scanTenant(row)
	if errors.Is(err, sql.ErrNoRows) {
		return store.Tenant{}, fmt.Errorf("get tenant %s: %w", id, errs.ErrNotFound)
	}
	if err != nil {
		return store.Tenant{}, fmt.Errorf("get tenant %s: %w", id, err)
	}
	return t, nil
}

// ListTenants returns every tenant ordered by CreatedAt, then ID.
func (s *Store) ListTenants(ctx context.Context) ([]store.Tenant, error) {
	rows, err := s.r.QueryContext(ctx, "SELECT "+tenantCols+" FROM tenants ORDER BY created_at, id")
	if err != nil {
		return nil, fmt.Errorf("list tenants: %w", err)
	}
	defer rows.Close()
	out, err := scanAll(rows, scanTenant)
	if err != nil {
		return nil, fmt.Errorf("list tenants: %w", err)
	}
	return out, nil
}

// UpdateTenant stores t's Name, State and SuspendedAt.
func (s *Store) UpdateTenant(ctx context.Context, t store.Tenant) error {
	if t.State == "" {
		t.State = store.TenantActive
	}
	if !validTenantState(t.State) {
		return fmt.Errorf("update tenant %s: state %q: %w", t.ID, t.State, errs.ErrInvalid)
	}
	suspended, err := formatTimePtr(t.SuspendedAt)
	if err != nil {
		return fmt.Errorf("update tenant %s: suspended_at: %w", t.ID, err)
	}
	res, err := s.w.ExecContext(ctx, "UPDATE tenants SET name = ?, state = ?, suspended_at = ? WHERE id = ?",
		t.Name, t.State, suspended, t.ID)
	if err != nil {
		return fmt.Errorf("update tenant %s: %w", t.ID, err)
	}
	return deleted(res, "update tenant", t.ID)
}

// DeleteTenant removes the tenant with its keys and template records; see
// store.Store.
func (s *Store) DeleteTenant(ctx context.Context, id string) error {
	return s.writeTx(ctx, func(tx *txn) error {
		var n int
		if err := tx.QueryRowContext(ctx, "SELECT COUNT(*) FROM tenants WHERE id = ?", id).Scan(&n); err != nil {
			return fmt.Errorf("delete tenant %s: %w", id, err)
		}
		if n == 0 {
			return fmt.Errorf("delete tenant %s: %w", id, errs.ErrNotFound)
		}
		for _, table := range []string{"sandboxes", "volumes", "snapshots"} {
			if err := tx.QueryRowContext(ctx, "SELECT COUNT(*) FROM "+table+" WHERE tenant_id = ?", id).Scan(&n); err != nil {
				return fmt.Errorf("delete tenant %s: count %s: %w", id, table, err)
			}
			if n > 0 {
				return fmt.Errorf("delete tenant %s: it still has %d %s (purge them first): %w", id, n, table, errs.ErrConflict)
			}
		}
		for _, q := range []string{
			"DELETE FROM api_keys WHERE tenant_id = ?",
			"DELETE FROM templates WHERE tenant_id = ?",
			"DELETE FROM meter_intervals WHERE tenant_id = ?",
			"DELETE FROM meter_storage WHERE tenant_id = ?",
			"DELETE FROM retention_warnings WHERE tenant_id = ?",
			"DELETE FROM retention_policies WHERE tenant_id = ?",
			"DELETE FROM tenants WHERE id = ?",
		} {
			if _, err := tx.ExecContext(ctx, q, id); err != nil {
				return fmt.Errorf("delete tenant %s: %w", id, err)
			}
		}
		return nil
	})
}

// scanner is a *sql.Row or *sql.Rows.
// scanAll reads every row with scan; an empty result is an empty, non-nil
// slice.
func scanAll[T any](rows *sql.Rows, scan func(scanner) (T, error)) ([]T, error) {
	out := []T{}
	for rows.Next() {
		v, err := scan(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, rows.Err()
}

type scanner interface {
	Scan(dest ...any) error
}

func scanTenant(sc scanner) (store.Tenant, error) {
	var t store.Tenant
	var created string
	var suspended sql.NullString
	if err := sc.Scan(&t.ID, &t.Name, &t.State, &created, &suspended); err != nil {
		return store.Tenant{}, err
	}
	var err error
	if t.CreatedAt, err = parseTime(created); err != nil {
		return store.Tenant{}, err
	}
	if t.SuspendedAt, err = parseTimePtr(suspended); err != nil {
		return store.Tenant{}, err
	}
	return t, nil
}
