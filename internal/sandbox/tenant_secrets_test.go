package sandbox

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/stead-dev/stead/client"
	"github.com/stead-dev/stead/internal/errs"
	"github.com/stead-dev/stead/internal/store"
	"github.com/stead-dev/stead/internal/store/sqlite"
	"github.com/stead-dev/stead/internal/testutil"
)

// newSecretsService is a service with a real store and key file, and no
// runtime: enough for the secrets' own verbs.
func newSecretsService(t *testing.T) (*Service, string) {
	t.Helper()
	dir := t.TempDir()
	st, err := sqlite.Open(t.Context(), filepath.Join(dir, "stead.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return New(Options{Store: st, SecretsKeyFile: filepath.Join(dir, "secrets.key")}), dir
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
	env, _ := s.secrets.get(false)
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
	refs, err := s.secretRefs(ctx, store.DefaultTenant, client.CreateSandboxRequest{
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
		_, err := s.secretRefs(ctx, store.DefaultTenant, tc.req)
		if !errors.Is(err, errs.ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want invalid naming %q", tc.req, err, tc.want)
		}
	}
	// Another tenant's secret of the same name is not this tenant's.
	if _, err := s.secretRefs(ctx, "t-other", client.CreateSandboxRequest{Secrets: []string{"KEY"}}); !errors.Is(err, errs.ErrInvalid) {
		t.Fatalf("another tenant's secret referenced: %v", err)
	}
}

// TestSecretReachesServiceExecAndFileAndRotates runs a real sandbox: the
// service and an exec get the variable, the file is on a tmpfs with mode
// 0400 owned by the agent, the stored spec and the database hold no value;
// a rotation reaches the next exec at once and the service and the file at
// the next start; a secret in use cannot be deleted.
func TestSecretReachesServiceExecAndFileAndRotates(t *testing.T) {
	s := newService(t)
	ctx := context.Background()
	const v1, v2 = "first-5d0c3b7e9a41f2", "second-8e2a6f1c0b93d7"
	if _, err := s.SetSecret(ctx, store.DefaultTenant, "API_KEY", v1); err != nil {
		t.Fatal(err)
	}
	if _, err := s.CreateSandbox(ctx, store.DefaultTenant, client.CreateSandboxRequest{Name: "sec", Secrets: []string{"MISSING"}}); !errors.Is(err, errs.ErrInvalid) || !strings.Contains(err.Error(), "MISSING") {
		t.Fatalf("create with an unset secret: %v", err)
	}
	sb, err := s.CreateSandbox(ctx, store.DefaultTenant, client.CreateSandboxRequest{
		Name: "sec", Secrets: []string{"API_KEY", "API_KEY=RENAMED"}, SecretFiles: []string{"API_KEY=/run/secrets/api"},
		Service: &client.Service{Command: []string{"sh", "-c", `printf %s "$API_KEY" > /tmp/svc-env; sleep 1d`}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(sb.Secrets) != 3 {
		t.Fatalf("view: %+v", sb.Secrets)
	}
	sh := func(script string) string {
		t.Helper()
		res, err := s.Exec(ctx, store.DefaultTenant, sb.ID, client.ExecRequest{Command: []string{"sh", "-c", script}}, nil)
		if err != nil || res.ExitCode != 0 {
			t.Fatalf("exec %q: %+v %v (stderr %s)", script, res, err, res.Stderr)
		}
		return string(res.Stdout)
	}
	waitFor := func(script, want string) {
		t.Helper()
		got := ""
		for range 100 {
			if got = sh(script); got == want {
				return
			}
			sh("sleep 0.05")
		}
		t.Fatalf("%q: %q, want %q", script, got, want)
	}
	waitFor("cat /tmp/svc-env 2>/dev/null || true", v1)
	if got := sh(`printf '%s %s' "$API_KEY" "$RENAMED"`); got != v1+" "+v1 {
		t.Fatalf("exec env: %q", got)
	}
	if got := sh("cat /run/secrets/api; stat -c ' %a %U' /run/secrets/api"); got != v1+" 400 agent\n" {
		t.Fatalf("secret file: %q", got)
	}
	if got := sh("stat -f -c %T /run/secrets"); got != "tmpfs\n" {
		t.Fatalf("/run/secrets is on %q, not a tmpfs", got)
	}
	if got := sh("touch /run/secrets/x 2>&1 || echo refused"); !strings.Contains(got, "refused") {
		t.Fatalf("/run/secrets is writable: %q", got)
	}
	// The request's own variable wins.
	res, err := s.Exec(ctx, store.DefaultTenant, sb.ID, client.ExecRequest{Command: []string{"printenv", "API_KEY"}, Env: map[string]string{"API_KEY": "mine"}}, nil)
	if err != nil || string(res.Stdout) != "mine\n" {
		t.Fatalf("request env: %q %v", res.Stdout, err)
	}
	rec, _ := s.st.GetSandbox(ctx, store.DefaultTenant, sb.ID)
	if bytes.Contains(rec.Spec, []byte(v1)) {
		t.Fatalf("the stored spec holds the value: %s", rec.Spec)
	}
	// Rotation: the next exec sees it; the service and the file at the next start.
	if _, err := s.SetSecret(ctx, store.DefaultTenant, "API_KEY", v2); err != nil {
		t.Fatal(err)
	}
	if got := sh(`printenv API_KEY`); got != v2+"\n" {
		t.Fatalf("exec after rotation: %q", got)
	}
	if got := sh("cat /tmp/svc-env /run/secrets/api"); got != v1+v1 {
		t.Fatalf("service and file before the restart: %q", got)
	}
	list, err := s.ListSecrets(ctx, store.DefaultTenant)
	if err != nil || len(list) != 1 || len(list[0].UsedBy) != 1 || list[0].UsedBy[0] != "sec" {
		t.Fatalf("list: %+v %v", list, err)
	}
	err = s.DeleteSecret(ctx, store.DefaultTenant, "API_KEY")
	if !errors.Is(err, errs.ErrConflict) || !strings.Contains(err.Error(), "sec") {
		t.Fatalf("delete in use: %v", err)
	}
	if _, err := s.StopSandbox(ctx, store.DefaultTenant, sb.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := s.StartSandbox(ctx, store.DefaultTenant, sb.ID); err != nil {
		t.Fatal(err)
	}
	waitFor("cat /tmp/svc-env 2>/dev/null || true", v2)
	if got := sh("cat /run/secrets/api"); got != v2 {
		t.Fatalf("file after the restart: %q", got)
	}
	// A secret gone from under a sandbox (restored from another daemon's
	// push, where it was set) stops its start, named; set, it starts.
	if _, err := s.StopSandbox(ctx, store.DefaultTenant, sb.ID); err != nil {
		t.Fatal(err)
	}
	if err := s.st.DeleteSecret(ctx, store.DefaultTenant, "API_KEY"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.StartSandbox(ctx, store.DefaultTenant, sb.ID); !errors.Is(err, errs.ErrInvalid) || !strings.Contains(err.Error(), "API_KEY") {
		t.Fatalf("start without its secret: %v", err)
	}
	if _, err := s.SetSecret(ctx, store.DefaultTenant, "API_KEY", v2); err != nil {
		t.Fatal(err)
	}
	if _, err := s.StartSandbox(ctx, store.DefaultTenant, sb.ID); err != nil {
		t.Fatal(err)
	}
	// Soft-deleted, it still holds the secret; purged, it does not.
	if _, err := s.DeleteSandbox(ctx, store.DefaultTenant, sb.ID, false); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteSecret(ctx, store.DefaultTenant, "API_KEY"); !errors.Is(err, errs.ErrConflict) {
		t.Fatalf("delete used by a soft-deleted sandbox: %v", err)
	}
	if _, err := s.DeleteSandbox(ctx, store.DefaultTenant, sb.ID, true); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteSecret(ctx, store.DefaultTenant, "API_KEY"); err != nil {
		t.Fatalf("delete unused: %v", err)
	}
	if err := s.DeleteSecret(ctx, store.DefaultTenant, "API_KEY"); !errors.Is(err, errs.ErrNotFound) {
		t.Fatalf("delete twice: %v", err)
	}
}

// TestLeftoverSecretStagesAreDropped: a tmpfs of secret files left by a
// daemon killed during a start is unmounted and removed at the next
// reconcile (dropSecretStages), and a start over it does not stack on it.
func TestLeftoverSecretStagesAreDropped(t *testing.T) {
	testutil.RequireRoot(t)
	stage := t.TempDir()
	s := New(Options{StageDir: stage})
	dir := s.secretStage("sb-crashed")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	for range 2 { // stacked, as two interrupted starts would leave them
		if err := unix.Mount("tmpfs", dir, "tmpfs", 0, "size=64k"); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() { dropSecretStage(dir) })
	os.WriteFile(filepath.Join(dir, "key"), []byte("left"), 0o400)
	s.dropSecretStages()
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("the stage is still there: %v", err)
	}
	if mi, _ := os.ReadFile("/proc/self/mountinfo"); bytes.Contains(mi, []byte(" "+dir+" ")) {
		t.Fatal("a tmpfs is still mounted at the stage")
	}
}
