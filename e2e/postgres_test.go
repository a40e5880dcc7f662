package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/stead-dev/stead/client"
	"github.com/stead-dev/stead/internal/store"
	"github.com/stead-dev/stead/internal/store/postgres"
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

// TestNodeRegistryOnPostgres: a daemon on PostgreSQL registers itself as a
// node with its capacity and keeps its heartbeat fresh; `stead node`
// lists it beside another node of the store (whose heartbeat has lapsed),
// cordons, drains and uncordons it, and a cordon outlives a restart; a
// second daemon on the store is refused while the first one lives.
func TestNodeRegistryOnPostgres(t *testing.T) {
	srv := pgtest.Start(t)
	dsn := srv.NewDatabase(t)
	d := newDaemon(t, "--store", dsn, "--node-name", "node-a", "--node-heartbeat", "200ms")
	ctx := ctxT(t)

	// Another node, last heard of an hour ago, written straight into the store.
	other, err := postgres.Open(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	old := time.Now().Add(-time.Hour)
	if _, err := other.HeartbeatNode(ctx, store.Node{Name: "node-b", Address: "10.9.9.9:7878", CPUs: 1, StartedAt: old, HeartbeatAt: old}); err != nil {
		t.Fatal(err)
	}
	other.Close()

	first, err := d.c.GetNode(ctx, "node-a")
	if err != nil {
		t.Fatal(err)
	}
	if !first.Alive || !first.Self || first.State != client.NodeActive || first.Address != d.addr || first.CPUs < 1 ||
		first.MemoryBytes <= 0 || first.PoolFreeBytes <= 0 {
		t.Fatalf("the daemon's node %+v: want alive, self, active, its address and a capacity", first)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		n, err := d.c.GetNode(ctx, "node-a")
		if err != nil {
			t.Fatal(err)
		}
		if n.HeartbeatAt.After(first.HeartbeatAt) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the daemon refreshed no heartbeat")
		}
		time.Sleep(50 * time.Millisecond)
	}

	code, out, errOut := d.cli("node", "ls")
	if code != 0 || !strings.Contains(out, "node-a *") || !strings.Contains(out, "node-b") {
		t.Fatalf("node ls: exit %d\n%s%s", code, out, errOut)
	}
	var nodes []client.Node
	code, out, _ = d.cli("node", "ls", "--json")
	if code != 0 || json.Unmarshal([]byte(out), &nodes) != nil || len(nodes) != 2 || nodes[1].Name != "node-b" || nodes[1].Alive {
		t.Fatalf("node ls --json: exit %d %s: want node-a and node-b, node-b not alive", code, out)
	}
	for _, step := range []struct{ verb, want string }{{"cordon", "cordoned"}, {"drain", "draining"}, {"uncordon", "active"}, {"cordon", "cordoned"}} {
		if code, out, errOut := d.cli("node", step.verb, "node-a"); code != 0 || strings.TrimSpace(out) != "node-a "+step.want {
			t.Fatalf("node %s: exit %d %q %s", step.verb, code, out, errOut)
		}
		if st := pgValue[string](t, dsn, "SELECT state FROM nodes WHERE name = $1", "node-a"); st != step.want {
			t.Fatalf("after node %s the row's state is %q, want %q", step.verb, st, step.want)
		}
	}
	if code, _, errOut := d.cli("node", "drain", "node-zzz"); code != 3 {
		t.Fatalf("drain an unknown node: exit %d (%s), want 3", code, errOut)
	}
	// A tenant's own admin can not touch the machines.
	if code, _, errOut := d.cliEnv([]string{"STEAD_API_KEY=" + tenantAdminKey(t, d)}, "node", "ls"); code == 0 {
		t.Fatalf("node ls with a tenant-admin key succeeded: %s", errOut)
	}

	// A second daemon on the same store is refused while node-a lives (no
	// sandbox ownership yet), before it touches anything.
	base := t.TempDir()
	b, err := exec.Command(d.bin, "serve", "--store", dsn, "--node-name", "node-c", "--data-dir", filepath.Join(base, "data"),
		"--run-dir", filepath.Join(base, "run"), "--listen", freePort(t), "--socket", filepath.Join(base, "run", "s.sock"),
		"--no-network", "--pool", "dir").CombinedOutput()
	if err == nil || !strings.Contains(string(b), "node node-a") || !strings.Contains(string(b), "one node per store") {
		t.Fatalf("second daemon on the store: %v\n%s\nwant it refused, naming node-a", err, b)
	}
	if _, err := os.Stat(filepath.Join(base, "data", "pool")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("the refused daemon made a pool: %v", err)
	}
	if n := pgValue[int64](t, dsn, "SELECT COUNT(*) FROM nodes WHERE name = 'node-c'"); n != 0 {
		t.Fatalf("the refused daemon registered itself")
	}

	d.kill9()
	d.start()
	n, err := d.c.GetNode(ctx, "node-a")
	if err != nil || n.State != client.NodeCordoned || !n.CreatedAt.Equal(first.CreatedAt) || !n.StartedAt.After(first.StartedAt) {
		t.Fatalf("node after a restart %+v %v: want still cordoned, first registration kept, a new start", n, err)
	}
}

// tenantAdminKey makes a tenant-admin key in the default tenant and
// returns its secret.
func tenantAdminKey(t *testing.T, d *daemon) string {
	t.Helper()
	k, err := d.c.CreateKey(ctxT(t), client.CreateAPIKeyRequest{Name: "ta", Role: client.RoleTenantAdmin})
	if err != nil {
		t.Fatal(err)
	}
	return k.Secret
}
