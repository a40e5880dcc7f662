package sqldb

import (
	"context"
	"database/sql"
	"fmt"
	"io/fs"
	"path"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/stead-dev/stead/internal/errs"
)

// Migration is one schema step, read from a file named
// NNNN_description.sql.
type Migration struct {
	Version int    // NNNN
	Name    string // the file name without .sql
	SQL     string // the statements
}

// Migrator is how an engine applies migrations.
type Migrator struct {
	// Prepare, if set, runs once on db before the first migration, outside
	// a transaction.
	Prepare func(ctx context.Context, db *sql.DB) error
	// Begin, if set, runs first in each migration's transaction: it takes
	// the engine's migration lock and creates schema_migrations if needed.
	Begin func(ctx context.Context, tx *sql.Tx) error
	// Record is the statement recording an applied migration in
	// schema_migrations: its three parameters are version, name and
	// applied_at, in the engine's placeholders.
	Record string
}

// LoadMigrations returns the migrations in fsys's folder dir in version order.
// Versions must be unique and start at 1; a gap is allowed (features built
// side by side reserve numbers: 0013 may land before 0011), and migrate
// applies every version the database has not recorded, in order.
func LoadMigrations(fsys fs.FS, dir string) ([]Migration, error) {
	names, err := fs.Glob(fsys, path.Join(dir, "*.sql"))
	if err != nil {
		return nil, fmt.Errorf("list migrations: %w", err)
	}
	var ms []Migration
	for _, p := range names {
		base := path.Base(p)
		num, _, ok := strings.Cut(base, "_")
		v, err := strconv.Atoi(num)
		if !ok || err != nil || v <= 0 {
			return nil, fmt.Errorf("load migration %s: name must be NNNN_description.sql", base)
		}
		b, err := fs.ReadFile(fsys, p)
		if err != nil {
			return nil, fmt.Errorf("load migration %s: %w", base, err)
		}
		ms = append(ms, Migration{Version: v, Name: strings.TrimSuffix(base, ".sql"), SQL: string(b)})
	}
	sort.Slice(ms, func(i, j int) bool { return ms[i].Version < ms[j].Version })
	for i, m := range ms {
		if i == 0 && m.Version != 1 || i > 0 && m.Version == ms[i-1].Version {
			return nil, fmt.Errorf("load migration %s: versions must start at 1 and be unique", m.Name)
		}
	}
	return ms, nil
}

// Migrate brings the database on db to the last of ms. Each migration runs
// in its own transaction together with its schema_migrations row, after m's
// Begin, and the current version is re-read inside that transaction, so
// (with Begin or the transaction holding a lock that excludes other
// migrators) two processes opening the same database at once apply each
// migration exactly once, and a crash leaves the schema at a recorded
// version. A database whose schema is newer than the last of ms is refused
// with an error wrapping errs.ErrUnsupported.
func Migrate(ctx context.Context, db *sql.DB, ms []Migration, m Migrator) error {
	if m.Prepare != nil {
		if err := m.Prepare(ctx, db); err != nil {
			return err
		}
	}
	for {
		done, err := migrateOne(ctx, db, ms, m)
		if err != nil {
			return err
		}
		if done {
			return nil
		}
	}
}

// migrateOne applies the next pending migration, or reports done when there
// is none.
func migrateOne(ctx context.Context, db *sql.DB, ms []Migration, mr Migrator) (done bool, err error) {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return false, fmt.Errorf("begin migration: %w", err)
	}
	defer func() {
		if err != nil || done {
			_ = tx.Rollback()
		}
	}()
	if mr.Begin != nil {
		if err := mr.Begin(ctx, tx); err != nil {
			return false, err
		}
	}
	var cur int
	if err := tx.QueryRowContext(ctx, "SELECT COALESCE(MAX(version), 0) FROM schema_migrations").Scan(&cur); err != nil {
		return false, fmt.Errorf("read schema version: %w", err)
	}
	last := 0
	if len(ms) > 0 {
		last = ms[len(ms)-1].Version
	}
	if cur > last {
		return false, fmt.Errorf("database schema version %d is newer than this build of stead supports (%d); upgrade stead: %w",
			cur, last, errs.ErrUnsupported)
	}
	rows, err := tx.QueryContext(ctx, "SELECT version FROM schema_migrations")
	if err != nil {
		return false, fmt.Errorf("read schema versions: %w", err)
	}
	applied := map[int]bool{}
	for rows.Next() {
		var v int
		if err := rows.Scan(&v); err != nil {
			rows.Close()
			return false, fmt.Errorf("read schema versions: %w", err)
		}
		applied[v] = true
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return false, fmt.Errorf("read schema versions: %w", err)
	}
	next := -1
	for i, m := range ms {
		if !applied[m.Version] {
			next = i
			break
		}
	}
	if next < 0 {
		return true, nil
	}
	m := ms[next]
	if _, err := tx.ExecContext(ctx, m.SQL); err != nil {
		return false, fmt.Errorf("apply migration %s: %w", m.Name, err)
	}
	at, err := FormatTime(time.Now())
	if err != nil {
		return false, err
	}
	if _, err := tx.ExecContext(ctx, mr.Record, m.Version, m.Name, at); err != nil {
		return false, fmt.Errorf("record migration %s: %w", m.Name, err)
	}
	if err := tx.Commit(); err != nil {
		return false, fmt.Errorf("commit migration %s: %w", m.Name, err)
	}
	return false, nil
}
