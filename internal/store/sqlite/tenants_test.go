package sqlite

import (
	"database/sql"
	"path/filepath"
	"testing"

	"github.com/stead-dev/stead/internal/store"
)

// TestMigrationMapsAdminFlagToRoles: keys made before roles existed keep
// working: an admin key becomes "admin", any other "tenant-admin"; tenants
// are active.
func TestMigrationMapsAdminFlagToRoles(t *testing.T) {
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "stead.db")
	ms, err := loadMigrations()
	if err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open("sqlite", path+"?_pragma=foreign_keys(1)")
	if err != nil {
		t.Fatal(err)
	}
	if err := migrate(ctx, db, ms[:10]); err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{
		`INSERT INTO api_keys (id, tenant_id, name, hash, admin, created_at) VALUES ('k-admin', 'default', 'a', x'01', 1, '2026-11-30T12:00:00.000000000Z')`,
		`INSERT INTO api_keys (id, tenant_id, name, hash, admin, created_at) VALUES ('k-user', 'default', 'u', x'02', 0, '2026-11-30T12:00:00.000000000Z')`,
	} {
		if _, err := db.ExecContext(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	db.Close()
	s := openAt(t, path)
	defer s.Close()
	for hash, want := range map[byte]string{1: store.RoleAdmin, 2: store.RoleTenantAdmin} {
		k, err := s.LookupAPIKey(ctx, []byte{hash})
		if err != nil || k.Role != want || !k.Scope.IsZero() || k.ExpiresAt != nil {
			t.Errorf("key %d after migration: %+v %v, want role %s", hash, k, err, want)
		}
	}
	tn, err := s.GetTenant(ctx, store.DefaultTenant)
	if err != nil || tn.State != store.TenantActive {
		t.Errorf("default tenant after migration: %+v %v", tn, err)
	}
}
