package storetest

import (
	"context"
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/stead-dev/stead/internal/errs"
	"github.com/stead-dev/stead/internal/store"
)

func testVolumes(t *testing.T, s store.Store) {
	ctx := context.Background()
	base := time.Date(2026, 11, 30, 4, 5, 6, 789000000, time.UTC)
	a := store.Volume{ID: "vol-a", TenantID: store.DefaultTenant, Name: "shared", SizeBytes: 1 << 30, State: "available", CreatedAt: base, Origin: "vol-elsewhere", Node: "node-1"}
	b := store.Volume{ID: "vol-b", TenantID: store.DefaultTenant, Name: "other", State: "available", CreatedAt: base.Add(time.Second)}
	for _, v := range []store.Volume{b, a} {
		if err := s.CreateVolume(ctx, v); err != nil {
			t.Fatal(err)
		}
	}
	dup := a
	dup.ID = "vol-c"
	if err := s.CreateVolume(ctx, dup); !errors.Is(err, errs.ErrConflict) {
		t.Fatalf("duplicate name: %v", err)
	}
	if err := s.CreateVolume(ctx, store.Volume{ID: "vol-d", TenantID: store.DefaultTenant, State: "available"}); !errors.Is(err, errs.ErrInvalid) {
		t.Fatalf("empty name: %v", err)
	}
	for _, key := range []string{"vol-a", "shared"} {
		got, err := s.GetVolume(ctx, store.DefaultTenant, key)
		if err != nil || !reflect.DeepEqual(got, a) {
			t.Fatalf("get %s:\n got %+v %v\nwant %+v", key, got, err, a)
		}
	}
	list, err := s.ListVolumes(ctx, store.DefaultTenant, false)
	if err != nil || len(list) != 2 || list[0].ID != "vol-a" || list[1].ID != "vol-b" {
		t.Fatalf("list: %+v %v", list, err)
	}
	purge := base.Add(30 * 24 * time.Hour)
	a.State, a.DeletedAt, a.PurgeAt, a.Node = "deleted", &base, &purge, "node-2"
	if err := s.UpdateVolume(ctx, a); err != nil {
		t.Fatal(err)
	}
	if list, _ := s.ListVolumes(ctx, store.DefaultTenant, false); len(list) != 1 {
		t.Fatalf("deleted volume listed: %+v", list)
	}
	if list, _ := s.ListVolumes(ctx, "", true); len(list) != 2 {
		t.Fatalf("list with deleted, every tenant: %+v", list)
	}
	if got, _ := s.GetVolume(ctx, store.DefaultTenant, "vol-a"); !reflect.DeepEqual(got, a) {
		t.Fatalf("after update: %+v", got)
	}
	if err := s.DeleteVolume(ctx, store.DefaultTenant, "vol-a"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.GetVolume(ctx, store.DefaultTenant, "vol-a"); !errors.Is(err, errs.ErrNotFound) {
		t.Fatalf("get after delete: %v", err)
	}
	// The name is free again once the record is gone.
	if err := s.CreateVolume(ctx, store.Volume{ID: "vol-e", TenantID: store.DefaultTenant, Name: "shared", State: "available"}); err != nil {
		t.Fatal(err)
	}
}

func testVolumeTenantIsolation(t *testing.T, s store.Store) {
	ctx := context.Background()
	if err := s.CreateTenant(ctx, store.Tenant{ID: "t2", Name: "two"}); err != nil {
		t.Fatal(err)
	}
	v := store.Volume{ID: "vol-t2", TenantID: "t2", Name: "mine", State: "available"}
	if err := s.CreateVolume(ctx, v); err != nil {
		t.Fatal(err)
	}
	// Names are per tenant.
	if err := s.CreateVolume(ctx, store.Volume{ID: "vol-t1", TenantID: store.DefaultTenant, Name: "mine", State: "available"}); err != nil {
		t.Fatal(err)
	}
	if got, err := s.GetVolume(ctx, store.DefaultTenant, "vol-t2"); !errors.Is(err, errs.ErrNotFound) {
		t.Fatalf("another tenant's volume by id: %+v %v", got, err)
	}
	if got, _ := s.GetVolume(ctx, store.DefaultTenant, "mine"); got.ID != "vol-t1" {
		t.Fatalf("name lookup crossed tenants: %+v", got)
	}
	if err := s.UpdateVolume(ctx, store.Volume{ID: "vol-t2", TenantID: store.DefaultTenant, State: "deleted"}); !errors.Is(err, errs.ErrNotFound) {
		t.Fatalf("another tenant's update: %v", err)
	}
	if err := s.DeleteVolume(ctx, store.DefaultTenant, "vol-t2"); !errors.Is(err, errs.ErrNotFound) {
		t.Fatalf("another tenant's delete: %v", err)
	}
	if list, _ := s.ListVolumes(ctx, store.DefaultTenant, true); len(list) != 1 {
		t.Fatalf("another tenant's list: %+v", list)
	}
}
