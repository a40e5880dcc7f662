package sqldb

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/stead-dev/stead/internal/errs"
	"github.com/stead-dev/stead/internal/store"
)

const apiKeyCols = "id, tenant_id, name, hash, role, scope, expires_at, rotated_to, created_at"

// validRole reports whether r is one of the store.Role* constants.
func validRole(r string) bool {
	switch r {
	case store.RoleAdmin, store.RoleTenantAdmin, store.RoleTenantUser, store.RoleReadOnly:
		return true
	}
	return false
}

// CreateAPIKey stores k. A zero CreatedAt is set to the current time. It
// returns errs.ErrConflict when the id or the hash is taken, errs.ErrNotFound
// when the tenant does not exist and errs.ErrInvalid for an empty id, tenant
// or hash, or an unknown role. An empty Role is stored as
// store.RoleTenantAdmin.
func (s *Store) CreateAPIKey(ctx context.Context, k store.APIKey) error {
	if k.Role == "" {
		k.Role = store.RoleTenantAdmin
	}
	switch {
	case k.ID == "":
		return fmt.Errorf("create api key: empty id: %w", errs.ErrInvalid)
	case k.TenantID == "":
		return fmt.Errorf("create api key %s: empty tenant: %w", k.ID, errs.ErrInvalid)
	case len(k.Hash) == 0:
		return fmt.Errorf("create api key %s: empty hash: %w", k.ID, errs.ErrInvalid)
	case !validRole(k.Role):
		return fmt.Errorf("create api key %s: role %q: %w", k.ID, k.Role, errs.ErrInvalid)
	}
	if k.CreatedAt.IsZero() {
		k.CreatedAt = now()
	}
	created, err := FormatTime(k.CreatedAt)
	if err != nil {
		return fmt.Errorf("create api key %s: created_at: %w", k.ID, err)
	}
	expires, err := formatTimePtr(k.ExpiresAt)
	if err != nil {
		return fmt.Errorf("create api key %s: expires_at: %w", k.ID, err)
	}
	scope := ""
	if !k.Scope.IsZero() {
		b, err := json.Marshal(k.Scope)
		if err != nil {
			return fmt.Errorf("create api key %s: scope: %w", k.ID, err)
		}
		scope = string(b)
	}
	_, err = s.w.ExecContext(ctx, "INSERT INTO api_keys ("+apiKeyCols+", admin) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
		k.ID, k.TenantID, k.Name, k.Hash, k.Role, scope, expires, k.RotatedTo, created, k.Role == store.RoleAdmin)
	switch {
	case s.isUnique(err):
		return fmt.Errorf("create api key %s: id or secret already taken: %w", k.ID, errs.ErrConflict)
	case s.isForeignKey(err):
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

// GetAPIKey returns the tenant's key by id, or errs.ErrNotFound.
func (s *Store) GetAPIKey(ctx context.Context, tenantID, id string) (store.APIKey, error) {
	row := s.r.QueryRowContext(ctx, "SELECT "+apiKeyCols+" FROM api_keys WHERE tenant_id = ? AND id = ?", tenantID, id)
	k, err := scanAPIKey(row)
	if errors.Is(err, sql.ErrNoRows) {
		return store.APIKey{}, fmt.Errorf("get api key %s: %w", id, errs.ErrNotFound)
	}
	if err != nil {
		return store.APIKey{}, fmt.Errorf("get api key %s: %w", id, err)
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

// UpdateAPIKey stores k's Name, ExpiresAt and RotatedTo, or returns errs.ErrNotFound.
func (s *Store) UpdateAPIKey(ctx context.Context, k store.APIKey) error {
	expires, err := formatTimePtr(k.ExpiresAt)
	if err != nil {
		return fmt.Errorf("update api key %s: expires_at: %w", k.ID, err)
	}
	res, err := s.w.ExecContext(ctx, "UPDATE api_keys SET name = ?, expires_at = ?, rotated_to = ? WHERE tenant_id = ? AND id = ?",
		k.Name, expires, k.RotatedTo, k.TenantID, k.ID)
	if err != nil {
		return fmt.Errorf("update api key %s: %w", k.ID, err)
	}
	return deleted(res, "update api key", k.ID)
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
	var created, scope string
	var expires sql.NullString
	if err := sc.Scan(&k.ID, &k.TenantID, &k.Name, &k.Hash, &k.Role, &scope, &expires, &k.RotatedTo, &created); err != nil {
		return store.APIKey{}, err
	}
	var err error
	if k.CreatedAt, err = parseTime(created); err != nil {
		return store.APIKey{}, err
	}
	if k.ExpiresAt, err = parseTimePtr(expires); err != nil {
		return store.APIKey{}, err
	}
	if scope != "" {
		if err := json.Unmarshal([]byte(scope), &k.Scope); err != nil {
			return store.APIKey{}, fmt.Errorf("decode scope of api key %s: %w", k.ID, err)
		}
	}
	return k, nil
}

// deleted turns a DELETE (or UPDATE) that matched no row into
// errs.ErrNotFound.
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
