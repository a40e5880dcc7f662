package sandbox

import (
	"context"
	"errors"
	"strings"
	"testing"

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
