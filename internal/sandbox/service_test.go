package sandbox

import (
	"context"
	"errors"
	"io"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stead-dev/stead/client"
	"github.com/stead-dev/stead/internal/errs"
	"github.com/stead-dev/stead/internal/pool/dir"
	"github.com/stead-dev/stead/internal/runtime/linux"
	"github.com/stead-dev/stead/internal/store"
	"github.com/stead-dev/stead/internal/store/sqlite"
	"github.com/stead-dev/stead/internal/testutil"
)

// newService runs the real service on a dir pool, SQLite and libcontainer.
func newService(t *testing.T) *Service {
	t.Helper()
	testutil.RequireRoot(t)
	ctx := context.Background()
	base := t.TempDir()
	s := serviceOn(t, openStore(t, base), base, Options{})
	if _, err := s.Bootstrap(ctx, nil); err != nil {
		t.Fatal(err)
	}
	return s
}

// openStore opens a SQLite store under base, closed when the test ends.
func openStore(t *testing.T, base string) *sqlite.Store {
	t.Helper()
	st, err := sqlite.Open(context.Background(), filepath.Join(base, "stead.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

// serviceOn runs the real service on store st with a dir pool and
// libcontainer of its own under base (opts gives the rest); everything it
// ran and made goes when the test ends.
func serviceOn(t *testing.T, st store.Store, base string, opts Options) *Service {
	t.Helper()
	testutil.RequireRoot(t)
	ctx := context.Background()
	pl, err := dir.Open(ctx, filepath.Join(base, "pool"))
	if err != nil {
		t.Fatal(err)
	}
	rt, err := linux.New(linux.Options{StateDir: filepath.Join(base, "state"), RunDir: filepath.Join(base, "run")})
	t.Cleanup(func() { linux.RemoveHostState(filepath.Join(base, "state")) })
	if err != nil {
		t.Fatal(err)
	}
	opts.Store, opts.Pool, opts.Runtime, opts.WarmDir = st, pl, rt, filepath.Join(base, "warm")
	s := New(opts)
	t.Cleanup(func() {
		ids, _ := rt.List(ctx)
		for _, id := range ids {
			rt.Kill(ctx, id)
		}
		// Read-only datasets must go through the pool to be removable.
		for _, kind := range []string{"templates", "sandboxes", "snapshots", "volumes"} {
			ids, _ := pl.List(ctx, kind)
			for _, id := range ids {
				pl.Delete(ctx, kind+"/"+id)
			}
		}
	})
	return s
}

func TestServiceCreateExecStopStart(t *testing.T) {
	s := newService(t)
	ctx := context.Background()
	t0 := time.Now()
	if _, err := s.ensureHostTemplate(ctx, store.DefaultTenant); err != nil {
		t.Fatal(err)
	}
	t1 := time.Now()
	sb, err := s.CreateSandbox(ctx, store.DefaultTenant, client.CreateSandboxRequest{Name: "one"})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("host template %s, create %s", t1.Sub(t0), time.Since(t1))
	res, err := s.Exec(ctx, store.DefaultTenant, "one", client.ExecRequest{Command: []string{"sh", "-c", "echo hi > /workspace/a; id -un; cat /etc/hostname"}}, nil)
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("exec: %+v %v", res, err)
	}
	if got := string(res.Stdout); !strings.HasPrefix(got, "agent\n") {
		t.Fatalf("stdout %q stderr %q", got, res.Stderr)
	}
	if _, err := s.StopSandbox(ctx, store.DefaultTenant, sb.ID); err != nil {
		t.Fatal(err)
	}
	rc, _, err := s.ReadFile(ctx, store.DefaultTenant, sb.ID, "/workspace/a")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(rc)
	rc.Close()
	if string(b) != "hi\n" {
		t.Fatalf("file %q", b)
	}
	if _, err := s.PauseSandbox(ctx, store.DefaultTenant, sb.ID); !errors.Is(err, errs.ErrConflict) {
		t.Fatalf("pause stopped: %v", err)
	}
	if _, err := s.StartSandbox(ctx, store.DefaultTenant, sb.ID); err != nil {
		t.Fatal(err)
	}
	// Another tenant sees nothing.
	if _, err := s.GetSandbox(ctx, "other", sb.ID); !errors.Is(err, errs.ErrNotFound) {
		t.Fatalf("other tenant: %v", err)
	}
	if _, err := s.Exec(ctx, "other", sb.ID, client.ExecRequest{Command: []string{"true"}}, nil); !errors.Is(err, errs.ErrNotFound) {
		t.Fatalf("other tenant exec: %v", err)
	}
	if _, _, err := s.ReadFile(ctx, "other", sb.ID, "/workspace/a"); !errors.Is(err, errs.ErrNotFound) {
		t.Fatalf("other tenant read: %v", err)
	}
}

func TestSoftDeletedSandboxIsPurgedAfterRetention(t *testing.T) {
	s := newService(t)
	ctx := context.Background()
	now := time.Now()
	s.opts.Now = func() time.Time { return now }
	sb, err := s.CreateSandbox(ctx, store.DefaultTenant, client.CreateSandboxRequest{NoStart: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.DeleteSandbox(ctx, store.DefaultTenant, sb.ID, false); err != nil {
		t.Fatal(err)
	}
	// The retention.warning comes 3 days ahead (at day 27 or later); the
	// purge waits for both the 30 days and 3 days after the warning.
	now = now.Add(28 * 24 * time.Hour)
	s.PurgeExpired(ctx)
	if got, err := s.GetSandbox(ctx, store.DefaultTenant, sb.ID); err != nil || got.State != "deleted" {
		t.Fatalf("purged before the retention ended: %+v %v", got, err)
	}
	now = now.Add(3 * 24 * time.Hour)
	s.PurgeExpired(ctx)
	if _, err := s.GetSandbox(ctx, store.DefaultTenant, sb.ID); !errors.Is(err, errs.ErrNotFound) {
		t.Fatalf("not purged after the retention: %v", err)
	}
	if ok, _ := s.pool.Exists(ctx, datasetName(sb.ID)); ok {
		t.Fatal("dataset left after purge")
	}
}

func TestIdlePolicyIgnoresLogReadsAndSilentTerminals(t *testing.T) {
	s := newService(t)
	ctx := context.Background()
	now := time.Now()
	s.opts.Now = func() time.Time { return now }
	sb, err := s.CreateSandbox(ctx, store.DefaultTenant, client.CreateSandboxRequest{IdleTimeout: "10m"})
	if err != nil {
		t.Fatal(err)
	}
	s.IdleCheck(ctx) // first cpu sample
	for i := 0; i < 12; i++ {
		now = now.Add(time.Minute)
		rc, err := s.AgentLog(ctx, store.DefaultTenant, sb.ID) // a forgotten `attach` polls the log
		if err != nil {
			t.Fatal(err)
		}
		rc.Close()
		s.IdleCheck(ctx)
	}
	got, _ := s.GetSandbox(ctx, store.DefaultTenant, sb.ID)
	if got.State != "stopped" || got.StopReason != "idle" {
		t.Fatalf("log polling kept the sandbox awake: %s %s", got.State, got.StopReason)
	}
}
