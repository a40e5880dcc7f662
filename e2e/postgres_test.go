package e2e

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/stead-dev/stead/client"
	"github.com/stead-dev/stead/internal/store/postgres/pgtest"
)

// pgValue runs a one-value query on the database at dsn.
func pgValue[T any](t *testing.T, dsn, q string, args ...any) T {
	t.Helper()
	ctx := context.Background()
	c, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatalf("connect to postgres: %v", err)
	}
	defer c.Close(ctx)
	var v T
	if err := c.QueryRow(ctx, q, args...).Scan(&v); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	return v
}

func TestDaemonOnPostgresServesCreateExecStopStartAcrossRestart(t *testing.T) {
	srv := pgtest.Start(t)
	dsn := srv.NewDatabase(t)
	d := newDaemon(t, "--store", dsn)
	ctx := ctxT(t)

	sb, err := d.c.CreateSandbox(ctx, client.CreateSandboxRequest{Name: "pg-1"})
	if err != nil {
		t.Fatal(err)
	}
	if out := d.sh(ctx, sb.ID, "agent", "echo kept-in-root > /workspace/f; cat /workspace/f"); !strings.Contains(out, "kept-in-root") {
		t.Fatalf("exec output %q", out)
	}
	// The metadata is in PostgreSQL, not in a SQLite file in the data dir.
	if st := pgValue[string](t, dsn, "SELECT state FROM sandboxes WHERE id = $1", sb.ID); st != "running" {
		t.Fatalf("sandbox row state %q in postgres, want running", st)
	}
	if _, err := os.Stat(filepath.Join(d.dataDir, "stead.db")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("stead.db in the data dir of a daemon on postgres: %v", err)
	}

	if _, err := d.c.StopSandbox(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	if st := pgValue[string](t, dsn, "SELECT state FROM sandboxes WHERE id = $1", sb.ID); st != "stopped" {
		t.Fatalf("sandbox row state %q in postgres after stop, want stopped", st)
	}

	// A new daemon process finds the sandbox in PostgreSQL.
	d.kill9()
	d.start()
	got, err := d.c.GetSandbox(ctx, "pg-1")
	if err != nil || got.ID != sb.ID || got.State != "stopped" {
		t.Fatalf("after restart: %+v %v", got, err)
	}
	if _, err := d.c.StartSandbox(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	if out := d.sh(ctx, sb.ID, "agent", "cat /workspace/f"); !strings.Contains(out, "kept-in-root") {
		t.Fatalf("file after stop, restart and start: %q", out)
	}
	if st := pgValue[string](t, dsn, "SELECT state FROM sandboxes WHERE id = $1", sb.ID); st != "running" {
		t.Fatalf("sandbox row state %q in postgres after start, want running", st)
	}
	// The audit trail is in PostgreSQL too, and verifies.
	if n := pgValue[int64](t, dsn, "SELECT COUNT(*) FROM audit_entries WHERE target LIKE '%' || $1 || '%'", sb.ID); n < 3 {
		t.Fatalf("%d audit entries name the sandbox in postgres, want create, stop and start at least", n)
	}
	if _, err := os.Stat(filepath.Join(d.dataDir, "stead.db")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("stead.db in the data dir after restart: %v", err)
	}
}

func TestServeRejectsUnknownStore(t *testing.T) {
	bin := steadBinary(t)
	base := t.TempDir()
	b, err := exec.Command(bin, "serve", "--data-dir", filepath.Join(base, "data"), "--run-dir", filepath.Join(base, "run"),
		"--listen", freePort(t), "--socket", filepath.Join(base, "run", "s.sock"), "--no-network", "--pool", "dir",
		"--store", "mysql://user:secret@127.0.0.1/db").CombinedOutput()
	out := string(b)
	if err == nil {
		t.Fatalf("serve with a mysql store started: %s", out)
	}
	if !strings.Contains(out, "postgres://") || strings.Contains(out, "secret") {
		t.Fatalf("error %q: want one naming the accepted stores and not showing the password", out)
	}
}
