package storetest

import (
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/stead-dev/stead/internal/errs"
	"github.com/stead-dev/stead/internal/store"
)

// testWarmPools checks the WarmPoolStore contract: set, replace, list in
// order and by tenant, delete, bad input refused with nothing stored, and
// a tenant's settings gone with the tenant.
func testWarmPools(t *testing.T, s store.Store) {
	ctx := t.Context()
	createTenant(t, s, "acme")
	createTenant(t, s, "beta")
	at := time.Date(2026, 12, 2, 7, 0, 0, 0, time.UTC)
	for _, p := range []store.WarmPool{
		{TenantID: "beta", TemplateID: "host", Size: 2, UpdatedAt: at},
		{TenantID: "acme", TemplateID: "py", Size: 0, UpdatedAt: at},
		{TenantID: "acme", TemplateID: "host", Size: 4, UpdatedAt: at},
	} {
		got, err := s.SetWarmPool(ctx, p)
		noErr(t, err, "set warm pool")
		if got != p {
			t.Fatalf("set answered %+v, want %+v", got, p)
		}
	}
	// Replacing keeps one row per tenant and template.
	_, err := s.SetWarmPool(ctx, store.WarmPool{TenantID: "acme", TemplateID: "host", Size: 7, UpdatedAt: at.Add(time.Minute)})
	noErr(t, err, "replace warm pool")
	all, err := s.ListWarmPools(ctx, "")
	noErr(t, err, "list warm pools")
	want := []string{"acme/host=7", "acme/py=0", "beta/host=2"}
	if len(all) != len(want) {
		t.Fatalf("list: %+v, want %v", all, want)
	}
	for i, p := range all {
		if got := p.TenantID + "/" + p.TemplateID + "=" + strconv.Itoa(p.Size); got != want[i] {
			t.Fatalf("list[%d] = %s, want %s (%+v)", i, got, want[i], all)
		}
	}
	checkTime(t, "replaced updated_at", all[0].UpdatedAt, at.Add(time.Minute))
	beta, err := s.ListWarmPools(ctx, "beta")
	noErr(t, err, "list one tenant's warm pools")
	if len(beta) != 1 || beta[0].TemplateID != "host" {
		t.Fatalf("beta's warm pools: %+v", beta)
	}

	// Bad input: refused, nothing stored.
	for _, p := range []store.WarmPool{
		{TenantID: "", TemplateID: "host", Size: 1},
		{TenantID: "acme", TemplateID: "", Size: 1},
		{TenantID: "acme", TemplateID: "host", Size: -1},
		{TenantID: "acme", TemplateID: "host", Size: store.MaxWarmPoolSize + 1},
	} {
		if _, err := s.SetWarmPool(ctx, p); !errors.Is(err, errs.ErrInvalid) {
			t.Fatalf("set %+v: %v, want ErrInvalid", p, err)
		}
	}
	if _, err := s.SetWarmPool(ctx, store.WarmPool{TenantID: "nobody", TemplateID: "host", Size: 1}); !errors.Is(err, errs.ErrNotFound) {
		t.Fatalf("set for an unknown tenant: %v, want ErrNotFound", err)
	}
	if after, _ := s.ListWarmPools(ctx, ""); len(after) != 3 || after[0].Size != 7 {
		t.Fatalf("bad input changed the settings: %+v", after)
	}

	// Delete: the default applies again; twice is not found.
	noErr(t, s.DeleteWarmPool(ctx, "acme", "py"), "delete warm pool")
	if err := s.DeleteWarmPool(ctx, "acme", "py"); !errors.Is(err, errs.ErrNotFound) {
		t.Fatalf("second delete: %v, want ErrNotFound", err)
	}
	// A tenant's settings go with it.
	noErr(t, s.DeleteTenant(ctx, "beta"), "delete tenant")
	if left, _ := s.ListWarmPools(ctx, "beta"); len(left) != 0 {
		t.Fatalf("a deleted tenant's warm pools stayed: %+v", left)
	}
	if left, _ := s.ListWarmPools(ctx, ""); len(left) != 1 || left[0].TenantID != "acme" || left[0].TemplateID != "host" {
		t.Fatalf("after deletes: %+v", left)
	}
}
