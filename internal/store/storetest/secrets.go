package storetest

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/stead-dev/stead/internal/errs"
	"github.com/stead-dev/stead/internal/store"
)

// testSecretsPutRotateListDelete checks the SecretStore contract: a put
// creates, a second put replaces the value and keeps CreatedAt, the list
// is ordered by name, a delete removes.
func testSecretsPutRotateListDelete(t *testing.T, s store.Store) {
	ctx := context.Background()
	base := time.Date(2026, 12, 1, 4, 5, 6, 789000000, time.UTC)
	got, created, err := s.PutSecret(ctx, store.Secret{TenantID: store.DefaultTenant, Name: "OPENAI_API_KEY", Sealed: []byte("sealed-1"), UpdatedAt: base})
	noErr(t, err, "put")
	if !created || !got.CreatedAt.Equal(base) || !got.UpdatedAt.Equal(base) {
		t.Fatalf("first put: created %v, %+v", created, got)
	}
	_, _, err = s.PutSecret(ctx, store.Secret{TenantID: store.DefaultTenant, Name: "A_TOKEN", Sealed: []byte("sealed-a"), CreatedAt: base, UpdatedAt: base})
	noErr(t, err, "put A_TOKEN")
	later := base.Add(time.Hour)
	got, created, err = s.PutSecret(ctx, store.Secret{TenantID: store.DefaultTenant, Name: "OPENAI_API_KEY", Sealed: []byte("sealed-2"), UpdatedAt: later})
	noErr(t, err, "rotate")
	if created || !got.CreatedAt.Equal(base) || !got.UpdatedAt.Equal(later) {
		t.Fatalf("rotate: created %v, %+v", created, got)
	}
	sec, err := s.GetSecret(ctx, store.DefaultTenant, "OPENAI_API_KEY")
	noErr(t, err, "get")
	if !bytes.Equal(sec.Sealed, []byte("sealed-2")) || !sec.CreatedAt.Equal(base) || !sec.UpdatedAt.Equal(later) || sec.TenantID != store.DefaultTenant {
		t.Fatalf("get after rotate: %+v", sec)
	}
	_, err = s.GetSecret(ctx, store.DefaultTenant, "openai_api_key")
	wantErr(t, err, errs.ErrNotFound, "get with another case")
	list, err := s.ListSecrets(ctx, store.DefaultTenant)
	noErr(t, err, "list")
	if len(list) != 2 || list[0].Name != "A_TOKEN" || list[1].Name != "OPENAI_API_KEY" {
		t.Fatalf("list: %+v", list)
	}
	noErr(t, s.DeleteSecret(ctx, store.DefaultTenant, "A_TOKEN"), "delete")
	_, err = s.GetSecret(ctx, store.DefaultTenant, "A_TOKEN")
	wantErr(t, err, errs.ErrNotFound, "get after delete")
	wantErr(t, s.DeleteSecret(ctx, store.DefaultTenant, "A_TOKEN"), errs.ErrNotFound, "delete twice")
	if list, _ := s.ListSecrets(ctx, store.DefaultTenant); len(list) != 1 {
		t.Fatalf("list after delete: %+v", list)
	}
}

// testSecretsRejectBadInput checks that an empty name, tenant or value, or
// an unknown tenant, stores nothing.
func testSecretsRejectBadInput(t *testing.T, s store.Store) {
	ctx := context.Background()
	for _, sec := range []store.Secret{
		{TenantID: store.DefaultTenant, Sealed: []byte("x")},
		{Name: "X", Sealed: []byte("x")},
		{TenantID: store.DefaultTenant, Name: "X"},
	} {
		_, _, err := s.PutSecret(ctx, sec)
		wantErr(t, err, errs.ErrInvalid, "put "+sec.Name)
	}
	_, _, err := s.PutSecret(ctx, store.Secret{TenantID: "t-nobody", Name: "X", Sealed: []byte("x")})
	wantErr(t, err, errs.ErrNotFound, "put for an unknown tenant")
	if list, err := s.ListSecrets(ctx, store.DefaultTenant); err != nil || len(list) != 0 {
		t.Fatalf("stored after bad input: %+v %v", list, err)
	}
}

// testSecretsOfAnotherTenantAreAbsent checks tenant isolation: one name in
// two tenants is two secrets, and neither sees, changes nor deletes the
// other's.
func testSecretsOfAnotherTenantAreAbsent(t *testing.T, s store.Store) {
	ctx := context.Background()
	createTenant(t, s, "t-other")
	_, _, err := s.PutSecret(ctx, store.Secret{TenantID: "t-other", Name: "KEY", Sealed: []byte("other")})
	noErr(t, err, "put other")
	_, err = s.GetSecret(ctx, store.DefaultTenant, "KEY")
	wantErr(t, err, errs.ErrNotFound, "get another tenant's")
	wantErr(t, s.DeleteSecret(ctx, store.DefaultTenant, "KEY"), errs.ErrNotFound, "delete another tenant's")
	if list, _ := s.ListSecrets(ctx, store.DefaultTenant); len(list) != 0 {
		t.Fatalf("another tenant's secret listed: %+v", list)
	}
	_, created, err := s.PutSecret(ctx, store.Secret{TenantID: store.DefaultTenant, Name: "KEY", Sealed: []byte("mine")})
	noErr(t, err, "put mine")
	if !created {
		t.Fatal("a put of a name another tenant holds did not create")
	}
	sec, err := s.GetSecret(ctx, "t-other", "KEY")
	noErr(t, err, "get other")
	if string(sec.Sealed) != "other" {
		t.Fatalf("another tenant's put changed this one: %q", sec.Sealed)
	}
}
