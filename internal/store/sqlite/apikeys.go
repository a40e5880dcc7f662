package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/stead-dev/stead/internal/errs"
	"github.com/stead-dev/stead/internal/store"
)

const apiKeyCols = "id, tenant_id, name, hash, admin, created_at"

// CreateAPIKey stores k. A zero CreatedAt is set to the current time. It
// returns errs.ErrConflict when the id or the hash is taken, errs.ErrNotFound
// when the tenant does not exist and errs.ErrInvalid for an empty id, tenant
// or hash.
func (s *Store) CreateAPIKey(ctx context.Context, k store.APIKey) error {
	switch {
	case k.ID == "":
		return fmt.Errorf("create api key: empty id: %w", errs.ErrInvalid)
	case k.TenantID == "":
		return fmt.Errorf("create api key %s: empty tenant: %w", k.ID, errs.ErrInvalid)
	case len(k.Hash) == 0:
		return fmt.Errorf("create api key %s: empty hash: %w", k.ID, errs.ErrInvalid)
	}
	if k.CreatedAt.IsZero() {
		k.CreatedAt = now()
	}
	created, err := formatTime(k.CreatedAt)
	if err != nil {
		return fmt.Errorf("create api key %s: created_at: %w", k.ID, err)
	}
	_, err = s.w.ExecContext(ctx, "INSERT INTO api_keys ("+apiKeyCols+") VALUES (?, ?, ?, ?, ?, ?)",
		k.ID, k.TenantID, k.Name, k.Hash, k.Admin, created)
	switch {
	case isUnique(err):
		return fmt.Errorf("create api key %s: id or secret already taken: %w", k.ID, errs.ErrConflict)
	case isForeignKey(err):
		return fmt.Errorf("create api key %s: tenant %s: %w", k.ID, k.TenantID, errs.ErrNotFound)
	case err != nil:
		return fmt.Errorf("create api key %s: %w", k.ID, err)
	}
	return nil
}

// LookupAPIKey finds a key by the hash of its secret, in any tenant, or
// returns errs.ErrNotFound.
func (s *Store) LookupAPIKey(ctx context.Context, hash []byte) (store.APIKey, error) {
	if len(hash) == 0 {
		return store.APIKey{}, fmt.Errorf("lookup api key: %w", errs.ErrNotFound)
	}
	row := s.r.QueryRowContext(ctx, "SELECT "+apiKeyCols+" FROM api_keys WHERE hash = ?", hash)
	k, err := scanAPIKey(row)
	if errors.Is(err, sql.ErrNoRows) {
		return store.APIKey{}, fmt.Errorf("lookup api key: %w", errs.ErrNotFound)
	}
	if err != nil {
		return store.APIKey{}, fmt.Errorf("lookup api key: %w", err)
	}
	return k, nil
}

// ListAPIKeys returns the tenant's keys ordered by CreatedAt, then ID.
func (s *Store) ListAPIKeys(ctx context.Context, tenantID string) ([]store.APIKey, error) {
	rows, err := s.r.QueryContext(ctx,
		"SELECT "+apiKeyCols+" FROM api_keys WHERE tenant_id = ? ORDER BY created_at, id", tenantID)
	if err != nil {
		return nil, fmt.Errorf("list api keys of tenant %s: %w", tenantID, err)
	}
	defer rows.Close()
	out, err := scanAll(rows, scanAPIKey)
	if err != nil {
		return nil, fmt.Errorf("list api keys of tenant %s: %w", tenantID, err)
	}
	return out, nil
}

// DeleteAPIKey removes the tenant's key, or returns errs.ErrNotFound.
func (s *Store) DeleteAPIKey(ctx context.Context, tenantID, id string) error {
	res, err := s.w.ExecContext(ctx, "DELETE FROM api_keys WHERE tenant_id = ? AND id = ?", tenantID, id)
	if err != nil {
		return fmt.Errorf("delete api key %s: %w", id, err)
	}
	return deleted(res, "delete api key", id)
}

func scanAPIKey(sc scanner) (store.APIKey, error) {
	var k store.APIKey
	var created string
	if err := sc.Scan(&k.ID, &k.TenantID, &k.Name, &k.Hash, &k.Admin, &created); err != nil {
		return store.APIKey{}, err
	}
	var err error
	if k.CreatedAt, err = parseTime(created); err != nil {
		return store.APIKey{}, err
	}
	return k, nil
}

// deleted turns a DELETE that matched no row into errs.ErrNotFound.
func deleted(res sql.Result, verb, id string) error {
	n, err := res.RowsAffected()
	if err != nil {
		return fmt.Errorf("%s %s: %w", verb, id, err)
	}
	if n == 0 {
		return fmt.Errorf("%s %s: %w", verb, id, errs.ErrNotFound)
	}
	return nil
}
