package sandbox

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stead-dev/stead/client"
	"github.com/stead-dev/stead/internal/api"
	"github.com/stead-dev/stead/internal/errs"
	"github.com/stead-dev/stead/internal/store"
)

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
	s := newService(t)
	clock := &testClock{t: time.Now()}
	s.opts.Now = clock.now
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
	s := newService(t)
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

// TestSuspendedTenantsKeysAreRefusedAndItsSandboxesStopped: suspension
// refuses the tenant's keys with a 403 that says why and stops its running
// sandbox; unsuspending lets the keys in again and leaves the sandbox
// stopped. The default tenant can be neither suspended nor deleted.
func TestSuspendedTenantsKeysAreRefusedAndItsSandboxesStopped(t *testing.T) {
	s := newService(t)
	ctx := context.Background()
	if _, err := s.CreateTenant(ctx, client.CreateTenantRequest{ID: "acme"}); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []string{"", "Acme", "-a", "a_b", strings.Repeat("a", 49)} {
		if _, err := s.CreateTenant(ctx, client.CreateTenantRequest{ID: bad}); !errors.Is(err, errs.ErrInvalid) {
			t.Fatalf("tenant id %q: %v", bad, err)
		}
	}
	if _, err := s.CreateTenant(ctx, client.CreateTenantRequest{ID: "acme"}); !errors.Is(err, errs.ErrConflict) {
		t.Fatalf("second acme: %v", err)
	}
	_, secret := tenantAdmin(t, s, "acme")
	sb, err := s.CreateSandbox(ctx, "acme", client.CreateSandboxRequest{Name: "w"})
	if err != nil {
		t.Fatal(err)
	}
	tn, err := s.SuspendTenant(ctx, "acme")
	if err != nil || tn.State != store.TenantSuspended || tn.SuspendedAt == nil {
		t.Fatalf("suspend: %+v %v", tn, err)
	}
	_, err = s.Authenticate(ctx, secret)
	if !errors.Is(err, errs.ErrForbidden) || !strings.Contains(err.Error(), "suspended") {
		t.Fatalf("key of a suspended tenant: %v", err)
	}
	if got, _ := s.GetSandbox(ctx, "acme", sb.ID); got.State != "stopped" || got.StopReason != "tenant_suspended" {
		t.Fatalf("sandbox of a suspended tenant: %s (%s)", got.State, got.StopReason)
	}
	// Nothing starts it while suspended (a port's wake calls this too).
	if _, err := s.StartSandbox(ctx, "acme", sb.ID); !errors.Is(err, errs.ErrForbidden) {
		t.Fatalf("start in a suspended tenant: %v", err)
	}
	if _, err := s.UnsuspendTenant(ctx, "acme"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Authenticate(ctx, secret); err != nil {
		t.Fatalf("after unsuspend: %v", err)
	}
	if got, _ := s.GetSandbox(ctx, "acme", sb.ID); got.State != "stopped" {
		t.Fatalf("unsuspend started the sandbox: %s", got.State)
	}
	if _, err := s.SuspendTenant(ctx, store.DefaultTenant); !errors.Is(err, errs.ErrForbidden) {
		t.Fatalf("suspend default: %v", err)
	}
	if _, err := s.DeleteTenant(ctx, store.DefaultTenant); !errors.Is(err, errs.ErrForbidden) {
		t.Fatalf("delete default: %v", err)
	}
	if _, err := s.DeleteTenant(ctx, "ghost"); !errors.Is(err, errs.ErrNotFound) {
		t.Fatalf("delete absent tenant: %v", err)
	}
}

// TestDeletingATenantPurgesItAndErasesItsPushedData: deleting a tenant
// purges its sandboxes, volumes and snapshots, revokes its keys and
// destroys its repository data key: a restore of its push fails even with
// its data objects put back and the tenant made again, while the default
// tenant's push still restores.
func TestDeletingATenantPurgesItAndErasesItsPushedData(t *testing.T) {
	s := newService(t)
	withRepo(t, s, t.TempDir())
	ctx := context.Background()
	if _, err := s.InitRepo(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := s.CreateTenant(ctx, client.CreateTenantRequest{ID: "acme"}); err != nil {
		t.Fatal(err)
	}
	_, secret := tenantAdmin(t, s, "acme")
	if _, err := s.CreateVolume(ctx, "acme", client.CreateVolumeRequest{Name: "data"}); err != nil {
		t.Fatal(err)
	}
	pushOne := func(tenant, name, content string) client.PushResult {
		sb, err := s.CreateSandbox(ctx, tenant, client.CreateSandboxRequest{Name: name, Labels: map[string]string{"team": "x"}})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.WriteFile(ctx, tenant, sb.ID, "/workspace/notes.md", 0o644, strings.NewReader(content)); err != nil {
			t.Fatal(err)
		}
		var pr client.PushResult
		op, err := s.PushSandbox(ctx, tenant, sb.ID, client.PushRequest{Wait: true})
		opDone(t, op, err, &pr)
		return pr
	}
	acmePush := pushOne("acme", "w", "acme's secret notes")
	defPush := pushOne(store.DefaultTenant, "d", "default's notes")

	bs := s.opts.Repo.Store
	scope := "scopes/" + tenantScope("acme") + "/"
	objs, err := bs.List(ctx, scope)
	if err != nil || len(objs) < 3 {
		t.Fatalf("acme's repository objects: %d %v", len(objs), err)
	}
	saved := map[string][]byte{}
	for _, o := range objs {
		if strings.HasSuffix(o.Key, "/key") {
			continue // the data key: what deletion must destroy
		}
		b, err := bs.Get(ctx, o.Key)
		if err != nil {
			t.Fatal(err)
		}
		saved[o.Key] = b
	}

	d, err := s.DeleteTenant(ctx, "acme")
	if err != nil {
		t.Fatal(err)
	}
	if d.Sandboxes != 1 || d.Volumes != 1 || d.Keys != 1 || !strings.Contains(strings.Join(d.ErasedScopes, ","), tenantScope("acme")) {
		t.Fatalf("deletion report %+v", d)
	}
	if _, err := s.Authenticate(ctx, secret); !errors.Is(err, errs.ErrUnauthenticated) {
		t.Fatalf("key of a deleted tenant: %v", err)
	}
	if _, err := s.GetTenant(ctx, "acme"); !errors.Is(err, errs.ErrNotFound) {
		t.Fatalf("deleted tenant: %v", err)
	}
	for _, kind := range []string{"sandboxes", "volumes", "snapshots"} {
		ids, _ := s.pool.List(ctx, kind)
		for _, id := range ids {
			if sb, err := s.st.GetSandbox(ctx, store.DefaultTenant, id); kind == "sandboxes" && (err != nil || sb.TenantID != store.DefaultTenant) {
				t.Errorf("pool keeps %s/%s after the tenant's deletion", kind, id)
			}
		}
	}
	if left, _ := bs.List(ctx, scope); len(left) != 0 {
		t.Fatalf("%d objects left in the erased scope", len(left))
	}

	// The data objects come back (a bucket's old versions), the key does
	// not: nothing of it can be read, not even by a new tenant of that id.
	for k, b := range saved {
		if err := bs.Put(ctx, k, b); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.CreateTenant(ctx, client.CreateTenantRequest{ID: "acme"}); err != nil {
		t.Fatal(err)
	}
	op, err := s.RestoreRemote(ctx, "acme", client.RestoreRequest{Snapshot: acmePush.RemoteSnapshot.ID, Name: "back", Wait: true})
	if err == nil && op.State == "succeeded" {
		t.Fatalf("restore of an erased tenant's push succeeded: %+v", op)
	}
	var rr client.RestoreResult
	op, err = s.RestoreRemote(ctx, store.DefaultTenant, client.RestoreRequest{Snapshot: defPush.RemoteSnapshot.ID, Name: "back", Wait: true})
	opDone(t, op, err, &rr)
	if got := s.testRead(t, rr.Sandbox.ID, "/workspace/notes.md"); got != "default's notes" {
		t.Fatalf("the other tenant's restore: %q", got)
	}
}

// TestLabelsAreValidatedAndShown: bad labels refuse the create and store
// nothing; good ones are kept in the spec and shown.
func TestLabelsAreValidatedAndShown(t *testing.T) {
	s := newService(t)
	ctx := context.Background()
	for _, l := range []map[string]string{{"": "v"}, {"k": "v=w"}, {"-k": "v"}, {"k": strings.Repeat("v", 64)}} {
		if _, err := s.CreateSandbox(ctx, store.DefaultTenant, client.CreateSandboxRequest{Name: "bad", Labels: l, NoStart: true}); !errors.Is(err, errs.ErrInvalid) {
			t.Fatalf("labels %v: %v, want invalid", l, err)
		}
	}
	if list, _ := s.ListSandboxes(ctx, store.DefaultTenant, true); len(list) != 0 {
		t.Fatalf("refused creates left %d sandboxes", len(list))
	}
	sb, err := s.CreateSandbox(ctx, store.DefaultTenant, client.CreateSandboxRequest{Name: "ok", NoStart: true,
		Labels: map[string]string{"team": "research", "example.com/tier": "gold_1"}})
	if err != nil {
		t.Fatal(err)
	}
	got, _ := s.GetSandbox(ctx, store.DefaultTenant, sb.ID)
	if got.Labels["team"] != "research" || got.Labels["example.com/tier"] != "gold_1" {
		t.Fatalf("labels %v", got.Labels)
	}
}
