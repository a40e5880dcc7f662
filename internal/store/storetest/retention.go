package storetest

import (
	"context"
	"testing"
	"time"

	"github.com/stead-dev/stead/internal/errs"
	"github.com/stead-dev/stead/internal/store"
)

func dur(d time.Duration) *time.Duration { return &d }

func durEq(a, b *time.Duration) bool {
	return (a == nil) == (b == nil) && (a == nil || *a == *b)
}

// testRetentionPolicyPutGetReplace checks that a tenant has no policy
// until one is put, that a put replaces the policy as a whole (nil fields
// stored unset, 0 kept as 0), and that another tenant's policy is apart.
func testRetentionPolicyPutGetReplace(t *testing.T, s store.Store) {
	ctx := context.Background()
	_, err := s.GetRetentionPolicy(ctx, store.DefaultTenant)
	wantErr(t, err, errs.ErrNotFound, "get before any put")
	createTenant(t, s, "t-other")
	p := store.RetentionPolicy{TenantID: store.DefaultTenant, ArchiveStoppedAfter: dur(14 * 24 * time.Hour),
		DeleteArchivedAfter: dur(0), PurgeDeletedAfter: dur(30 * 24 * time.Hour), WarnBefore: dur(3*24*time.Hour + 1),
		SessionKeepWithin: dur(7 * 24 * time.Hour), ObservationsKeepWithin: dur(0), UpdatedAt: at(5)}
	got, err := s.PutRetentionPolicy(ctx, p)
	noErr(t, err, "put")
	if !got.UpdatedAt.Equal(at(5)) || got.UpdatedAt.Location() != time.UTC {
		t.Fatalf("put returned UpdatedAt %v", got.UpdatedAt)
	}
	check := func(what string, want store.RetentionPolicy) {
		t.Helper()
		got, err := s.GetRetentionPolicy(ctx, want.TenantID)
		noErr(t, err, what)
		if got.TenantID != want.TenantID || !durEq(got.ArchiveStoppedAfter, want.ArchiveStoppedAfter) || !durEq(got.DeleteArchivedAfter, want.DeleteArchivedAfter) ||
			!durEq(got.PurgeDeletedAfter, want.PurgeDeletedAfter) || !durEq(got.WarnBefore, want.WarnBefore) || !got.UpdatedAt.Equal(want.UpdatedAt) ||
			!durEq(got.SessionKeepWithin, want.SessionKeepWithin) || !durEq(got.ObservationsKeepWithin, want.ObservationsKeepWithin) {
			t.Fatalf("%s: got %+v, want %+v", what, got, want)
		}
	}
	check("get after put", p)
	_, err = s.GetRetentionPolicy(ctx, "t-other")
	wantErr(t, err, errs.ErrNotFound, "another tenant's policy")

	repl := store.RetentionPolicy{TenantID: store.DefaultTenant, PurgeDeletedAfter: dur(2 * 24 * time.Hour), UpdatedAt: at(9)}
	_, err = s.PutRetentionPolicy(ctx, repl)
	noErr(t, err, "replace")
	check("get after replace", repl)

	other := store.RetentionPolicy{TenantID: "t-other", WarnBefore: dur(time.Hour), UpdatedAt: at(10)}
	_, err = s.PutRetentionPolicy(ctx, other)
	noErr(t, err, "put other")
	check("own policy after the other tenant's put", repl)
	check("other's policy", other)
}

// testRetentionPolicyRejectsBadInput checks that an empty or unknown
// tenant and a negative duration store nothing.
func testRetentionPolicyRejectsBadInput(t *testing.T, s store.Store) {
	ctx := context.Background()
	_, err := s.PutRetentionPolicy(ctx, store.RetentionPolicy{WarnBefore: dur(time.Hour)})
	wantErr(t, err, errs.ErrInvalid, "empty tenant")
	for _, p := range []store.RetentionPolicy{
		{TenantID: store.DefaultTenant, ArchiveStoppedAfter: dur(-1)},
		{TenantID: store.DefaultTenant, DeleteArchivedAfter: dur(-time.Hour)},
		{TenantID: store.DefaultTenant, PurgeDeletedAfter: dur(-time.Hour)},
		{TenantID: store.DefaultTenant, WarnBefore: dur(-time.Hour)},
		{TenantID: store.DefaultTenant, ObservationsKeepWithin: dur(-time.Hour)},
	} {
		_, err := s.PutRetentionPolicy(ctx, p)
		wantErr(t, err, errs.ErrInvalid, "negative duration")
	}
	_, err = s.GetRetentionPolicy(ctx, store.DefaultTenant)
	wantErr(t, err, errs.ErrNotFound, "get after bad puts")
	_, err = s.PutRetentionPolicy(ctx, store.RetentionPolicy{TenantID: "t-nobody", WarnBefore: dur(time.Hour)})
	wantErr(t, err, errs.ErrNotFound, "unknown tenant")
	_, _, err = s.RecordRetentionWarning(ctx, store.RetentionWarning{TenantID: "t-nobody", SubjectKind: store.RetentionSandbox, SubjectID: "sb", Action: "purge", DueAt: at(1)})
	wantErr(t, err, errs.ErrNotFound, "warning of an unknown tenant")
	for _, w := range []store.RetentionWarning{
		{SubjectKind: store.RetentionSandbox, SubjectID: "sb", Action: "purge"},
		{TenantID: store.DefaultTenant, SubjectID: "sb", Action: "purge"},
		{TenantID: store.DefaultTenant, SubjectKind: store.RetentionSandbox, Action: "purge"},
		{TenantID: store.DefaultTenant, SubjectKind: store.RetentionSandbox, SubjectID: "sb"},
	} {
		_, _, err := s.RecordRetentionWarning(ctx, w)
		wantErr(t, err, errs.ErrInvalid, "warning with an empty field")
	}
	if list, err := s.ListRetentionWarnings(ctx, store.DefaultTenant, "", ""); err != nil || len(list) != 0 {
		t.Fatalf("warnings after bad input: %+v %v", list, err)
	}
}

// testRetentionWarningsOncePerSubjectActionAndDue checks that a second
// warning of the same subject, action and due time keeps the first, that
// another due time or action is another warning, the order of lists,
// tenant isolation and that a subject's warnings can be forgotten.
func testRetentionWarningsOncePerSubjectActionAndDue(t *testing.T, s store.Store) {
	ctx := context.Background()
	createTenant(t, s, "t-other")
	w := store.RetentionWarning{TenantID: store.DefaultTenant, SubjectKind: store.RetentionSandbox, SubjectID: "sb-1", Action: "purge", DueAt: at(100), WarnedAt: at(10)}
	got, created, err := s.RecordRetentionWarning(ctx, w)
	noErr(t, err, "record")
	if !created || !got.DueAt.Equal(at(100)) || !got.WarnedAt.Equal(at(10)) || got.WarnedAt.Location() != time.UTC {
		t.Fatalf("first record: created %v, %+v", created, got)
	}
	again := w
	again.WarnedAt = at(20)
	got, created, err = s.RecordRetentionWarning(ctx, again)
	noErr(t, err, "record again")
	if created || !got.WarnedAt.Equal(at(10)) {
		t.Fatalf("second record of the same due: created %v, %+v (want the first kept)", created, got)
	}
	later := w
	later.DueAt, later.WarnedAt = at(200), at(30)
	_, created, err = s.RecordRetentionWarning(ctx, later)
	noErr(t, err, "record another due")
	if !created {
		t.Fatal("a new due time is a new warning")
	}
	del := w
	del.Action, del.WarnedAt = "delete", at(10)
	_, created, err = s.RecordRetentionWarning(ctx, del)
	noErr(t, err, "record another action")
	if !created {
		t.Fatal("another action is another warning")
	}
	vol := store.RetentionWarning{TenantID: store.DefaultTenant, SubjectKind: store.RetentionVolume, SubjectID: "sb-1", Action: "purge", DueAt: at(100), WarnedAt: at(5)}
	_, created, err = s.RecordRetentionWarning(ctx, vol)
	noErr(t, err, "record a volume of the same id")
	if !created {
		t.Fatal("a volume is another subject than a sandbox of the same id")
	}

	g, err := s.GetRetentionWarning(ctx, store.DefaultTenant, store.RetentionSandbox, "sb-1", "purge", at(100))
	noErr(t, err, "get")
	if !g.WarnedAt.Equal(at(10)) {
		t.Fatalf("get: %+v", g)
	}
	_, err = s.GetRetentionWarning(ctx, store.DefaultTenant, store.RetentionSandbox, "sb-1", "purge", at(101))
	wantErr(t, err, errs.ErrNotFound, "get of another due")
	_, err = s.GetRetentionWarning(ctx, "t-other", store.RetentionSandbox, "sb-1", "purge", at(100))
	wantErr(t, err, errs.ErrNotFound, "get as another tenant")

	list, err := s.ListRetentionWarnings(ctx, store.DefaultTenant, store.RetentionSandbox, "sb-1")
	noErr(t, err, "list")
	if len(list) != 3 || list[0].Action != "delete" || list[1].Action != "purge" || !list[1].DueAt.Equal(at(100)) || !list[2].DueAt.Equal(at(200)) {
		t.Fatalf("list of sb-1: %+v", list)
	}
	if all, err := s.ListRetentionWarnings(ctx, store.DefaultTenant, "", ""); err != nil || len(all) != 4 || all[0].SubjectKind != store.RetentionVolume {
		t.Fatalf("list of the tenant: %+v %v", all, err)
	}
	if other, err := s.ListRetentionWarnings(ctx, "t-other", "", ""); err != nil || len(other) != 0 {
		t.Fatalf("another tenant lists %+v %v", other, err)
	}
	noErr(t, s.DeleteRetentionWarnings(ctx, "t-other", store.RetentionSandbox, "sb-1"), "delete as another tenant")
	if list, _ := s.ListRetentionWarnings(ctx, store.DefaultTenant, store.RetentionSandbox, "sb-1"); len(list) != 3 {
		t.Fatalf("another tenant's delete removed warnings: %+v", list)
	}
	noErr(t, s.DeleteRetentionWarnings(ctx, store.DefaultTenant, store.RetentionSandbox, "sb-1"), "delete")
	if list, _ := s.ListRetentionWarnings(ctx, store.DefaultTenant, "", ""); len(list) != 1 || list[0].SubjectKind != store.RetentionVolume {
		t.Fatalf("after deleting sb-1's warnings: %+v", list)
	}
	noErr(t, s.DeleteRetentionWarnings(ctx, store.DefaultTenant, store.RetentionSandbox, "sb-1"), "delete none")
}

// testRetentionGoesWithTheTenant checks that DeleteTenant removes the
// tenant's policy and warnings, and leaves another tenant's.
func testRetentionGoesWithTheTenant(t *testing.T, s store.Store) {
	ctx := context.Background()
	createTenant(t, s, "t-gone")
	for _, id := range []string{"t-gone", store.DefaultTenant} {
		_, err := s.PutRetentionPolicy(ctx, store.RetentionPolicy{TenantID: id, WarnBefore: dur(time.Hour)})
		noErr(t, err, "put "+id)
		_, _, err = s.RecordRetentionWarning(ctx, store.RetentionWarning{TenantID: id, SubjectKind: store.RetentionVolume, SubjectID: "v", Action: "purge", DueAt: at(1)})
		noErr(t, err, "warn "+id)
	}
	noErr(t, s.DeleteTenant(ctx, "t-gone"), "delete tenant")
	createTenant(t, s, "t-gone") // a new tenant of that id starts with nothing
	_, err := s.GetRetentionPolicy(ctx, "t-gone")
	wantErr(t, err, errs.ErrNotFound, "policy after the tenant's delete")
	if list, err := s.ListRetentionWarnings(ctx, "t-gone", "", ""); err != nil || len(list) != 0 {
		t.Fatalf("warnings after the tenant's delete: %+v %v", list, err)
	}
	if _, err := s.GetRetentionPolicy(ctx, store.DefaultTenant); err != nil {
		t.Fatalf("the other tenant's policy: %v", err)
	}
	if list, _ := s.ListRetentionWarnings(ctx, store.DefaultTenant, "", ""); len(list) != 1 {
		t.Fatalf("the other tenant's warnings: %+v", list)
	}
}
