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

func testSnapshots(t *testing.T, s store.Store) {
	ctx := context.Background()
	base := time.Date(2026, 11, 30, 1, 2, 3, 456789000, time.UTC)
	sb := createSandbox(t, s, newSandbox("sb-snap", store.DefaultTenant, "snapper", base))
	mk := func(id, parent string, at time.Time) store.Snapshot {
		return store.Snapshot{ID: id, TenantID: store.DefaultTenant, SandboxID: sb.ID, SandboxName: sb.Name,
			ParentID: parent, Label: "label " + id, Description: "d", Kind: "user", FrozenFor: 1500 * time.Microsecond, CreatedAt: at,
			TemplateID: "host", Spec: []byte(`{"x":1}`)}
	}
	for _, sn := range []store.Snapshot{mk("snap-b", "", base.Add(time.Second)), mk("snap-a", "snap-b", base.Add(2*time.Second)), mk("snap-c", "snap-b", base.Add(2*time.Second))} {
		if err := s.CreateSnapshot(ctx, sn); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.CreateSnapshot(ctx, mk("snap-a", "", base)); !errors.Is(err, errs.ErrConflict) {
		t.Fatalf("duplicate id: %v", err)
	}
	bad := mk("snap-x", "", base)
	bad.Kind = ""
	if err := s.CreateSnapshot(ctx, bad); !errors.Is(err, errs.ErrInvalid) {
		t.Fatalf("empty kind: %v", err)
	}
	got, err := s.GetSnapshot(ctx, store.DefaultTenant, "snap-a")
	if err != nil {
		t.Fatal(err)
	}
	if want := mk("snap-a", "snap-b", base.Add(2*time.Second)); !reflect.DeepEqual(got, want) {
		t.Fatalf("round trip:\n got %+v\nwant %+v", got, want)
	}
	list, err := s.ListSnapshots(ctx, store.DefaultTenant, sb.ID)
	if err != nil || len(list) != 3 || list[0].ID != "snap-b" || list[1].ID != "snap-a" || list[2].ID != "snap-c" {
		t.Fatalf("list: %+v %v", list, err)
	}
	if other, _ := s.ListSnapshots(ctx, store.DefaultTenant, "sb-other"); len(other) != 0 {
		t.Fatalf("another sandbox's list: %+v", other)
	}
	// Purging the sandbox leaves its snapshots.
	if err := s.DeleteSandbox(ctx, store.DefaultTenant, sb.ID); err != nil {
		t.Fatal(err)
	}
	if all, _ := s.ListSnapshots(ctx, store.DefaultTenant, ""); len(all) != 3 {
		t.Fatalf("snapshots after the sandbox's purge: %+v", all)
	}
	if err := s.DeleteSnapshot(ctx, store.DefaultTenant, "snap-a"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.GetSnapshot(ctx, store.DefaultTenant, "snap-a"); !errors.Is(err, errs.ErrNotFound) {
		t.Fatalf("get after delete: %v", err)
	}
	if err := s.DeleteSnapshot(ctx, store.DefaultTenant, "snap-a"); !errors.Is(err, errs.ErrNotFound) {
		t.Fatalf("second delete: %v", err)
	}
}

func testSnapshotTenantIsolation(t *testing.T, s store.Store) {
	ctx := context.Background()
	if err := s.CreateTenant(ctx, store.Tenant{ID: "t2", Name: "two"}); err != nil {
		t.Fatal(err)
	}
	sn := store.Snapshot{ID: "snap-t2", TenantID: "t2", SandboxID: "sb-t2", Kind: "user"}
	if err := s.CreateSnapshot(ctx, sn); err != nil {
		t.Fatal(err)
	}
	if _, err := s.GetSnapshot(ctx, store.DefaultTenant, "snap-t2"); !errors.Is(err, errs.ErrNotFound) {
		t.Fatalf("another tenant's get: %v", err)
	}
	if err := s.DeleteSnapshot(ctx, store.DefaultTenant, "snap-t2"); !errors.Is(err, errs.ErrNotFound) {
		t.Fatalf("another tenant's delete: %v", err)
	}
	if list, _ := s.ListSnapshots(ctx, store.DefaultTenant, ""); len(list) != 0 {
		t.Fatalf("another tenant's list: %+v", list)
	}
	if _, err := s.GetSnapshot(ctx, "t2", "snap-t2"); err != nil {
		t.Fatal(err)
	}
}
