package api

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/stead-dev/stead/client"
)

// warmFake serves the warm pool routes.
type warmFake struct{ *fakeBackend }

var _ WarmPoolBackend = warmFake{}

func (f warmFake) ListWarmPools(context.Context) ([]client.WarmPool, error) {
	f.record("ListWarmPools", "", "")
	return []client.WarmPool{{Tenant: "default", Template: "host", Size: 2, Source: "default", Ready: 2}}, f.Err
}

func (f warmFake) SetWarmPool(_ context.Context, tenant, template string, size int) (client.WarmPool, error) {
	f.record("SetWarmPool", "", tenant+"/"+template)
	return client.WarmPool{Tenant: tenant, Template: template, Size: size, Source: "api"}, f.Err
}

func (f warmFake) DeleteWarmPool(_ context.Context, tenant, template string) error {
	f.record("DeleteWarmPool", "", tenant+"/"+template)
	return f.Err
}

// TestWarmPoolRoutes: the admin sets, lists and unsets sizes; a size out
// of range is refused before the backend; a tenant key may not.
func TestWarmPoolRoutes(t *testing.T) {
	f := warmFake{&fakeBackend{}}
	c, srv := newTestServer(t, f, adminKey)
	user, err := client.New(srv.URL, aliceKey)
	if err != nil {
		t.Fatal(err)
	}
	ctx := testCtx(t)
	p, err := c.SetWarmPool(ctx, "acme", "py", 3)
	if err != nil || p.Size != 3 || p.Tenant != "acme" || p.Template != "py" {
		t.Fatalf("set: %+v %v", p, err)
	}
	list, err := c.ListWarmPools(ctx)
	if err != nil || len(list) != 1 || list[0].Ready != 2 {
		t.Fatalf("list: %+v %v", list, err)
	}
	if err := c.DeleteWarmPool(ctx, "acme", "py"); err != nil {
		t.Fatal(err)
	}
	before := len(f.Calls())
	for _, size := range []int{-1, 1001} {
		_, err := c.SetWarmPool(ctx, "acme", "py", size)
		if code := client.StatusCode(err); code != http.StatusUnprocessableEntity && code != http.StatusBadRequest {
			t.Fatalf("size %d: %v", size, err)
		}
	}
	if len(f.Calls()) != before {
		t.Fatalf("a refused size reached the backend: %v", f.Calls()[before:])
	}
	if _, err := user.ListWarmPools(ctx); err == nil || !strings.Contains(err.Error(), "admin key") {
		t.Fatalf("a tenant key listed every tenant's warm pools: %v", err)
	}
}
