package postgres

import (
	"context"
	"errors"
	"fmt"
	"os"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stead-dev/stead/internal/errs"
	"github.com/stead-dev/stead/internal/store"
	"github.com/stead-dev/stead/internal/store/postgres/pgtest"
	"github.com/stead-dev/stead/internal/store/storetest"
)

// server is the one PostgreSQL server of this test binary, started by
// TestMain; every test makes its own database on it.
var server *pgtest.Server

// template is a database TestMain migrated once; the contract suite's stores
// are copies of it (CREATE DATABASE ... TEMPLATE), which saves each of its
// hundreds of subtests the migration. The migration itself is tested on
// empty databases by the tests below.
var template string

func TestMain(m *testing.M) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	s, err := pgtest.Launch(ctx)
	cancel()
	if err != nil {
		// Fail, never skip: CI must see a missing PostgreSQL.
		fmt.Fprintf(os.Stderr, "FAIL: the PostgreSQL store tests need a PostgreSQL server: %v\n", err)
		os.Exit(1)
	}
	server = s
	if template, err = migratedTemplate(s); err != nil {
		fmt.Fprintf(os.Stderr, "FAIL: make a migrated template database: %v\n", err)
		s.Stop()
		os.Exit(1)
	}
	code := m.Run()
	s.Stop()
	os.Exit(code)
}

func migratedTemplate(srv *pgtest.Server) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	name, err := srv.CreateDatabase(ctx, "")
	if err != nil {
		return "", err
	}
	st, err := Open(ctx, srv.DSN(name))
	if err != nil {
		return "", err
	}
	return name, st.Close()
}

func openDSN(t *testing.T, dsn string) *Store {
	t.Helper()
	s, err := Open(t.Context(), dsn)
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	return s
}

func TestStoreContract(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Store {
		return openDSN(t, server.NewDatabaseFrom(t, template))
	})
}

func schemaVersions(t *testing.T, s *Store) []int {
	t.Helper()
	rows, err := s.db.QueryContext(t.Context(), "SELECT version FROM schema_migrations ORDER BY version")
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
	dsn := server.NewDatabase(t)
	s := openDSN(t, dsn)
	want := allVersions(t)
	if got := schemaVersions(t, s); !reflect.DeepEqual(got, want) {
		t.Fatalf("schema_migrations %v, want %v", got, want)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openDSN(t, dsn)
	defer s.Close()
	if got := schemaVersions(t, s); !reflect.DeepEqual(got, want) {
		t.Errorf("schema_migrations after reopen %v, want %v", got, want)
	}
}

func TestConcurrentOpensOfNewDatabaseMigrateOnce(t *testing.T) {
	dsn := server.NewDatabase(t)
	const n = 4
	stores := make([]*Store, n)
	errsOut := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			stores[i], errsOut[i] = Open(t.Context(), dsn)
		}()
	}
	wg.Wait()
	for i := range n {
		if errsOut[i] != nil {
			t.Fatalf("open %d: %v", i, errsOut[i])
		}
		defer stores[i].Close()
	}
	if got, want := schemaVersions(t, stores[0]), allVersions(t); !reflect.DeepEqual(got, want) {
		t.Errorf("schema_migrations %v, want %v", got, want)
	}
}

func TestFailedMigrationRollsBackAndKeepsVersion(t *testing.T) {
	s := openDSN(t, server.NewDatabase(t))
	defer s.Close()
	ms, err := loadMigrations()
	if err != nil {
		t.Fatal(err)
	}
	bad := migration{
		Version: ms[len(ms)-1].Version + 1,
		Name:    "9999_bad",
		SQL:     "CREATE TABLE half_done (x BIGINT); INSERT INTO no_such_table VALUES (1);",
	}
	err = migrate(t.Context(), s.db, append(ms, bad))
	if err == nil || !strings.Contains(err.Error(), "9999_bad") {
		t.Fatalf("migrate with a broken step: %v, want an error naming it", err)
	}
	if got, want := schemaVersions(t, s), allVersions(t); !reflect.DeepEqual(got, want) {
		t.Errorf("schema_migrations %v after failed migration, want %v", got, want)
	}
	var n int
	if err := s.db.QueryRowContext(t.Context(), "SELECT COUNT(*) FROM pg_tables WHERE tablename = 'half_done'").Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Errorf("half-applied migration left table half_done behind")
	}
}

func TestMigrationAfterGapIsApplied(t *testing.T) {
	s := openDSN(t, server.NewDatabase(t))
	defer s.Close()
	ms, err := loadMigrations()
	if err != nil {
		t.Fatal(err)
	}
	last := ms[len(ms)-1].Version
	later := migration{Version: last + 5, Name: fmt.Sprintf("%04d_later", last+5), SQL: "CREATE TABLE later_one (x BIGINT)"}
	if err := migrate(t.Context(), s.db, append(ms, later)); err != nil {
		t.Fatalf("migrate across a gap: %v", err)
	}
	if got, want := schemaVersions(t, s), append(allVersions(t), last+5); !reflect.DeepEqual(got, want) {
		t.Fatalf("schema_migrations %v, want %v", got, want)
	}
	// The number skipped lands later and is applied then, once.
	gap := migration{Version: last + 2, Name: fmt.Sprintf("%04d_gap", last+2), SQL: "CREATE TABLE gap_one (x BIGINT)"}
	all := append(append(append([]migration{}, ms...), gap), later)
	for range 2 {
		if err := migrate(t.Context(), s.db, all); err != nil {
			t.Fatalf("migrate with the gap filled: %v", err)
		}
	}
	if got, want := schemaVersions(t, s), append(allVersions(t), last+2, last+5); !reflect.DeepEqual(got, want) {
		t.Errorf("schema_migrations %v, want %v", got, want)
	}
}

func TestOpenRefusesNewerSchema(t *testing.T) {
	dsn := server.NewDatabase(t)
	s := openDSN(t, dsn)
	vs := allVersions(t)
	future := vs[len(vs)-1] + 1
	if _, err := s.db.ExecContext(t.Context(),
		"INSERT INTO schema_migrations (version, name, applied_at) VALUES ($1, 'from_the_future', '2030-01-01T00:00:00.000000000Z')",
		future); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	_, err := Open(t.Context(), dsn)
	if !errors.Is(err, errs.ErrUnsupported) || !strings.Contains(err.Error(), "newer") {
		t.Fatalf("open newer database: %v, want ErrUnsupported saying it is newer", err)
	}
	t.Logf("error shown to the user: %v", err)
}

func TestOpenRejectsBadDSN(t *testing.T) {
	for _, dsn := range []string{"postgres://[::1", "port=notanumber"} {
		if _, err := Open(t.Context(), dsn); !errors.Is(err, errs.ErrInvalid) {
			t.Errorf("open %q: %v, want ErrInvalid", dsn, err)
		}
	}
}

func TestDataSurvivesCloseAndReopen(t *testing.T) {
	dsn := server.NewDatabase(t)
	s := openDSN(t, dsn)
	at := time.Date(2026, 12, 2, 3, 4, 5, 123456789, time.UTC)
	if err := s.CreateTenant(t.Context(), store.Tenant{ID: "t1", Name: "one", CreatedAt: at}); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openDSN(t, dsn)
	defer s.Close()
	got, err := s.GetTenant(t.Context(), "t1")
	if err != nil {
		t.Fatal(err)
	}
	if got.Name != "one" || !got.CreatedAt.Equal(at) {
		t.Errorf("tenant after reopen %+v, want name one created %v", got, at)
	}
}

func TestTimesKeepNanosecondsAndSortAsText(t *testing.T) {
	s := openDSN(t, server.NewDatabase(t))
	defer s.Close()
	a := time.Date(2026, 1, 2, 3, 4, 5, 999999999, time.UTC)
	b := time.Date(2026, 1, 2, 3, 4, 6, 1, time.UTC)
	for i, at := range []time.Time{b, a} {
		if err := s.CreateTenant(t.Context(), store.Tenant{ID: fmt.Sprintf("t%d", i), Name: "n", CreatedAt: at}); err != nil {
			t.Fatal(err)
		}
	}
	ts, err := s.ListTenants(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	var got []time.Time
	for _, tn := range ts {
		if tn.ID == "t0" || tn.ID == "t1" {
			got = append(got, tn.CreatedAt)
		}
	}
	if len(got) != 2 || !got[0].Equal(a) || !got[1].Equal(b) {
		t.Errorf("times %v, want [%v %v] (nanoseconds kept, in time order)", got, a, b)
	}
}

func TestTextIsComparedBytewise(t *testing.T) {
	s := openDSN(t, server.NewDatabase(t))
	defer s.Close()
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	// In the C collation upper case sorts before lower case, as in SQLite.
	for _, id := range []string{"b", "B", "a"} {
		if err := s.CreateTenant(t.Context(), store.Tenant{ID: id, Name: id, CreatedAt: at}); err != nil {
			t.Fatal(err)
		}
	}
	ts, err := s.ListTenants(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, tn := range ts {
		if tn.CreatedAt.Equal(at) {
			ids = append(ids, tn.ID)
		}
	}
	if want := []string{"B", "a", "b"}; !reflect.DeepEqual(ids, want) {
		t.Errorf("tenants with one created_at in order %v, want %v", ids, want)
	}
}

func TestCloseIsIdempotent(t *testing.T) {
	s := openDSN(t, server.NewDatabase(t))
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second close: %v", err)
	}
}

func TestRebindSkipsQuotedText(t *testing.T) {
	for in, want := range map[string]string{
		"SELECT 1":                                      "SELECT 1",
		"a = ? AND b = ?":                               "a = $1 AND b = $2",
		"x = '?' AND y = ?":                             "x = '?' AND y = $1",
		`"we?ird" = ? OR z = 'it''s ?' OR w = ?`:        `"we?ird" = $1 OR z = 'it''s ?' OR w = $2`,
		"a = ?1 OR b = ?1 OR c = ?2":                    "a = $1 OR b = $1 OR c = $2",
		"VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ?": "VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12) $13",
	} {
		if got := rebind(in); got != want {
			t.Errorf("rebind(%q) = %q, want %q", in, got, want)
		}
	}
}

// Two stores on one database are two daemons of a cluster. Observation
// sequence numbers are read-then-written (MAX(seq)+1); without the write lock
// the two would take the same number and one would fail with ErrConflict.
func TestWritersOfTwoStoresOnOneDatabaseAreSerialised(t *testing.T) {
	dsn := server.NewDatabase(t)
	a, b := openDSN(t, dsn), openDSN(t, dsn)
	defer a.Close()
	defer b.Close()
	ctx := t.Context()
	if _, err := a.CreateSandbox(ctx, store.Sandbox{ID: "sb", TenantID: store.DefaultTenant, Name: "sb", TemplateID: "t",
		State: store.StateRunning, CreatedAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
	const perWriter = 40
	var wg sync.WaitGroup
	errc := make(chan error, 4*perWriter)
	for i := range 4 {
		st := a
		if i%2 == 1 {
			st = b
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range perWriter {
				if _, err := st.AppendObservation(ctx, store.ObservationWrite{TenantID: store.DefaultTenant, SandboxID: "sb",
					Kind: "note", Principal: "test", Payload: []byte(`{}`)}); err != nil {
					errc <- err
				}
			}
		}()
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Errorf("append observation: %v", err)
	}
	obs, err := b.ListObservations(ctx, store.DefaultTenant, "sb", store.ObservationFilter{Limit: store.MaxStateList})
	if err != nil {
		t.Fatal(err)
	}
	if len(obs) != 4*perWriter {
		t.Fatalf("%d observations, want %d", len(obs), 4*perWriter)
	}
	for i, o := range obs {
		if o.Seq != int64(i+1) {
			t.Fatalf("observation %d has seq %d, want gapless 1..%d", i, o.Seq, 4*perWriter)
		}
	}
}
