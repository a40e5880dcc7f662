package tenancy

import (
	"context"
	"errors"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stead-dev/stead/client"
	"github.com/stead-dev/stead/internal/api"
	"github.com/stead-dev/stead/internal/errs"
	"github.com/stead-dev/stead/internal/store"
	"github.com/stead-dev/stead/internal/store/sqlite"
)

// newTenancy is a service on a real store, bootstrapped (the default
// tenant with its admin key), on the clock now (nil: time.Now).
func newTenancy(t *testing.T, now func() time.Time) *Service {
	t.Helper()
	st, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "stead.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	s := New(Options{Store: st, Now: now})
	if _, err := s.Bootstrap(t.Context(), nil); err != nil {
		t.Fatal(err)
	}
	return s
}

// testClock is a clock the test moves.
type testClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *testClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *testClock) add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// tenantAdmin returns the principal of a tenant-admin key of tenant.
func tenantAdmin(t *testing.T, s *Service, tenant string) (api.Principal, string) {
	t.Helper()
	k, err := s.CreateAPIKey(context.Background(), api.Principal{TenantID: tenant, Admin: true},
		client.CreateAPIKeyRequest{Name: "ops", Role: client.RoleTenantAdmin})
	if err != nil {
		t.Fatal(err)
	}
	p, err := s.Authenticate(context.Background(), k.Secret)
	if err != nil || p.EffectiveRole() != client.RoleTenantAdmin || p.TenantID != tenant {
		t.Fatalf("authenticate new key: %+v %v", p, err)
	}
	return p, k.Secret
}

// TestKeyRotationKeepsTheOldSecretForTheOverlapOnly: after a rotation both
// secrets work until the overlap ends; then the old one is refused and the
// new one, with the same name, role and scope, goes on. A rotated key is
// not rotated twice; a revoked key stops at once; an expiry is kept.
func TestKeyRotationKeepsTheOldSecretForTheOverlapOnly(t *testing.T) {
	clock := &testClock{t: time.Now()}
	s := newTenancy(t, clock.now)
	ctx := context.Background()
	p, _ := tenantAdmin(t, s, store.DefaultTenant)
	k, err := s.CreateAPIKey(ctx, p, client.CreateAPIKeyRequest{Name: "ci", Role: client.RoleReadOnly,
		Labels: map[string]string{"team": "research"}, ExpiresIn: "48h"})
	if err != nil {
		t.Fatal(err)
	}
	next, err := s.RotateAPIKey(ctx, p, k.ID, client.RotateAPIKeyRequest{Overlap: "1h"})
	if err != nil {
		t.Fatal(err)
	}
	if next.ID == k.ID || next.Secret == "" || next.Secret == k.Secret || next.Role != client.RoleReadOnly ||
		next.Name != "ci" || next.Labels["team"] != "research" || next.ExpiresAt == nil || !next.ExpiresAt.Equal(*k.ExpiresAt) {
		t.Fatalf("successor %+v of %+v", next, k)
	}
	for _, secret := range []string{k.Secret, next.Secret} {
		if got, err := s.Authenticate(ctx, secret); err != nil || got.Labels["team"] != "research" {
			t.Fatalf("within the overlap: %+v %v", got, err)
		}
	}
	keys, _ := s.ListAPIKeys(ctx, p)
	for _, lk := range keys {
		if lk.ID == k.ID && (lk.RotatedTo != next.ID || lk.ExpiresAt == nil || !lk.ExpiresAt.Equal(clock.now().UTC().Add(time.Hour))) {
			t.Fatalf("the rotated key is listed as %+v", lk)
		}
	}
	if _, err := s.RotateAPIKey(ctx, p, k.ID, client.RotateAPIKeyRequest{}); !errors.Is(err, errs.ErrConflict) {
		t.Fatalf("second rotation of one key: %v, want a conflict", err)
	}
	clock.add(time.Hour)
	if _, err := s.Authenticate(ctx, k.Secret); !errors.Is(err, errs.ErrUnauthenticated) {
		t.Fatalf("old secret after the overlap: %v, want refused", err)
	}
	if _, err := s.Authenticate(ctx, next.Secret); err != nil {
		t.Fatalf("new secret after the overlap: %v", err)
	}
	clock.add(47 * time.Hour)
	if _, err := s.Authenticate(ctx, next.Secret); !errors.Is(err, errs.ErrUnauthenticated) {
		t.Fatalf("new secret past the key's expiry: %v, want refused", err)
	}
	// Default overlap 24h, and revocation.
	k2, _ := s.CreateAPIKey(ctx, p, client.CreateAPIKeyRequest{Name: "bot"})
	n2, err := s.RotateAPIKey(ctx, p, k2.ID, client.RotateAPIKeyRequest{})
	if err != nil {
		t.Fatal(err)
	}
	clock.add(24*time.Hour - time.Second)
	if _, err := s.Authenticate(ctx, k2.Secret); err != nil {
		t.Fatalf("old secret inside the default overlap: %v", err)
	}
	if err := s.RevokeAPIKey(ctx, p, n2.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Authenticate(ctx, n2.Secret); !errors.Is(err, errs.ErrUnauthenticated) {
		t.Fatalf("revoked key: %v", err)
	}
	if _, err := s.RotateAPIKey(ctx, p, k2.ID, client.RotateAPIKeyRequest{Overlap: "soon"}); !errors.Is(err, errs.ErrInvalid) {
		t.Fatalf("bad overlap: %v", err)
	}
}

// TestKeysNeverOutrankTheKeyThatManagesThem: a tenant-admin makes and
// manages keys of its role or below, never an admin key; bad scopes and
// roles change nothing; another tenant's key is absent.
func TestKeysNeverOutrankTheKeyThatManagesThem(t *testing.T) {
	s := newTenancy(t, nil)
	ctx := context.Background()
	if _, err := s.CreateTenant(ctx, client.CreateTenantRequest{ID: "acme"}); err != nil {
		t.Fatal(err)
	}
	p, _ := tenantAdmin(t, s, store.DefaultTenant)
	before, _ := s.ListAPIKeys(ctx, p)
	for _, req := range []client.CreateAPIKeyRequest{
		{Name: "x", Role: client.RoleAdmin},
		{Name: "x", Admin: true},
	} {
		if _, err := s.CreateAPIKey(ctx, p, req); !errors.Is(err, errs.ErrForbidden) {
			t.Fatalf("tenant-admin makes %+v: %v, want forbidden", req, err)
		}
	}
	for _, req := range []client.CreateAPIKeyRequest{
		{Name: "x", Role: "root"},
		{Name: "x", Sandboxes: []string{"a"}, Labels: map[string]string{"a": "b"}},
		{Name: "x", Labels: map[string]string{"bad key": "v"}},
		{Name: "x", Labels: map[string]string{"k": "a,b"}},
		{Name: "x", Sandboxes: []string{""}},
		{Name: "x", ExpiresIn: "-1h"},
	} {
		if _, err := s.CreateAPIKey(ctx, p, req); !errors.Is(err, errs.ErrInvalid) {
			t.Fatalf("create %+v: %v, want invalid", req, err)
		}
	}
	if after, _ := s.ListAPIKeys(ctx, p); len(after) != len(before) {
		t.Fatalf("refused creates stored keys: %d → %d", len(before), len(after))
	}
	var adminKey client.APIKey
	for _, k := range before {
		if k.Role == client.RoleAdmin {
			adminKey = k
		}
	}
	if adminKey.ID == "" {
		t.Fatalf("no admin key among %+v", before)
	}
	if err := s.RevokeAPIKey(ctx, p, adminKey.ID); !errors.Is(err, errs.ErrForbidden) {
		t.Fatalf("tenant-admin revokes the admin key: %v", err)
	}
	if _, err := s.RotateAPIKey(ctx, p, adminKey.ID, client.RotateAPIKeyRequest{}); !errors.Is(err, errs.ErrForbidden) {
		t.Fatalf("tenant-admin rotates the admin key: %v", err)
	}
	acme, _ := tenantAdmin(t, s, "acme")
	if err := s.RevokeAPIKey(ctx, acme, adminKey.ID); !errors.Is(err, errs.ErrNotFound) {
		t.Fatalf("another tenant revokes a key: %v, want not found", err)
	}
	user, err := s.CreateAPIKey(ctx, p, client.CreateAPIKeyRequest{Name: "dev"})
	if err != nil || user.Role != client.RoleTenantUser {
		t.Fatalf("default role: %+v %v", user, err)
	}
	up, _ := s.Authenticate(ctx, user.Secret)
	if _, err := s.CreateAPIKey(ctx, up, client.CreateAPIKeyRequest{Name: "y", Role: client.RoleReadOnly}); !errors.Is(err, errs.ErrForbidden) {
		t.Fatalf("a tenant-user makes a key: %v", err)
	}
}
