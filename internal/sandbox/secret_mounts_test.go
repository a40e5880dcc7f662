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
	"github.com/stead-dev/stead/internal/testutil"
)

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
