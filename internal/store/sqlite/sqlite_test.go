package sqlite

import (
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stead-dev/stead/internal/errs"
	"github.com/stead-dev/stead/internal/store"
	"github.com/stead-dev/stead/internal/store/storetest"
)

func openAt(t *testing.T, path string) *Store {
	t.Helper()
	s, err := Open(t.Context(), path)
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	return s
}

func TestStoreContract(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Store {
		return openAt(t, filepath.Join(t.TempDir(), "stead.db"))
	})
}

func schemaVersions(t *testing.T, s *Store) []int {
	t.Helper()
	rows, err := s.r.QueryContext(t.Context(), "SELECT version FROM schema_migrations ORDER BY version")
	if err != nil {
		t.Fatalf("read schema_migrations: %v", err)
	}
	defer rows.Close()
	var vs []int
	for rows.Next() {
		var v int
		if err := rows.Scan(&v); err != nil {
			t.Fatal(err)
		}
		vs = append(vs, v)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return vs
}

func allVersions(t *testing.T) []int {
	t.Helper()
	ms, err := loadMigrations()
	if err != nil {
		t.Fatalf("load migrations: %v", err)
	}
	var vs []int
	for _, m := range ms {
		vs = append(vs, m.Version)
	}
	return vs
}

func TestReopenAppliesNoMigrationTwice(t *testing.T) {
	path := filepath.Join(t.TempDir(), "stead.db")
	want := allVersions(t)
	for i := range 3 {
		s := openAt(t, path)
		if got := schemaVersions(t, s); !reflect.DeepEqual(got, want) {
			t.Errorf("open %d: schema_migrations %v, want %v", i, got, want)
		}
		if i == 0 {
			if _, err := s.CreateSandbox(t.Context(), store.Sandbox{ID: "sb", TenantID: store.DefaultTenant, Name: "web", State: store.StateRunning}); err != nil {
				t.Fatal(err)
			}
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

func TestConcurrentOpensOfNewFileMigrateOnce(t *testing.T) {
	path := filepath.Join(t.TempDir(), "stead.db")
	const n = 6
	stores := make([]*Store, n)
	errsOut := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { stores[i], errsOut[i] = Open(t.Context(), path) })
	}
	wg.Wait()
	for i, err := range errsOut {
		if err != nil {
			t.Fatalf("open %d: %v", i, err)
		}
		defer stores[i].Close()
	}
	if got, want := schemaVersions(t, stores[0]), allVersions(t); !reflect.DeepEqual(got, want) {
		t.Errorf("schema_migrations %v, want %v", got, want)
	}
}

func TestFailedMigrationRollsBackAndKeepsVersion(t *testing.T) {
	s := openAt(t, filepath.Join(t.TempDir(), "stead.db"))
	defer s.Close()
	ms, err := loadMigrations()
	if err != nil {
		t.Fatal(err)
	}
	bad := migration{
		Version: ms[len(ms)-1].Version + 1,
		Name:    "9999_bad",
		SQL:     "CREATE TABLE half_done (x INTEGER); INSERT INTO no_such_table VALUES (1);",
	}
	err = migrate(t.Context(), s.w, append(ms, bad))
	if err == nil || !strings.Contains(err.Error(), "9999_bad") {
		t.Fatalf("migrate with a broken step: %v, want an error naming it", err)
	}
	if got, want := schemaVersions(t, s), allVersions(t); !reflect.DeepEqual(got, want) {
		t.Errorf("schema_migrations %v after failed migration, want %v", got, want)
	}
	var n int
	if err := s.r.QueryRowContext(t.Context(), "SELECT COUNT(*) FROM sqlite_schema WHERE name = 'half_done'").Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Errorf("half-applied migration left table half_done behind")
	}
}

func TestOpenRefusesNewerSchema(t *testing.T) {
	path := filepath.Join(t.TempDir(), "stead.db")
	s := openAt(t, path)
	vs := allVersions(t)
	future := vs[len(vs)-1] + 1
	if _, err := s.w.ExecContext(t.Context(),
		"INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, 'from_the_future', '2030-01-01T00:00:00.000000000Z')",
		future); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	_, err := Open(t.Context(), path)
	if !errors.Is(err, errs.ErrUnsupported) || !strings.Contains(err.Error(), "newer") {
		t.Fatalf("open newer database: %v, want ErrUnsupported saying it is newer", err)
	}
	t.Logf("error shown to the user: %v", err)
}

func TestConnectionsRunWALWithFullSyncAndForeignKeys(t *testing.T) {
	s := openAt(t, filepath.Join(t.TempDir(), "stead.db"))
	defer s.Close()
	ctx := t.Context()
	pragma := func(pool string, q string) string {
		t.Helper()
		db := s.w
		if pool == "reader" {
			db = s.r
		}
		var v string
		if err := db.QueryRowContext(ctx, "PRAGMA "+q).Scan(&v); err != nil {
			t.Fatalf("%s PRAGMA %s: %v", pool, q, err)
		}
		return v
	}
	for _, pool := range []string{"writer", "reader"} {
		if got := pragma(pool, "journal_mode"); got != "wal" {
			t.Errorf("%s journal_mode = %q, want wal", pool, got)
		}
		if got := pragma(pool, "foreign_keys"); got != "1" {
			t.Errorf("%s foreign_keys = %q, want 1", pool, got)
		}
		if got := pragma(pool, "busy_timeout"); got != "10000" {
			t.Errorf("%s busy_timeout = %q, want 10000", pool, got)
		}
	}
	if got := pragma("writer", "synchronous"); got != "2" {
		t.Errorf("writer synchronous = %q, want 2 (FULL)", got)
	}
	if got := pragma("writer", "secure_delete"); got != "2" {
		t.Errorf("writer secure_delete = %q, want 2 (FAST)", got)
	}
	if _, err := s.r.ExecContext(ctx, "INSERT INTO tenants (id, name, created_at) VALUES ('x', 'x', 'x')"); err == nil {
		t.Errorf("reader pool accepted a write")
	}
	if st := s.w.Stats(); st.MaxOpenConnections != 1 {
		t.Errorf("writer pool allows %d connections, want 1", st.MaxOpenConnections)
	}
}

func TestDataSurvivesCloseAndReopen(t *testing.T) {
	path := filepath.Join(t.TempDir(), "stead.db")
	ctx := t.Context()
	s := openAt(t, path)
	ts := time.Date(2026, 11, 30, 12, 0, 0, 123456789, time.UTC)
	if err := s.CreateTenant(ctx, store.Tenant{ID: "acme", Name: "Acme", CreatedAt: ts}); err != nil {
		t.Fatal(err)
	}
	if err := s.CreateAPIKey(ctx, store.APIKey{ID: "k", TenantID: "acme", Hash: []byte("h"), Role: store.RoleAdmin, CreatedAt: ts}); err != nil {
		t.Fatal(err)
	}
	if err := s.CreateTemplate(ctx, store.Template{ID: "host", TenantID: "acme", Kind: "host", Config: []byte("{}"), CreatedAt: ts}); err != nil {
		t.Fatal(err)
	}
	sb, err := s.CreateSandbox(ctx, store.Sandbox{ID: "sb", TenantID: "acme", Name: "web", State: store.StateCreating, CreatedAt: ts, StartedAt: &ts})
	if err != nil {
		t.Fatal(err)
	}
	sb.State = store.StateStopped
	sb, err = s.UpdateSandbox(ctx, sb)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	s = openAt(t, path)
	defer s.Close()
	got, err := s.GetSandbox(ctx, "acme", "web")
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, sb) {
		t.Errorf("after reopen got %+v, want %+v", got, sb)
	}
	if k, err := s.LookupAPIKey(ctx, []byte("h")); err != nil || k.Role != store.RoleAdmin || !k.CreatedAt.Equal(ts) {
		t.Errorf("api key after reopen: %+v, %v", k, err)
	}
	if tp, err := s.GetTemplate(ctx, "acme", "host"); err != nil || tp.Kind != "host" {
		t.Errorf("template after reopen: %+v, %v", tp, err)
	}
	if tn, err := s.GetTenant(ctx, "acme"); err != nil || tn.Name != "Acme" {
		t.Errorf("tenant after reopen: %+v, %v", tn, err)
	}
}

// TestAcknowledgedWriteIsInWAL copies the database and its WAL while the
// store is still open, as a kill -9 would leave them (no checkpoint, no
// clean close), and checks that a write is readable from the copy as soon as
// its method has returned.
func TestAcknowledgedWriteIsInWAL(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "stead.db")
	s := openAt(t, path)
	defer s.Close()
	want, err := s.CreateSandbox(t.Context(), store.Sandbox{ID: "sb", TenantID: store.DefaultTenant, Name: "web", State: store.StateRunning})
	if err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(path + "-wal"); err != nil || fi.Size() == 0 {
		t.Fatalf("WAL after an acknowledged write: %v, %v", fi, err)
	}
	crashed := filepath.Join(t.TempDir(), "stead.db")
	copyFile(t, path, crashed)
	copyFile(t, path+"-wal", crashed+"-wal")

	c := openAt(t, crashed)
	defer c.Close()
	got, err := c.GetSandbox(t.Context(), store.DefaultTenant, "sb")
	if err != nil {
		t.Fatalf("acknowledged write missing after simulated crash: %v", err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %+v, want %+v", got, want)
	}
}

// TestAcknowledgedCheckpointIsInWAL is TestAcknowledgedWriteIsInWAL for a
// checkpoint put that also trims history: the copy taken right after the
// put returned holds the new version and none of the trimmed ones.
func TestAcknowledgedCheckpointIsInWAL(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "stead.db")
	ctx := t.Context()
	s := openAt(t, path)
	defer s.Close()
	if _, err := s.CreateSandbox(ctx, store.Sandbox{ID: "sb", TenantID: store.DefaultTenant, Name: "web", State: store.StateRunning}); err != nil {
		t.Fatal(err)
	}
	k := store.CheckpointKey{TenantID: store.DefaultTenant, SandboxID: "sb", Name: "plan"}
	for i := 1; i <= 3; i++ {
		if _, err := s.PutCheckpoint(ctx, store.CheckpointWrite{CheckpointKey: k, IfVersion: int64(i - 1), Body: []byte(fmt.Sprint(i)), Keep: 2}); err != nil {
			t.Fatal(err)
		}
	}
	crashed := filepath.Join(t.TempDir(), "stead.db")
	copyFile(t, path, crashed)
	copyFile(t, path+"-wal", crashed+"-wal")

	c := openAt(t, crashed)
	defer c.Close()
	got, err := c.GetCheckpoint(ctx, k, 0)
	if err != nil || got.Version != 3 || string(got.Body) != "3" {
		t.Fatalf("acknowledged put after simulated crash: %+v, %v", got, err)
	}
	vs, err := c.ListCheckpointVersions(ctx, k)
	if err != nil || len(vs) != 2 || vs[0].Version != 2 {
		t.Fatalf("history after simulated crash: %+v, %v; want versions 2 and 3", vs, err)
	}
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	in, err := os.Open(from)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	out, err := os.Create(to)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, in); err != nil {
		t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestTimesKeepNanosecondsAndSortAsText(t *testing.T) {
	s := openAt(t, filepath.Join(t.TempDir(), "stead.db"))
	defer s.Close()
	ctx := t.Context()
	ts := time.Date(2026, 11, 30, 12, 0, 0, 1, time.FixedZone("CET", 3600))
	in := store.Sandbox{ID: "sb", TenantID: store.DefaultTenant, Name: "web", State: store.StateRunning, CreatedAt: ts, StoppedAt: &ts}
	ret, err := s.CreateSandbox(ctx, in)
	if err != nil {
		t.Fatal(err)
	}
	got, err := s.GetSandbox(ctx, store.DefaultTenant, "sb")
	if err != nil {
		t.Fatal(err)
	}
	if !got.CreatedAt.Equal(ts) || got.CreatedAt.Nanosecond() != 1 || !got.StoppedAt.Equal(ts) {
		t.Errorf("created_at %v stopped_at %v, want %v exactly", got.CreatedAt, got.StoppedAt, ts)
	}
	if !reflect.DeepEqual(ret, got) {
		t.Errorf("returned record %+v differs from stored %+v", ret, got)
	}
	var raw string
	if err := s.r.QueryRowContext(ctx, "SELECT created_at FROM sandboxes WHERE id = 'sb'").Scan(&raw); err != nil {
		t.Fatal(err)
	}
	if raw != "2026-11-30T11:00:00.000000001Z" {
		t.Errorf("stored created_at %q, want fixed-width UTC text", raw)
	}
}

func TestOpenRejectsNonFilePaths(t *testing.T) {
	for _, p := range []string{"", ":memory:", "file:x.db", "x.db?mode=ro"} {
		if _, err := Open(t.Context(), p); !errors.Is(err, errs.ErrInvalid) {
			t.Errorf("open %q: %v, want ErrInvalid", p, err)
		}
	}
}

func TestCloseIsIdempotent(t *testing.T) {
	s := openAt(t, filepath.Join(t.TempDir(), "stead.db"))
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Errorf("second close: %v", err)
	}
}

// TestDatabaseFilesAreOwnerOnly: a new database, its WAL and its shared
// memory file are 0600 from their creation, whatever the umask, and the
// files of an existing database readable by others (left by an older
// stead) are narrowed to 0600 on open.
func TestDatabaseFilesAreOwnerOnly(t *testing.T) {
	old := syscall.Umask(0)
	defer syscall.Umask(old)
	check := func(when, dir string) {
		t.Helper()
		ents, err := os.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]os.FileMode{}
		for _, e := range ents {
			fi, err := e.Info()
			if err != nil {
				t.Fatal(err)
			}
			got[e.Name()] = fi.Mode()
		}
		for _, name := range []string{"stead.db", "stead.db-wal", "stead.db-shm"} {
			if _, ok := got[name]; !ok {
				t.Errorf("%s: %s missing (files: %v)", when, name, got)
			}
		}
		for name, m := range got {
			if m != 0o600 {
				t.Errorf("%s: %s has mode %v, want -rw-------", when, name, m)
			}
		}
	}
	dir := t.TempDir()
	path := filepath.Join(dir, "stead.db")
	s := openAt(t, path)
	defer s.Close()
	if _, err := s.CreateSandbox(t.Context(), store.Sandbox{ID: "sb", TenantID: store.DefaultTenant, Name: "web", State: store.StateRunning}); err != nil {
		t.Fatal(err)
	}
	check("new database", dir)

	old2 := t.TempDir()
	for _, suffix := range []string{"", "-wal", "-shm"} {
		copyFile(t, path+suffix, filepath.Join(old2, "stead.db"+suffix))
		if err := os.Chmod(filepath.Join(old2, "stead.db"+suffix), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	s2 := openAt(t, filepath.Join(old2, "stead.db"))
	defer s2.Close()
	if _, err := s2.GetSandbox(t.Context(), store.DefaultTenant, "sb"); err != nil {
		t.Fatalf("open the copy: %v", err)
	}
	check("database left readable by others", old2)
}

// Statements are kept prepared (stmtcache.go), and a prepared read still
// sees every write committed before it runs: a reused statement holds no
// snapshot between runs.
func TestStatementsStayPreparedAndReadFreshData(t *testing.T) {
	ctx := t.Context()
	s := openAt(t, filepath.Join(t.TempDir(), "stead.db"))
	t.Cleanup(func() { s.Close() })
	if err := s.CreateTenant(ctx, store.Tenant{ID: "acme", Name: "Acme"}); err != nil {
		t.Fatal(err)
	}
	for i := range 20 {
		name := fmt.Sprintf("Acme %d", i)
		if err := s.UpdateTenant(ctx, store.Tenant{ID: "acme", Name: name}); err != nil {
			t.Fatal(err)
		}
		got, err := s.GetTenant(ctx, "acme")
		if err != nil || got.Name != name {
			t.Fatalf("read %d after a write: %+v %v (want name %q)", i, got, err, name)
		}
		if _, err := s.CreateSandbox(ctx, store.Sandbox{ID: fmt.Sprintf("sb-%d", i), TenantID: "acme", Name: fmt.Sprintf("n%d", i),
			TemplateID: "host", State: store.StateStopped, Spec: []byte("{}")}); err != nil {
			t.Fatal(err)
		}
		list, err := s.ListSandboxes(ctx, store.SandboxFilter{TenantID: "acme"})
		if err != nil || len(list) != i+1 {
			t.Fatalf("list after create %d: %d sandboxes, %v", i, len(list), err)
		}
	}
	// A constraint error of a prepared statement is reported as before.
	if _, err := s.CreateSandbox(ctx, store.Sandbox{ID: "sb-0", TenantID: "acme", Name: "other", TemplateID: "host",
		State: store.StateStopped, Spec: []byte("{}")}); !errors.Is(err, errs.ErrConflict) {
		t.Fatalf("create with a taken id: %v", err)
	}
	w, r := s.PreparedStatements()
	if w == 0 || r == 0 {
		t.Fatalf("prepared statements: writer %d, reader %d; want some on both", w, r)
	}
	// Running the same calls again prepares nothing new.
	for range 3 {
		if _, err := s.GetTenant(ctx, "acme"); err != nil {
			t.Fatal(err)
		}
		if err := s.UpdateTenant(ctx, store.Tenant{ID: "acme", Name: "Acme"}); err != nil {
			t.Fatal(err)
		}
	}
	if w2, r2 := s.PreparedStatements(); w2 != w || r2 != r {
		t.Fatalf("prepared statements grew on repeated calls: writer %d→%d, reader %d→%d", w, w2, r, r2)
	}
}

// TestLeasesOfTwoProcessesNeverShareAnAddress: two stores on one file (two
// processes) each remember where their next lease starts; neither leases
// an address the other holds, a store's release is its next lease (the
// lowest free), and the subnet fills to its last address.
func TestLeasesOfTwoProcessesNeverShareAnAddress(t *testing.T) {
	path := filepath.Join(t.TempDir(), "stead.db")
	a, b := openAt(t, path), openAt(t, path)
	defer a.Close()
	defer b.Close()
	subnet := netip.MustParsePrefix("10.9.0.0/24")
	held := map[netip.Addr]string{}
	lease := func(s *Store, id string) netip.Addr {
		t.Helper()
		addr, err := s.LeaseAddress(t.Context(), id, subnet)
		if err != nil {
			t.Fatalf("lease %s: %v", id, err)
		}
		if other, ok := held[addr]; ok {
			t.Fatalf("%s got %s, held by %s", id, addr, other)
		}
		held[addr] = id
		return addr
	}
	for i := range 40 {
		lease(a, fmt.Sprintf("a%d", i))
		lease(b, fmt.Sprintf("b%d", i))
	}
	if err := a.ReleaseLease(t.Context(), "a0"); err != nil {
		t.Fatal(err)
	}
	delete(held, netip.MustParseAddr("10.9.0.2"))
	if got := lease(a, "a-again"); got.String() != "10.9.0.2" {
		t.Fatalf("a's lease after its release = %s, want 10.9.0.2", got)
	}
	for i := range 253 - 80 { // the rest of .2-.254
		lease([]*Store{a, b}[i%2], fmt.Sprintf("c%d", i))
	}
	if _, err := a.LeaseAddress(t.Context(), "one-too-many", subnet); !errors.Is(err, errs.ErrQuota) {
		t.Fatalf("lease in a full subnet: %v", err)
	}
}
