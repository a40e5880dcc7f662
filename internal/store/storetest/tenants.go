package storetest

import (
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/stead-dev/stead/internal/errs"
	"github.com/stead-dev/stead/internal/store"
)

// testTenantsSuspendAndDelete: a tenant is active when made, a suspension
// round-trips, and deleting the tenant removes it with its keys and
// template records (another tenant's stay).
func testTenantsSuspendAndDelete(t *testing.T, s store.Store) {
	ctx := t.Context()
	createTenant(t, s, "acme")
	createTenant(t, s, "other")
	got, err := s.GetTenant(ctx, "acme")
	noErr(t, err, "get tenant")
	if got.State != store.TenantActive || got.SuspendedAt != nil {
		t.Fatalf("new tenant: %+v, want active", got)
	}
	got.State, got.SuspendedAt = store.TenantSuspended, ptr(at(9))
	noErr(t, s.UpdateTenant(ctx, got), "suspend")
	got, err = s.GetTenant(ctx, "acme")
	noErr(t, err, "get tenant")
	if got.State != store.TenantSuspended || got.SuspendedAt == nil {
		t.Fatalf("suspended tenant: %+v", got)
	}
	checkTime(t, "suspended_at", *got.SuspendedAt, at(9))
	wantErr(t, s.UpdateTenant(ctx, store.Tenant{ID: "ghost"}), errs.ErrNotFound, "update absent tenant")
	wantErr(t, s.UpdateTenant(ctx, store.Tenant{ID: "acme", State: "asleep"}), errs.ErrInvalid, "unknown state")

	noErr(t, s.CreateAPIKey(ctx, store.APIKey{ID: "k1", TenantID: "acme", Hash: []byte("h1")}), "key")
	noErr(t, s.CreateAPIKey(ctx, store.APIKey{ID: "k2", TenantID: "other", Hash: []byte("h2")}), "other key")
	noErr(t, s.CreateTemplate(ctx, store.Template{ID: "alpine", TenantID: "acme", Kind: "oci"}), "template")
	// What the tenant was metered goes with it; another tenant's stays.
	for _, tn := range []string{"acme", "other"} {
		iv, err := s.OpenMeterInterval(ctx, store.MeterInterval{TenantID: tn, SandboxID: "sb-" + tn, InstanceType: "small", Start: at(2)})
		noErr(t, err, "open interval")
		_, err = s.CloseMeterInterval(ctx, iv.SandboxID, at(3))
		noErr(t, err, "close interval")
		noErr(t, s.AddStorageUsage(ctx, []store.StorageUsage{{TenantID: tn, Kind: store.StorageRepository, Day: at(2), ByteSeconds: 1, Bytes: 1}}), "storage usage")
	}
	noErr(t, s.DeleteTenant(ctx, "acme"), "delete tenant")
	for tn, want := range map[string]int{"acme": 0, "other": 1} {
		ivs, err := s.ListMeterIntervals(ctx, store.MeterFilter{TenantID: tn})
		noErr(t, err, "list intervals")
		use, err := s.ListStorageUsage(ctx, tn, time.Time{})
		noErr(t, err, "list storage usage")
		if len(ivs) != want || len(use) != want {
			t.Fatalf("tenant %s after deleting acme: %d intervals, %d storage rows, want %d of each", tn, len(ivs), len(use), want)
		}
	}
	_, err = s.GetTenant(ctx, "acme")
	wantErr(t, err, errs.ErrNotFound, "get deleted tenant")
	_, err = s.LookupAPIKey(ctx, []byte("h1"))
	wantErr(t, err, errs.ErrNotFound, "key of a deleted tenant")
	_, err = s.LookupAPIKey(ctx, []byte("h2"))
	noErr(t, err, "another tenant's key stays")
	wantErr(t, s.DeleteTenant(ctx, "acme"), errs.ErrNotFound, "delete tenant twice")
	// The id is free again, and the new tenant starts empty.
	createTenant(t, s, "acme")
	list, err := s.ListTemplates(ctx, "acme")
	noErr(t, err, "list templates")
	if len(list) != 0 {
		t.Fatalf("a re-made tenant inherits templates %+v", list)
	}
}

// testDeleteTenantRefusedWhileItHasSandboxes: the store never orphans a
// sandbox or a volume; the refusal changes nothing.
func testDeleteTenantRefusedWhileItHasSandboxes(t *testing.T, s store.Store) {
	ctx := t.Context()
	createTenant(t, s, "acme")
	noErr(t, s.CreateAPIKey(ctx, store.APIKey{ID: "k1", TenantID: "acme", Hash: []byte("h1")}), "key")
	_, err := s.CreateSandbox(ctx, newSandbox("sb1", "acme", "web", at(1)))
	noErr(t, err, "create sandbox")
	wantErr(t, s.DeleteTenant(ctx, "acme"), errs.ErrConflict, "delete tenant with a sandbox")
	_, err = s.LookupAPIKey(ctx, []byte("h1"))
	noErr(t, err, "the refused delete kept the key")
	noErr(t, s.DeleteSandbox(ctx, "acme", "sb1"), "purge sandbox")
	noErr(t, s.CreateVolume(ctx, store.Volume{ID: "vol1", TenantID: "acme", Name: "data", State: "available"}), "volume")
	wantErr(t, s.DeleteTenant(ctx, "acme"), errs.ErrConflict, "delete tenant with a volume")
	noErr(t, s.DeleteVolume(ctx, "acme", "vol1"), "purge volume")
	noErr(t, s.DeleteTenant(ctx, "acme"), "delete empty tenant")
}

// testAPIKeysKeepRoleScopeAndExpiry: role, scope and expiry round-trip;
// UpdateAPIKey changes only name and expiry, and only in the key's tenant.
func testAPIKeysKeepRoleScopeAndExpiry(t *testing.T, s store.Store) {
	ctx := t.Context()
	createTenant(t, s, "acme")
	createTenant(t, s, "other")
	in := store.APIKey{ID: "k1", TenantID: "acme", Name: "ci", Hash: []byte("h1"), Role: store.RoleReadOnly,
		Scope:     store.KeyScope{Sandboxes: []string{"web", "sb-x"}, Labels: map[string]string{"team": "research"}},
		ExpiresAt: ptr(at(30)), CreatedAt: at(1)}
	noErr(t, s.CreateAPIKey(ctx, in), "create key")
	wantErr(t, s.CreateAPIKey(ctx, store.APIKey{ID: "k2", TenantID: "acme", Hash: []byte("h2"), Role: "root"}), errs.ErrInvalid, "unknown role")
	got, err := s.GetAPIKey(ctx, "acme", "k1")
	noErr(t, err, "get key")
	if got.Role != in.Role || !slices.Equal(got.Scope.Sandboxes, in.Scope.Sandboxes) || !maps.Equal(got.Scope.Labels, in.Scope.Labels) || got.ExpiresAt == nil {
		t.Fatalf("got %+v, want %+v", got, in)
	}
	checkTime(t, "expires_at", *got.ExpiresAt, at(30))
	_, err = s.GetAPIKey(ctx, "other", "k1")
	wantErr(t, err, errs.ErrNotFound, "another tenant's key")
	wantErr(t, s.UpdateAPIKey(ctx, store.APIKey{ID: "k1", TenantID: "other"}), errs.ErrNotFound, "update another tenant's key")
	got.ExpiresAt, got.Name, got.Role, got.RotatedTo = ptr(at(5)), "ci-old", store.RoleAdmin, "k9"
	noErr(t, s.UpdateAPIKey(ctx, got), "update key")
	got, err = s.LookupAPIKey(ctx, []byte("h1"))
	noErr(t, err, "lookup key")
	if got.Name != "ci-old" || got.Role != store.RoleReadOnly || got.ExpiresAt == nil || got.RotatedTo != "k9" {
		t.Fatalf("after update: %+v (the role must not change)", got)
	}
	checkTime(t, "expires_at", *got.ExpiresAt, at(5))
	got.ExpiresAt = nil
	noErr(t, s.UpdateAPIKey(ctx, got), "clear expiry")
	got, err = s.GetAPIKey(ctx, "acme", "k1")
	noErr(t, err, "get key")
	if got.ExpiresAt != nil {
		t.Fatalf("expiry not cleared: %v", got.ExpiresAt)
	}
}
