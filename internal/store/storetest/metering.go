package storetest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stead-dev/stead/internal/errs"
	"github.com/stead-dev/stead/internal/store"
)

var meterT0 = time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)

func mustOpenInterval(t *testing.T, s store.Store, tenant, sb string, at time.Time) store.MeterInterval {
	t.Helper()
	iv, err := s.OpenMeterInterval(context.Background(), store.MeterInterval{TenantID: tenant, SandboxID: sb, InstanceType: "small", CPUs: 1, MemoryBytes: 2 << 30, Start: at})
	if err != nil {
		t.Fatalf("OpenMeterInterval(%s): %v", sb, err)
	}
	return iv
}

func testMeterOpenOnce(t *testing.T, s store.Store) {
	ctx := context.Background()
	a := mustOpenInterval(t, s, store.DefaultTenant, "sb-a", meterT0)
	if !a.Open || a.ID == 0 || !a.Checkpoint.Equal(meterT0) || a.InstanceType != "small" || a.MemoryBytes != 2<<30 {
		t.Fatalf("opened interval = %+v", a)
	}
	again := mustOpenInterval(t, s, store.DefaultTenant, "sb-a", meterT0.Add(time.Hour))
	if again.ID != a.ID || !again.Start.Equal(meterT0) {
		t.Fatalf("second open = %+v, want the open %+v unchanged", again, a)
	}
	for _, bad := range []store.MeterInterval{{SandboxID: "x", Start: meterT0}, {TenantID: "t", Start: meterT0}, {TenantID: "t", SandboxID: "x"}} {
		if _, err := s.OpenMeterInterval(ctx, bad); !errors.Is(err, errs.ErrInvalid) {
			t.Errorf("OpenMeterInterval(%+v) = %v, want ErrInvalid", bad, err)
		}
	}
	list, err := s.ListMeterIntervals(ctx, store.MeterFilter{})
	if err != nil || len(list) != 1 {
		t.Fatalf("ListMeterIntervals = %v, %v; want one", list, err)
	}
}

func testMeterCheckpoint(t *testing.T, s store.Store) {
	ctx := context.Background()
	mustOpenInterval(t, s, store.DefaultTenant, "sb-a", meterT0)
	mustOpenInterval(t, s, store.DefaultTenant, "sb-b", meterT0.Add(2*time.Minute))
	n, err := s.CheckpointMeterIntervals(ctx, meterT0.Add(time.Minute))
	if err != nil || n != 2 {
		t.Fatalf("CheckpointMeterIntervals = %d, %v; want 2", n, err)
	}
	list, _ := s.ListMeterIntervals(ctx, store.MeterFilter{})
	if !list[0].Checkpoint.Equal(meterT0.Add(time.Minute)) || !list[1].Checkpoint.Equal(meterT0.Add(2*time.Minute)) {
		t.Fatalf("checkpoints = %v, %v: want t0+1m and t0+2m (never backwards)", list[0].Checkpoint, list[1].Checkpoint)
	}
	if _, err := s.CloseMeterInterval(ctx, "sb-a", meterT0.Add(90*time.Second)); err != nil {
		t.Fatal(err)
	}
	if n, err := s.CheckpointMeterIntervals(ctx, meterT0.Add(time.Hour)); err != nil || n != 1 {
		t.Fatalf("CheckpointMeterIntervals after a close = %d, %v; want 1", n, err)
	}
	list, _ = s.ListMeterIntervals(ctx, store.MeterFilter{})
	if !list[0].Checkpoint.Equal(meterT0.Add(90*time.Second)) || list[0].Open {
		t.Fatalf("a closed interval moved: %+v", list[0])
	}
	if !list[1].Checkpoint.Equal(meterT0.Add(time.Hour)) {
		t.Fatalf("open interval checkpoint = %v", list[1].Checkpoint)
	}
}

func testMeterClose(t *testing.T, s store.Store) {
	ctx := context.Background()
	mustOpenInterval(t, s, store.DefaultTenant, "sb-a", meterT0)
	if _, err := s.CheckpointMeterIntervals(ctx, meterT0.Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	iv, err := s.CloseMeterInterval(ctx, "sb-a", meterT0.Add(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if iv.Open || !iv.Checkpoint.Equal(meterT0.Add(time.Minute)) {
		t.Fatalf("closed before its checkpoint: %+v", iv)
	}
	if _, err := s.CloseMeterInterval(ctx, "sb-a", meterT0.Add(time.Hour)); !errors.Is(err, errs.ErrNotFound) {
		t.Fatalf("closing twice: %v, want ErrNotFound", err)
	}
	b := mustOpenInterval(t, s, store.DefaultTenant, "sb-a", meterT0.Add(2*time.Hour))
	if !b.Open || !b.Start.Equal(meterT0.Add(2*time.Hour)) {
		t.Fatalf("a new interval after a close: %+v", b)
	}
}

func testMeterList(t *testing.T, s store.Store) {
	ctx := context.Background()
	if err := s.CreateTenant(ctx, store.Tenant{ID: "other", Name: "other", CreatedAt: meterT0}); err != nil {
		t.Fatal(err)
	}
	mustOpenInterval(t, s, "other", "sb-o", meterT0.Add(time.Minute))
	mustOpenInterval(t, s, store.DefaultTenant, "sb-b", meterT0.Add(2*time.Minute))
	mustOpenInterval(t, s, store.DefaultTenant, "sb-a", meterT0)
	if _, err := s.CloseMeterInterval(ctx, "sb-a", meterT0.Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	ids := func(f store.MeterFilter) []string {
		list, err := s.ListMeterIntervals(ctx, f)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, iv := range list {
			out = append(out, iv.SandboxID)
		}
		return out
	}
	for _, c := range []struct {
		f    store.MeterFilter
		want string
	}{
		{store.MeterFilter{}, "[sb-a sb-o sb-b]"},
		{store.MeterFilter{TenantID: store.DefaultTenant}, "[sb-a sb-b]"},
		{store.MeterFilter{TenantID: store.DefaultTenant, SandboxID: "sb-b"}, "[sb-b]"},
		{store.MeterFilter{Since: meterT0.Add(90 * time.Second)}, "[sb-o sb-b]"},
		{store.MeterFilter{Since: meterT0.Add(90 * time.Second), TenantID: store.DefaultTenant}, "[sb-b]"},
		{store.MeterFilter{OpenOnly: true}, "[sb-o sb-b]"},
	} {
		if got := ids(c.f); fmtList(got) != c.want {
			t.Errorf("ListMeterIntervals(%+v) = %v, want %s", c.f, got, c.want)
		}
	}
}

func fmtList(s []string) string {
	out := "["
	for i, x := range s {
		if i > 0 {
			out += " "
		}
		out += x
	}
	return out + "]"
}

func testStorageUsage(t *testing.T, s store.Store) {
	ctx := context.Background()
	day := meterT0
	add := []store.StorageUsage{
		{TenantID: store.DefaultTenant, Subject: "sb-a", Kind: store.StoragePool, Day: day, ByteSeconds: 100, Bytes: 10},
		{TenantID: store.DefaultTenant, Kind: store.StorageRepository, Day: day.Add(time.Hour), ByteSeconds: 5, Bytes: 1},
	}
	if err := s.AddStorageUsage(ctx, add); err != nil {
		t.Fatal(err)
	}
	add[0].ByteSeconds, add[0].Bytes = 50, 20
	if err := s.AddStorageUsage(ctx, add[:1]); err != nil {
		t.Fatal(err)
	}
	if err := s.AddStorageUsage(ctx, []store.StorageUsage{{TenantID: store.DefaultTenant, Subject: "sb-a", Kind: store.StoragePool, Day: day.Add(24 * time.Hour), ByteSeconds: 7, Bytes: 20}, {Kind: "pool"}}); !errors.Is(err, errs.ErrInvalid) {
		t.Fatalf("AddStorageUsage with a bad row = %v, want ErrInvalid", err)
	}
	list, err := s.ListStorageUsage(ctx, store.DefaultTenant, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 2 {
		t.Fatalf("ListStorageUsage = %+v: want two rows (the failed add stored nothing)", list)
	}
	midnight := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	if p := list[0]; p.Kind != store.StoragePool || p.ByteSeconds != 150 || p.Bytes != 20 || !p.Day.Equal(midnight) {
		t.Fatalf("pool row = %+v, want 150 byte-seconds, 20 bytes, day %v", p, midnight)
	}
	if r := list[1]; r.Kind != store.StorageRepository || r.Subject != "" {
		t.Fatalf("repository row = %+v", r)
	}
	if list, _ := s.ListStorageUsage(ctx, store.DefaultTenant, midnight.Add(24*time.Hour)); len(list) != 0 {
		t.Fatalf("since the next day: %+v", list)
	}
	if list, _ := s.ListStorageUsage(ctx, "other", time.Time{}); len(list) != 0 {
		t.Fatalf("another tenant's rows: %+v", list)
	}
}
