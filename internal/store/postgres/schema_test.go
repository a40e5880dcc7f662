package postgres

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	_ "modernc.org/sqlite" // the driver of the SQLite store, to read its schema

	"github.com/stead-dev/stead/internal/store/sqlite"
)

// columnsOf returns "table.column type" for every column the rows of q
// (table, column, type) name, sorted.
func columnsOf(ctx context.Context, t *testing.T, db interface {
	QueryContext(context.Context, string, ...any) (*sql.Rows, error)
}, q string) []string {
	t.Helper()
	rows, err := db.QueryContext(ctx, q)
	if err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var table, col, typ string
		if err := rows.Scan(&table, &col, &typ); err != nil {
			t.Fatal(err)
		}
		out = append(out, fmt.Sprintf("%s.%s %s", table, col, typ))
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	slices.Sort(out)
	return out
}

// TestSchemaMirrorsSQLite: every table and column of a migrated SQLite
// store exists in a migrated PostgreSQL store, with the mirrored type, and
// no other (but the engines' own counters). A SQLite migration without its
// PostgreSQL twin fails here.
func TestSchemaMirrorsSQLite(t *testing.T) {
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "stead.db")
	lite, err := sqlite.Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	lite.Close()
	raw, err := sql.Open("sqlite", path+"?_query_only=1")
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	liteCols := columnsOf(ctx, t, raw, `SELECT m.name, p.name, p.type FROM sqlite_schema m, pragma_table_info(m.name) p
		WHERE m.type = 'table' AND m.name NOT IN ('sqlite_sequence', 'schema_migrations') ORDER BY 1, 2`)
	mirror := map[string]string{"TEXT": "text", "INTEGER": "bigint", "REAL": "double precision", "BLOB": "bytea"}
	var want []string
	for _, c := range liteCols {
		name, typ, _ := strings.Cut(c, " ")
		m, ok := mirror[strings.ToUpper(typ)]
		if !ok {
			t.Fatalf("SQLite column %s has type %q, which has no PostgreSQL mirror here", name, typ)
		}
		want = append(want, name+" "+m)
	}
	slices.Sort(want)

	pg := openDSN(t, server.NewDatabase(t))
	defer pg.Close()
	got := columnsOf(ctx, t, pg.db, `SELECT table_name, column_name, data_type FROM information_schema.columns
		WHERE table_schema = current_schema() AND table_name NOT IN ('store_sequences', 'schema_migrations')`)
	if !reflect.DeepEqual(got, want) {
		missing, extra := diff(want, got), diff(got, want)
		t.Fatalf("PostgreSQL schema differs from SQLite's:\n  missing in PostgreSQL: %v\n  only in PostgreSQL: %v", missing, extra)
	}
	// Text columns compare bytewise, as SQLite's do.
	var notC int
	if err := pg.db.QueryRowContext(ctx, `SELECT COUNT(*) FROM information_schema.columns WHERE table_schema = current_schema()
		AND data_type = 'text' AND collation_name IS DISTINCT FROM 'C'`).Scan(&notC); err != nil {
		t.Fatal(err)
	}
	if notC != 0 {
		t.Errorf("%d text columns are not in the C collation", notC)
	}
}

// diff returns the elements of a not in b.
func diff(a, b []string) []string {
	var out []string
	for _, x := range a {
		if !slices.Contains(b, x) {
			out = append(out, x)
		}
	}
	return out
}
