package tenancy

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stead-dev/stead/client"
	"github.com/stead-dev/stead/internal/errs"
	"github.com/stead-dev/stead/internal/store"
	"github.com/stead-dev/stead/internal/store/sqlite"
)

// newSecretsService is a service with a real store and key file: all
// the secrets' own verbs need.
func newSecretsService(t *testing.T) (*Service, string) {
	t.Helper()
	dir := t.TempDir()
	st, err := sqlite.Open(t.Context(), filepath.Join(dir, "stead.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return New(Options{Store: st, Keys: NewSecretKey(filepath.Join(dir, "secrets.key"), nil)}), dir
}

// TestTenantSecretIsSealedAndBoundToTenantAndName: the store holds no
// plaintext; a sealed value opens for its tenant and name only, not under
// the key that seals sandbox environments, and not after tampering.
func TestTenantSecretIsSealedAndBoundToTenantAndName(t *testing.T) {
	s, dir := newSecretsService(t)
	ctx := context.Background()
	const value = "sk-tenant-9b1f0e77c2d4a8f6"
	sec, err := s.SetSecret(ctx, store.DefaultTenant, "OPENAI_API_KEY", value)
	if err != nil {
		t.Fatal(err)
	}
	if sec.Name != "OPENAI_API_KEY" || sec.UsedBy == nil || sec.CreatedAt.IsZero() {
		t.Fatalf("view: %+v", sec)
	}
	fi, err := os.Stat(filepath.Join(dir, "secrets.key"))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("key file: %v %v", fi, err)
	}
	rec, err := s.st.GetSecret(ctx, store.DefaultTenant, "OPENAI_API_KEY")
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(rec.Sealed, []byte(value)) {
		t.Fatal("the store holds the value in plaintext")
	}
	if got, err := s.openSecret(rec); err != nil || got != value {
		t.Fatalf("open: %q %v", got, err)
	}
	for what, r := range map[string]store.Secret{
		"another name":   {TenantID: rec.TenantID, Name: "OTHER", Sealed: rec.Sealed},
		"another tenant": {TenantID: "t-other", Name: rec.Name, Sealed: rec.Sealed},
		"tampered":       {TenantID: rec.TenantID, Name: rec.Name, Sealed: append(bytes.Clone(rec.Sealed[:len(rec.Sealed)-1]), rec.Sealed[len(rec.Sealed)-1]^1)},
	} {
		if got, err := s.openSecret(r); err == nil {
			t.Errorf("%s: opened to %q", what, got)
		}
	}
	// The environment key (the file's own key) does not open it either.
	env, _ := s.secrets.AEAD(false)
	n := env.NonceSize()
	if _, err := env.Open(nil, rec.Sealed[1:1+n], rec.Sealed[1+n:], secretAD(rec.TenantID, rec.Name)); err == nil {
		t.Error("the environment key opens a tenant secret: the derivation is missing")
	}
	// The database files hold no plaintext.
	grepDatabase(t, dir, value, false)
}

// grepDatabase checks whether value appears in the database files under
// dir (the database, its WAL and shared memory).
func grepDatabase(t *testing.T, dir, value string, want bool) {
	t.Helper()
	paths, _ := filepath.Glob(filepath.Join(dir, "stead.db*"))
	found := false
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		found = found || bytes.Contains(b, []byte(value))
	}
	if found != want {
		t.Fatalf("value in the database files %v: found %v, want %v", paths, found, want)
	}
}

// TestSetSecretRefusesBadNamesAndValuesWithoutQuotingThem: names must be
// environment variable names; values must fit an environment; the error
// never carries the value.
func TestSetSecretRefusesBadNamesAndValuesWithoutQuotingThem(t *testing.T) {
	s, _ := newSecretsService(t)
	ctx := context.Background()
	long := strings.Repeat("v", maxSecretValue+1)
	for _, tc := range []struct{ name, value string }{
		{"", "x"}, {"1ABC", "x"}, {"A-B", "x"}, {"A B", "x"}, {"A=B", "x"}, {strings.Repeat("A", 129), "x"},
		{"OK", "has\x00nul-sekrit"}, {"OK", long}, {"OK", "bad-utf8-sekrit\xff"},
	} {
		_, err := s.SetSecret(ctx, store.DefaultTenant, tc.name, tc.value)
		if !errors.Is(err, errs.ErrInvalid) {
			t.Errorf("set %q: %v, want invalid", tc.name, err)
			continue
		}
		if strings.Contains(err.Error(), "sekrit") || strings.Contains(err.Error(), "vvvvvvvv") {
			t.Errorf("set %q: the error quotes the value: %v", tc.name, err)
		}
	}
	if list, _ := s.ListSecrets(ctx, store.DefaultTenant); len(list) != 0 {
		t.Fatalf("stored after refusals: %+v", list)
	}
	for _, n := range []string{"A", "_x", "OPENAI_API_KEY", "a1_B2"} {
		if _, err := s.SetSecret(ctx, store.DefaultTenant, n, ""); err != nil {
			t.Errorf("set %s: %v", n, err)
		}
	}
}

// TestSecretRefsParseAndRefuse: the create request's secrets and secret
// files become references; bad or clashing ones and unset secrets are
// refused, naming them.
func TestSecretRefsParseAndRefuse(t *testing.T) {
	s, _ := newSecretsService(t)
	ctx := context.Background()
	for _, n := range []string{"KEY", "TOKEN"} {
		if _, err := s.SetSecret(ctx, store.DefaultTenant, n, "v-"+n); err != nil {
			t.Fatal(err)
		}
	}
	refs, err := s.SecretRefs(ctx, store.DefaultTenant, client.CreateSandboxRequest{
		Secrets: []string{"KEY", "TOKEN=GH_TOKEN"}, SecretFiles: []string{"TOKEN=/run/secrets/gh", "KEY"},
	})
	want := []client.SecretRef{{Name: "KEY", Env: "KEY"}, {Name: "TOKEN", Env: "GH_TOKEN"},
		{Name: "TOKEN", File: "/run/secrets/gh"}, {Name: "KEY", File: "/run/secrets/KEY"}}
	if err != nil || len(refs) != len(want) {
		t.Fatalf("refs %+v %v", refs, err)
	}
	for i := range want {
		if refs[i] != want[i] {
			t.Fatalf("ref %d: %+v, want %+v", i, refs[i], want[i])
		}
	}
	for _, tc := range []struct {
		req  client.CreateSandboxRequest
		want string // in the error
	}{
		{client.CreateSandboxRequest{Secrets: []string{"NOPE"}}, "secret NOPE is not set"},
		{client.CreateSandboxRequest{SecretFiles: []string{"NOPE=/run/secrets/n"}}, "secret NOPE is not set"},
		{client.CreateSandboxRequest{Secrets: []string{"bad-name"}}, "bad-name"},
		{client.CreateSandboxRequest{Secrets: []string{"KEY=1X"}}, "1X"},
		{client.CreateSandboxRequest{Secrets: []string{"KEY=STEAD_TOKEN"}}, "STEAD_TOKEN"},
		{client.CreateSandboxRequest{Secrets: []string{"KEY", "TOKEN=KEY"}}, "variable KEY is given twice"},
		{client.CreateSandboxRequest{Secrets: []string{"KEY"}, Env: map[string]string{"KEY": "x"}}, "variable KEY is given twice"},
		{client.CreateSandboxRequest{Secrets: []string{"KEY"}, Service: &client.Service{Command: []string{"x"}, Env: map[string]string{"KEY": "x"}}}, "variable KEY is given twice"},
		{client.CreateSandboxRequest{SecretFiles: []string{"KEY=/home/agent/key"}}, "/home/agent/key"},
		{client.CreateSandboxRequest{SecretFiles: []string{"KEY=/run/secrets/../../etc/passwd"}}, "/run/secrets/../../etc/passwd"},
		{client.CreateSandboxRequest{SecretFiles: []string{"KEY=/run/secrets/"}}, "/run/secrets/"},
		{client.CreateSandboxRequest{SecretFiles: []string{"KEY=/run/secrets/a/b"}}, "/run/secrets/a/b"},
		{client.CreateSandboxRequest{SecretFiles: []string{"KEY=/run/secrets/x", "TOKEN=/run/secrets/x"}}, "given twice"},
	} {
		_, err := s.SecretRefs(ctx, store.DefaultTenant, tc.req)
		if !errors.Is(err, errs.ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want invalid naming %q", tc.req, err, tc.want)
		}
	}
	// Another tenant's secret of the same name is not this tenant's.
	if _, err := s.SecretRefs(ctx, "t-other", client.CreateSandboxRequest{Secrets: []string{"KEY"}}); !errors.Is(err, errs.ErrInvalid) {
		t.Fatalf("another tenant's secret referenced: %v", err)
	}
}

// TestSecretInUseIsListedWithItsSandboxesAndNotDeleted: a secret that a
// stored sandbox spec references (its "secret_refs", soft-deleted
// sandboxes included) lists them, and its delete is a conflict naming
// them; once unreferenced it goes.
func TestSecretInUseIsListedWithItsSandboxesAndNotDeleted(t *testing.T) {
	s, _ := newSecretsService(t)
	ctx := context.Background()
	for _, n := range []string{"KEY", "FREE"} {
		if _, err := s.SetSecret(ctx, store.DefaultTenant, n, "v"); err != nil {
			t.Fatal(err)
		}
	}
	spec := []byte(`{"limits":{"cpus":1},"secret_refs":[{"name":"KEY","env":"KEY"},{"name":"KEY","file":"/run/secrets/k"}]}`)
	for _, name := range []string{"web", "old"} {
		sb := store.Sandbox{ID: "sb-" + name, TenantID: store.DefaultTenant, Name: name, State: store.StateStopped, Spec: spec, CreatedAt: time.Now().UTC()}
		if name == "old" {
			sb.State = store.StateDeleted
		}
		if _, err := s.st.CreateSandbox(ctx, sb); err != nil {
			t.Fatal(err)
		}
	}
	list, err := s.ListSecrets(ctx, store.DefaultTenant)
	if err != nil || len(list) != 2 {
		t.Fatalf("list: %+v %v", list, err)
	}
	for _, sec := range list {
		want := map[string]string{"KEY": "old,web", "FREE": ""}[sec.Name]
		if got := strings.Join(sec.UsedBy, ","); got != want {
			t.Errorf("secret %s used by %q, want %q", sec.Name, got, want)
		}
	}
	err = s.DeleteSecret(ctx, store.DefaultTenant, "KEY")
	if !errors.Is(err, errs.ErrConflict) || !strings.Contains(err.Error(), "old, web") {
		t.Fatalf("delete a secret in use: %v", err)
	}
	if err := s.DeleteSecret(ctx, store.DefaultTenant, "FREE"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.st.GetSecret(ctx, store.DefaultTenant, "KEY"); err != nil {
		t.Fatalf("the refused delete removed it: %v", err)
	}
}
