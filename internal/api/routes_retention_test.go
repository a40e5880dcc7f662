package api

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"testing"

	"github.com/stead-dev/stead/client"
	"github.com/stead-dev/stead/internal/errs"
)

// retentionFake keeps policies per tenant; "t-alice" and "acme" exist,
// and a value "bad" is refused as the service refuses bad durations.
type retentionFake struct {
	*fakeBackend
	mu  sync.Mutex
	set map[string]client.RetentionPolicy
}

func newRetentionFake() *retentionFake {
	return &retentionFake{fakeBackend: &fakeBackend{}, set: map[string]client.RetentionPolicy{}}
}

var _ RetentionBackend = (*retentionFake)(nil)

func (f *retentionFake) GetRetention(_ context.Context, tenant string) (client.TenantRetention, error) {
	f.record("GetRetention", "", tenant) // the id: an admin names any tenant
	f.mu.Lock()
	defer f.mu.Unlock()
	return client.TenantRetention{Tenant: tenant, Set: f.set[tenant]}, nil
}

func (f *retentionFake) SetRetention(_ context.Context, tenant string, p client.RetentionPolicy) (client.TenantRetention, error) {
	f.record("SetRetention", "", tenant)
	if p.WarnBefore == "bad" {
		return client.TenantRetention{}, fmt.Errorf("warn_before %q: want a duration like 3d: %w", p.WarnBefore, errs.ErrInvalid)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.set[tenant] = p
	return client.TenantRetention{Tenant: tenant, Set: p}, nil
}

// TestRetentionRoutesActInTheRightTenant: GET /v1/retention reads the
// caller's own tenant; the tenant routes name theirs and need an admin
// key; a value the backend refuses is a 400 and nothing is stored.
func TestRetentionRoutesActInTheRightTenant(t *testing.T) {
	f := newRetentionFake()
	ctx := testCtx(t)
	alice, _ := newTestServer(t, f, aliceKey)
	r, err := alice.GetRetention(ctx)
	if err != nil || r.Tenant != "t-alice" {
		t.Fatalf("own retention: %+v %v", r, err)
	}
	if _, err := alice.SetTenantRetention(ctx, "t-alice", client.RetentionPolicy{WarnBefore: "1d"}); !client.IsForbidden(err) {
		t.Fatalf("a tenant key sets a tenant's retention: %v, want 403", err)
	}
	if _, err := alice.GetTenantRetention(ctx, "t-alice"); !client.IsForbidden(err) {
		t.Fatalf("a tenant key reads the tenant route: %v, want 403", err)
	}
	admin, _ := newTestServer(t, f, adminKey)
	got, err := admin.SetTenantRetention(ctx, "acme", client.RetentionPolicy{PurgeDeletedAfter: "2d", WarnBefore: "1d"})
	if err != nil || got.Tenant != "acme" || got.Set.PurgeDeletedAfter != "2d" {
		t.Fatalf("admin set: %+v %v", got, err)
	}
	_, err = admin.SetTenantRetention(ctx, "acme", client.RetentionPolicy{WarnBefore: "bad"})
	if client.StatusCode(err) != http.StatusBadRequest {
		t.Fatalf("bad value: %v, want 400", err)
	}
	if got, err := admin.GetTenantRetention(ctx, "acme"); err != nil || got.Set.PurgeDeletedAfter != "2d" || got.Set.WarnBefore != "1d" {
		t.Fatalf("after the refused set: %+v %v", got, err)
	}
	if len(f.set) != 1 {
		t.Fatalf("stored for %v, want acme alone", f.set)
	}
}
