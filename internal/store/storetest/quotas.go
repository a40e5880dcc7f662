package storetest

import (
	"math"
	"testing"
	"time"

	"github.com/stead-dev/stead/internal/errs"
	"github.com/stead-dev/stead/internal/store"
)

// testQuotasSetGetAndReplace checks the QuotaStore contract: a tenant
// without a record has no limits; a set stores every field (nil ones as no
// limit, zero ones as zero) and a second set replaces the whole record.
func testQuotasSetGetAndReplace(t *testing.T, s store.Store) {
	ctx := t.Context()
	createTenant(t, s, "acme")
	q, err := s.GetTenantQuota(ctx, "acme")
	noErr(t, err, "get quotas of a new tenant")
	if !q.IsZero() || q.TenantID != "acme" || !q.UpdatedAt.IsZero() {
		t.Fatalf("new tenant's quotas: %+v, want none", q)
	}
	base := time.Date(2026, 12, 2, 1, 2, 3, 456000000, time.UTC)
	want := store.TenantQuota{TenantID: "acme", RunningSandboxes: limit(2), CPUs: cpus(1.5), MemoryBytes: limit(4 << 30),
		DiskBytes: limit(100 << 30), Volumes: limit(0), RepositoryBytes: limit(50 << 30), Snapshots: limit(7), UpdatedAt: base}
	stored, err := s.SetTenantQuota(ctx, want)
	noErr(t, err, "set quotas")
	checkQuota(t, "set's answer", stored, want)
	got, err := s.GetTenantQuota(ctx, "acme")
	noErr(t, err, "get quotas")
	checkQuota(t, "get after set", got, want)

	// A second set replaces the whole record: fields left nil are cleared.
	later := base.Add(time.Hour)
	want = store.TenantQuota{TenantID: "acme", CPUs: cpus(0.25), UpdatedAt: later}
	_, err = s.SetTenantQuota(ctx, want)
	noErr(t, err, "replace quotas")
	got, err = s.GetTenantQuota(ctx, "acme")
	noErr(t, err, "get after replace")
	checkQuota(t, "get after replace", got, want)

	// A zero UpdatedAt is now; the zero record is kept as no limits.
	before := time.Now().Add(-time.Second)
	stored, err = s.SetTenantQuota(ctx, store.TenantQuota{TenantID: "acme"})
	noErr(t, err, "clear quotas")
	if !stored.IsZero() || stored.UpdatedAt.Before(before) || stored.UpdatedAt.Location() != time.UTC {
		t.Fatalf("clear: %+v", stored)
	}
	got, err = s.GetTenantQuota(ctx, "acme")
	noErr(t, err, "get after clear")
	if !got.IsZero() {
		t.Fatalf("get after clear: %+v", got)
	}
	checkTime(t, "updated_at after clear", got.UpdatedAt, stored.UpdatedAt)
}

// testQuotasRejectBadInputAndStoreNothing checks that an empty or unknown
// tenant and a negative or non-finite limit are refused and change
// nothing.
func testQuotasRejectBadInputAndStoreNothing(t *testing.T, s store.Store) {
	ctx := t.Context()
	createTenant(t, s, "acme")
	good := store.TenantQuota{TenantID: "acme", RunningSandboxes: limit(3), UpdatedAt: at(1)}
	_, err := s.SetTenantQuota(ctx, good)
	noErr(t, err, "set quotas")
	_, err = s.SetTenantQuota(ctx, store.TenantQuota{RunningSandboxes: limit(1)})
	wantErr(t, err, errs.ErrInvalid, "empty tenant")
	_, err = s.SetTenantQuota(ctx, store.TenantQuota{TenantID: "ghost", RunningSandboxes: limit(1)})
	wantErr(t, err, errs.ErrNotFound, "unknown tenant")
	_, err = s.GetTenantQuota(ctx, "ghost")
	wantErr(t, err, errs.ErrNotFound, "get quotas of an unknown tenant")
	for _, bad := range []store.TenantQuota{
		{TenantID: "acme", RunningSandboxes: limit(-1)},
		{TenantID: "acme", MemoryBytes: limit(-1)},
		{TenantID: "acme", DiskBytes: limit(math.MinInt64)},
		{TenantID: "acme", Volumes: limit(-2)},
		{TenantID: "acme", RepositoryBytes: limit(-3)},
		{TenantID: "acme", Snapshots: limit(-4)},
		{TenantID: "acme", CPUs: cpus(-0.5)},
		{TenantID: "acme", CPUs: cpus(math.NaN())},
		{TenantID: "acme", CPUs: cpus(math.Inf(1))},
	} {
		_, err := s.SetTenantQuota(ctx, bad)
		wantErr(t, err, errs.ErrInvalid, "bad quota")
	}
	got, err := s.GetTenantQuota(ctx, "acme")
	noErr(t, err, "get quotas")
	checkQuota(t, "after refused sets", got, good)
}

// testQuotasBelongToOneTenantAndGoWithIt checks that a set never changes
// another tenant's record and that DeleteTenant removes the record: a
// tenant made again with the same id has none.
func testQuotasBelongToOneTenantAndGoWithIt(t *testing.T, s store.Store) {
	ctx := t.Context()
	createTenant(t, s, "acme")
	createTenant(t, s, "other")
	a := store.TenantQuota{TenantID: "acme", Volumes: limit(1), UpdatedAt: at(1)}
	o := store.TenantQuota{TenantID: "other", Volumes: limit(9), Snapshots: limit(2), UpdatedAt: at(2)}
	_, err := s.SetTenantQuota(ctx, a)
	noErr(t, err, "set acme")
	_, err = s.SetTenantQuota(ctx, o)
	noErr(t, err, "set other")
	got, err := s.GetTenantQuota(ctx, "acme")
	noErr(t, err, "get acme")
	checkQuota(t, "acme", got, a)
	noErr(t, s.DeleteTenant(ctx, "acme"), "delete tenant")
	_, err = s.GetTenantQuota(ctx, "acme")
	wantErr(t, err, errs.ErrNotFound, "quotas of a deleted tenant")
	createTenant(t, s, "acme")
	got, err = s.GetTenantQuota(ctx, "acme")
	noErr(t, err, "get re-made acme")
	if !got.IsZero() || !got.UpdatedAt.IsZero() {
		t.Fatalf("a re-made tenant inherits quotas %+v", got)
	}
	got, err = s.GetTenantQuota(ctx, "other")
	noErr(t, err, "get other")
	checkQuota(t, "other after acme's delete", got, o)
}

// checkQuota fails unless got holds want's tenant, limits and time.
func checkQuota(t *testing.T, what string, got, want store.TenantQuota) {
	t.Helper()
	eqI := func(name string, g, w *int64) {
		if (g == nil) != (w == nil) || g != nil && *g != *w {
			t.Fatalf("%s: %s = %v, want %v", what, name, deref(g), deref(w))
		}
	}
	if got.TenantID != want.TenantID {
		t.Fatalf("%s: tenant %q, want %q", what, got.TenantID, want.TenantID)
	}
	eqI("running_sandboxes", got.RunningSandboxes, want.RunningSandboxes)
	eqI("memory_bytes", got.MemoryBytes, want.MemoryBytes)
	eqI("disk_bytes", got.DiskBytes, want.DiskBytes)
	eqI("volumes", got.Volumes, want.Volumes)
	eqI("repository_bytes", got.RepositoryBytes, want.RepositoryBytes)
	eqI("snapshots", got.Snapshots, want.Snapshots)
	eqI("state_bytes", got.StateBytes, want.StateBytes)
	if (got.CPUs == nil) != (want.CPUs == nil) || got.CPUs != nil && *got.CPUs != *want.CPUs {
		t.Fatalf("%s: cpus = %v, want %v", what, deref(got.CPUs), deref(want.CPUs))
	}
	checkTime(t, what+": updated_at", got.UpdatedAt, want.UpdatedAt)
}

// deref shows an optional limit: its value, or "none".
func deref[T any](p *T) any {
	if p == nil {
		return "none"
	}
	return *p
}

// limit returns a pointer to an integer limit.
func limit(v int64) *int64 { return &v }

// cpus returns a pointer to a cpus limit.
func cpus(v float64) *float64 { return &v }

// testStateBytesAddsUpTheTenantsState checks StateBytes: every kept
// checkpoint version, task and observation payload, key-value value and
// session event payload of the tenant's sandboxes, and no other tenant's;
// a state_bytes limit round-trips.
func testStateBytesAddsUpTheTenantsState(t *testing.T, s store.Store) {
	ctx := t.Context()
	k := sessionFixture(t, s, store.Retention{})
	n, err := s.StateBytes(ctx, dt)
	noErr(t, err, "state bytes of an empty tenant")
	if n != 0 {
		t.Fatalf("state bytes with nothing stored: %d", n)
	}
	put(t, s, ckey(dt, "sb1", "", "plan"), `{"a":1}`)                                                                              // 7
	put(t, s, ckey(dt, "sb1", "", "plan"), `{"a":22}`)                                                                             // 8: both versions are kept
	createTask(t, s, "t1", 1, `"task"`)                                                                                            // 6
	_, err = s.AppendObservation(ctx, store.ObservationWrite{TenantID: dt, SandboxID: "sb1", Kind: "k", Payload: []byte(`[1,2]`)}) // 5
	noErr(t, err, "observation")
	putKV(t, s, "k", `"value"`, 0)                        // 7
	appendEvents(t, s, k, ev(store.EventNote, `"hello"`)) // 7
	createTenant(t, s, "other")
	createSandbox(t, s, newSandbox("sb2", "other", "web", at(0)))
	_, err = s.PutKV(ctx, store.KVWrite{TenantID: "other", SandboxID: "sb2", Key: "k", Value: []byte(`"not counted for dt"`)})
	noErr(t, err, "other tenant's value")
	n, err = s.StateBytes(ctx, dt)
	noErr(t, err, "state bytes")
	if want := int64(7 + 8 + 6 + 5 + 7 + 7); n != want {
		t.Fatalf("state bytes %d, want %d", n, want)
	}
	q := store.TenantQuota{TenantID: dt, StateBytes: limit(1 << 20), UpdatedAt: at(3)}
	_, err = s.SetTenantQuota(ctx, q)
	noErr(t, err, "set state_bytes")
	got, err := s.GetTenantQuota(ctx, dt)
	noErr(t, err, "get")
	checkQuota(t, "state_bytes", got, q)
}
