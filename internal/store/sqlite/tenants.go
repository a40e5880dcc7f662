package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/stead-dev/stead/internal/errs"
	"github.com/stead-dev/stead/internal/store"
)

// CreateTenant stores t. A zero CreatedAt is set to the current time. It
// returns errs.ErrConflict when the id is taken and errs.ErrInvalid for an
// empty id.
func (s *Store) CreateTenant(ctx context.Context, t store.Tenant) error {
	if t.ID == "" {
		return fmt.Errorf("create tenant: empty id: %w", errs.ErrInvalid)
	}
	if t.CreatedAt.IsZero() {
		t.CreatedAt = now()
	}
	created, err := formatTime(t.CreatedAt)
	if err != nil {
		return fmt.Errorf("create tenant %s: created_at: %w", t.ID, err)
	}
	_, err = s.w.ExecContext(ctx, "INSERT INTO tenants (id, name, created_at) VALUES (?, ?, ?)",
		t.ID, t.Name, created)
	if isUnique(err) {
		return fmt.Errorf("create tenant %s: id already taken: %w", t.ID, errs.ErrConflict)
	}
	if err != nil {
		return fmt.Errorf("create tenant %s: %w", t.ID, err)
	}
	return nil
}

// GetTenant returns the tenant with the given id, or errs.ErrNotFound.
func (s *Store) GetTenant(ctx context.Context, id string) (store.Tenant, error) {
	row := s.r.QueryRowContext(ctx, "SELECT id, name, created_at FROM tenants WHERE id = ?", id)
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
	rows, err := s.r.QueryContext(ctx, "SELECT id, name, created_at FROM tenants ORDER BY created_at, id")
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
	if err := sc.Scan(&t.ID, &t.Name, &created); err != nil {
		return store.Tenant{}, err
	}
	var err error
	if t.CreatedAt, err = parseTime(created); err != nil {
		return store.Tenant{}, err
	}
	return t, nil
}
